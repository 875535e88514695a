"""A run's folder: checkpoints, run files, held-out evaluation."""
