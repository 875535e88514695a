"""The one training loop and what it uses: checkpoints, logging, distributed helpers."""
