"""One registry per extension point (algorithms, environments, advantage estimators): a name -> object table
that knows its built-in modules, imports them on first use, and loads a user's object from ``package.module:NAME``
without any registration, so a user extends comarl without editing it.

An unknown name is an error naming the config key, the known names and the closest one ("did you mean").
"""
from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Generic, Mapping, TypeVar

from .config_io import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> ``T``.

    Args:
        what: what an entry is, for errors ("algorithm").
        key: the config key that names an entry ("train.algorithm").
        builtin: name -> module that registers it when imported (lazily, so a writing run loads no sandbox).
        from_import: turns the object found at ``package.module:NAME`` into a ``T`` (raise ``TypeError`` naming
            what was expected when it cannot); None: the object must already be a ``T`` (checked by ``kind``).
        kind: the class entries are instances of, for the check of an imported object when ``from_import`` is None.
        error: the exception raised for an unknown or bad name (``ConfigError`` unless a caller expects another).
    """

    def __init__(self, what: str, key: str, builtin: Mapping[str, str], *,
                 from_import: Callable[[Any, str], T] | None = None, kind: type | None = None,
                 error: type[Exception] = ConfigError):
        self.what, self.key, self.builtin = what, key, dict(builtin)
        self._from_import, self._kind, self._error = from_import, kind, error
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T, aliases: tuple[str, ...] = ()) -> T:
        for n in (name, *aliases):
            self._entries[n] = entry
        return entry

    def names(self) -> list[str]:
        return sorted(set(self._entries) | set(self.builtin))

    def get(self, name: str) -> T:
        if name in self._entries:
            return self._entries[name]
        if name in self.builtin:
            importlib.import_module(self.builtin[name])
            if name in self._entries:
                return self._entries[name]
        if ":" in name:
            return self._load(name)
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise self._error(f"{self.key}: unknown {self.what} {name!r}{hint} Known: {', '.join(self.names())} "
                          f"(or give package.module:NAME for your own)")

    def _load(self, spec: str) -> T:
        module, _, attr = spec.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, ValueError) as e:
            raise self._error(f"{self.key}: cannot import {spec!r} ({type(e).__name__}: {e})") from e
        try:
            if self._from_import is not None:
                entry = self._from_import(obj, spec)
            elif self._kind is not None and not isinstance(obj, self._kind):
                raise TypeError(f"is of type {type(obj).__name__}, not {self._kind.__name__}")
            else:
                entry = obj
        except TypeError as e:
            raise self._error(f"{self.key}: {spec!r} {e}") from e
        self._entries[spec] = entry
        return entry
