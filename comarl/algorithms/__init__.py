"""Algorithms: small records of components, looked up by name for configs and the CLI."""
from .base import Algorithm, get_algorithm, register_algorithm

__all__ = ["Algorithm", "get_algorithm", "register_algorithm"]
