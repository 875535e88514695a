"""The math of the objective: advantages, losses, token log-probs, engine mismatch."""
