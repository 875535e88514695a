"""Data shipped with comarl: small benchmark fixtures (``fixtures/``) and how a config names them."""
from .paths import FIXTURES, fixture_names, fixture_path, package_path, resolve_source

__all__ = ["FIXTURES", "fixture_names", "fixture_path", "package_path", "resolve_source"]
