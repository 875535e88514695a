"""Filling config dataclasses from YAML dicts and ``key=value`` overrides.

Dataclasses are the source of truth. Unknown keys, wrong types and bad values
raise :class:`ConfigError` naming the dotted key (``train.num_generations``).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

import yaml


class UserError(Exception):
    """A mistake the user can fix (config, data, paths); the CLI prints its message and exits with status 2."""

    kind = "error"


class ConfigError(UserError, ValueError):
    """A configuration value is unknown, of the wrong type or impossible; the message names the key."""

    kind = "config error"


class DataError(UserError, ValueError):
    """A dataset cannot be read or a row lacks what the environment needs; the message names file and line."""

    kind = "data error"


def import_callable(spec: str, key: str):
    """``"package.module:function"`` -> that callable; ``ConfigError`` naming ``key`` otherwise."""
    import importlib

    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"{key}: cannot import {spec!r} ({type(e).__name__}: {e})") from e
    if not callable(fn):
        raise ConfigError(f"{key}: {spec!r} is not callable")
    return fn


def read_yaml(path) -> Any:
    """Parse a YAML file; a syntax error becomes a :class:`ConfigError` naming file, line and column."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise ConfigError(f"config file {path}: cannot read it ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: YAML syntax error: {problem} (check the indentation, a missing ':' "
                          f"or an unclosed quote/bracket on or just before that line)") from e


def _is_optional(tp) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return True, (args[0] if len(args) == 1 else Union[tuple(args)])
    return False, tp


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check/convert ``value`` to annotation ``tp``; error names ``key``."""
    if tp is Any:
        return value
    optional, inner = _is_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{key}: null is not allowed here")
    tp = inner
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: {value!r} matches none of {tp}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{key}: must be one of {list(typing.get_args(tp))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping for {tp.__name__}, got {type(value).__name__}")
        return from_dict(tp, value, key)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{key}: expected {len(args)} values, got {len(value)}")
            return tuple(coerce(v, a, f"{key}.{i}") for i, (v, a) in enumerate(zip(value, args)))
        elem = args[0] if args else Any
        seq = [coerce(v, elem, f"{key}.{i}") for i, v in enumerate(value)]
        return tuple(seq) if origin is tuple else seq
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def from_dict(cls, data: dict, prefix: str = ""):
    """Build dataclass ``cls`` from ``data``; unknown keys are errors."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown config key {where}{unknown[0]} (known: {', '.join(sorted(names))})")
    kwargs = {k: coerce(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    return cls(**kwargs)


def parse_value(text: str) -> Any:
    """Parse the right side of ``key=value`` as YAML (so 3, 1e-5, true, [1,2] work)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides to a nested dict (lists indexed by number,
    ``agents.*.lr=...`` sets every agent)."""
    for ov in overrides:
        if "=" not in ov:
            raise ConfigError(f"override {ov!r} must look like key=value")
        key, raw = ov.split("=", 1)
        parts = key.strip().split(".")
        value = parse_value(raw)
        targets = [data]
        for depth, part in enumerate(parts[:-1]):
            nxt = []
            for t in targets:
                if isinstance(t, list):
                    idxs = range(len(t)) if part == "*" else [_index(part, key, len(t))]
                    nxt.extend(t[i] for i in idxs)
                else:
                    t.setdefault(part, {})
                    if t[part] is None:
                        t[part] = {}
                    nxt.append(t[part])
            targets = nxt
        last = parts[-1]
        for t in targets:
            if isinstance(t, list):
                t[_index(last, key, len(t))] = value
            else:
                t[last] = value
    return data


def _index(part: str, key: str, n: int) -> int:
    try:
        i = int(part)
    except ValueError:
        raise ConfigError(f"override {key}: {part!r} must be a list index or *") from None
    if not 0 <= i < n:
        raise ConfigError(f"override {key}: index {i} out of range (0..{n - 1})")
    return i


def to_dict(obj) -> Any:
    """Dataclass -> plain YAML/JSON-able structure (model objects become their class name)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return f"<{type(obj).__name__}>"
