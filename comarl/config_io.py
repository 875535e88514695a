"""Filling config dataclasses from YAML dicts and ``key=value`` overrides.

Dataclasses are the source of truth. Unknown keys, wrong types and bad values
raise :class:`ConfigError` naming the dotted key (``train.num_generations``).

A dataclass may declare ``ALIASES`` (old key -> dotted path inside it): a config made
before its fields moved into sections keeps working (``train.num_generations`` is
``train.rollout.num_generations``), in files, in ``key=value`` overrides (:func:`canonical`,
:func:`canonical_key`) and, with :func:`aliased`, as keyword arguments and attributes.

Values are read as YAML 1.2 (core schema), in files and in overrides alike: ``12:30``,
``no``, ``on`` and ``2026-01-01`` are strings, ``1e-3`` is a number. Then the field's type
decides: a ``str`` field takes the text as written (``data.eval.split=[4:8]`` is
``"[4:8]"``); untyped places (``env.args``) keep the YAML 1.2 value.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
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


@dataclasses.dataclass(frozen=True)
class Written:
    """A YAML value that is not a string, with the text it was written as.

    Config YAML keeps this pair so that the dataclass field decides: a ``str`` field takes the text
    (``split: [4:8]`` -> ``"[4:8]"``, ``name: 007`` -> ``"007"``), every other field the value.
    :func:`from_dict` resolves every one of them; :func:`plain` strips them from untyped data.
    """

    value: Any
    text: str


# YAML 1.2 core schema (yaml.org/spec/1.2.2, 10.3.2): no base-60 (12:30), no yes/no/on/off booleans,
# no dates, no 1_000; 1e-3 is a float and 010 is ten. PyYAML implements YAML 1.1, so its implicit
# resolvers are replaced here (the merge key << is kept: configs use anchors).
_CORE = [
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("tag:yaml.org,2002:int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
                                r"|[-+]?(\.inf|\.Inf|\.INF)|\.nan|\.NaN|\.NAN", "-+.0123456789"),
    ("tag:yaml.org,2002:null", r"null|Null|NULL|~|", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:merge", r"<<", "<"),
]


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 core-schema resolution (plain values: ints, floats, bools, None)."""

    yaml_implicit_resolvers: dict = {}

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        if text[:2] in ("0o", "0x"):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)

    def construct_yaml_float(self, node):
        text = self.construct_scalar(node).lower()
        if text.endswith((".inf", ".nan")):
            return float(text.replace(".", ""))
        return float(text)


for _tag, _regexp, _first in _CORE:
    _Yaml12Loader.add_implicit_resolver(_tag, re.compile(f"^(?:{_regexp})$"), list(_first))
_Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _Yaml12Loader.construct_yaml_int)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _Yaml12Loader.construct_yaml_float)


class _ConfigLoader(_Yaml12Loader):
    """YAML 1.2 whose plain ints, floats and bools come as :class:`Written` (mapping keys stay plain)."""

    def construct_object(self, node, deep=False):
        value = super().construct_object(node, deep)
        if (isinstance(node, yaml.ScalarNode) and node.style is None and value is not None
                and not isinstance(value, (str, Written))):
            return Written(value, node.value)
        return value

    def construct_mapping(self, node, deep=False):
        return {plain(k): v for k, v in super().construct_mapping(node, deep).items()}


def load_yaml(text: str, keep_text: bool = False) -> Any:
    """Parse YAML text with YAML 1.2 core-schema values (``keep_text``: non-strings as :class:`Written`)."""
    return yaml.load(text, Loader=_ConfigLoader if keep_text else _Yaml12Loader)  # noqa: S506 (safe loaders)


def plain(value: Any) -> Any:
    """``value`` with every :class:`Written` replaced by its value (in lists and mappings too)."""
    if isinstance(value, Written):
        return plain(value.value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def read_yaml(path, keep_text: bool = True) -> Any:
    """Parse a YAML config file (YAML 1.2 values; non-strings as :class:`Written` unless ``keep_text`` is
    False, for :func:`from_dict`); a syntax error becomes a :class:`ConfigError` naming file, line and column."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise ConfigError(f"config file {path}: cannot read it ({e.strerror})") from None
    try:
        return load_yaml(text, keep_text)
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
    """Check/convert ``value`` to annotation ``tp``; error names ``key``.

    A :class:`Written` value gives a ``str`` field its text as written and every other field its value.
    """
    optional, inner = _is_optional(tp)
    if isinstance(value, Written):
        if inner is str and value.value is not None:
            return value.text
        value = value.value
    if tp is Any:
        return plain(value)
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
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
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
            raise ConfigError(f"{key}: expected a mapping, got {plain(value)!r}")
        return plain(dict(value))
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _BOOL_WORDS:  # a bool field: yes/no can mean nothing else
            return _BOOL_WORDS[value.lower()]
        raise ConfigError(f"{key}: expected true/false, got {plain(value)!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"[-+]?[0-9]+(_[0-9]+)*", value):  # 1_000 (YAML 1.1 read it)
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {plain(value)!r}")
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
        raise ConfigError(f"{key}: expected a string, got {plain(value)!r}")
    return plain(value)


_BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}


# ----------------------------------------------------------------- aliases (keys that moved into sections)

def aliases(cls) -> dict[str, str]:
    """``cls.ALIASES``: old key -> dotted path inside ``cls`` (empty for a class without)."""
    found = getattr(cls, "ALIASES", None)
    return found if isinstance(found, dict) else {}


def _is_alias(cls, key: str, value: Any = None, last: bool = True) -> bool:
    """An alias applies to ``key`` unless ``key`` is also a field and names that section (a mapping, or a
    path that goes on): ``preference.rounds: 3`` is the count, ``preference.rounds: {...}`` the section."""
    if key not in aliases(cls):
        return False
    if key in {f.name for f in dataclasses.fields(cls)}:
        return last and not isinstance(value, dict)
    return True


def _field_class(cls, name: str):
    """The dataclass a field of ``cls`` holds (also inside Optional / list), else None."""
    try:
        tp = typing.get_type_hints(cls).get(name)
    except Exception:
        return None
    _, tp = _is_optional(tp)
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        args = typing.get_args(tp)
        tp = args[0] if args else None
    return tp if dataclasses.is_dataclass(tp) else None


def canonical(cls, data: Any, prefix: str = "") -> Any:
    """``data`` (a YAML mapping for dataclass ``cls``) with every aliased key moved to its section, at every
    level; a key given both ways is an error that names both."""
    if not isinstance(data, dict) or not dataclasses.is_dataclass(cls):
        return data
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items() if not _is_alias(cls, k, v)}
    for k, v in data.items():
        if not _is_alias(cls, k, v):
            continue
        path = aliases(cls)[k].split(".")
        node = out
        for part in path[:-1]:
            if not isinstance(node.setdefault(part, {}), dict):
                node[part] = dict(node[part]) if isinstance(node[part], dict) else {}
            node = node[part]
        if path[-1] in node:
            where = f"{prefix}." if prefix else ""
            raise ConfigError(f"{where}{k} and {where}{'.'.join(path)} are the same key (the first is its old "
                              f"name); give it once")
        node[path[-1]] = v
    for k, v in out.items():
        sub = _field_class(cls, k)
        key = f"{prefix}.{k}" if prefix else k
        if sub is not None and isinstance(v, dict):
            _misplaced(cls, k, v, prefix)
            out[k] = canonical(sub, v, key)
        elif sub is not None and isinstance(v, list):
            out[k] = [canonical(sub, x, f"{key}.{i}") for i, x in enumerate(v)]
    return out


def canonical_key(cls, key: str) -> str:
    """A dotted override key with every aliased part replaced by its path (``train.num_generations`` ->
    ``train.rollout.num_generations``); list indices and ``*`` pass through."""
    parts, out = key.split("."), []
    i = 0
    while i < len(parts):
        part = parts[i]
        if cls is not None and _is_alias(cls, part, last=i == len(parts) - 1):
            parts[i:i + 1] = aliases(cls)[part].split(".")
            continue
        out.append(part)
        if cls is not None and dataclasses.is_dataclass(cls) and not (part.isdigit() or part == "*"):
            sub = _field_class(cls, part)
            if sub is not None:
                try:
                    tp = typing.get_type_hints(cls).get(part)
                    _, tp = _is_optional(tp)
                    listed = typing.get_origin(tp) in (list, tuple)
                except Exception:
                    listed = False
                if listed and i + 1 < len(parts):
                    out.append(parts[i + 1])  # the index
                    i += 1
            cls = sub
        i += 1
    return ".".join(out)


def aliased(cls):
    """Class decorator for a sectioned config dataclass with ``ALIASES``: its constructor also takes the old
    flat keys as keyword arguments, and reading or setting an old name reaches the field in its section
    (``TrainConfig(num_generations=4).num_generations`` is ``.rollout.num_generations``)."""
    init = cls.__init__
    names = {f.name for f in dataclasses.fields(cls)}

    def __init__(self, *args, **kwargs):
        flat = {k: kwargs.pop(k) for k in list(kwargs) if k in aliases(cls) and not (
            k in names and dataclasses.is_dataclass(kwargs[k]))}
        unknown = sorted(set(kwargs) - names)
        if unknown:  # Python's own message names no close key
            flat = {k: v for k, v in aliases(cls).items() if k not in names}
            raise TypeError(unknown_key_message(unknown[0], names, flat, python_name=cls.__name__))
        init(self, *args, **kwargs)
        for k, v in flat.items():
            setattr(self, k, v)

    def __getattr__(self, name):
        path = aliases(cls).get(name)
        if path is None or name.startswith("__"):
            raise AttributeError(f"{cls.__name__} has no attribute {name!r}")
        obj = self
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj

    def __setattr__(self, name, value):
        path = aliases(cls).get(name)
        if path is None or (name in names and dataclasses.is_dataclass(value)):
            object.__setattr__(self, name, value)
            return
        *head, last = path.split(".")
        obj = self
        for part in head:
            obj = getattr(obj, part)
        setattr(obj, last, value)

    __init__.__doc__ = init.__doc__
    cls.__init__, cls.__getattr__, cls.__setattr__ = __init__, __getattr__, __setattr__
    return cls


def from_dict(cls, data: dict, prefix: str = ""):
    """Build dataclass ``cls`` from ``data`` (old keys of ``ALIASES`` accepted); unknown keys are errors."""
    data = canonical(cls, data, prefix)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        flat = {k: v for k, v in aliases(cls).items() if k not in names}
        raise ConfigError(unknown_key_message(unknown[0], names, flat, prefix))
    kwargs = {}
    for k, v in data.items():
        try:
            kwargs[k] = coerce(v, hints[k], f"{prefix}.{k}" if prefix else k)
        except ConfigError as e:
            raise ConfigError(_with_old_name(str(e), cls, prefix)) from None
    return cls(**kwargs)


def unknown_key_message(key: str, fields: set[str], flat: dict[str, str] | None = None, prefix: str = "",
                        python_name: str | None = None) -> str:
    """``unknown config key train.num_generation (did you mean train.num_generations (train.rollout.
    num_generations)?)``: the closest of the ``fields`` and the ``flat`` keys (aliases -> their section path)
    by difflib, or, when none is close, the fields (not the ~60 aliases). ``python_name``: the class, for a
    keyword argument (``TrainConfig(num_generation=4)``)."""
    where, flat = f"{prefix}." if prefix else "", flat or {}
    close = difflib.get_close_matches(key, sorted(fields | set(flat)), n=2, cutoff=0.7)
    sections = f" and the keys inside its sections ({', '.join(sorted(flat)[:3])}, ...)" if flat else ""
    if python_name is not None:
        hint = f"did you mean {' or '.join(close)}?" if close else f"it takes {', '.join(sorted(fields))}{sections}"
        return f"{python_name}() got an unknown argument {key!r} ({hint})"
    if close:
        named = [where + c + (f" ({where}{flat[c]})" if c in flat else "") for c in close]
        return f"unknown config key {where}{key} (did you mean {' or '.join(named)}?)"
    return (f"unknown config key {where}{key} (none of {prefix or 'the top level'}'s keys is close; it has "
            f"{', '.join(sorted(fields))}{sections})")


def _misplaced(cls, key: str, section: dict, prefix: str) -> None:
    """A key of one section written in another (``train.rollout.batch_size``): name the section that has it."""
    sub = _field_class(cls, key)
    if sub is None:
        return
    own = {f.name for f in dataclasses.fields(sub)} | set(aliases(sub))
    for name in section:
        if name not in own and name in aliases(cls):
            where = f"{prefix}." if prefix else ""
            raise ConfigError(f"unknown config key {where}{key}.{name} (did you mean {where}{aliases(cls)[name]}, "
                              f"or {where}{name}?)")


def _with_old_name(message: str, cls, prefix: str) -> str:
    """An error about a key that moved into a section names it by its short name, as every message did before
    the sections and as the key may still be written: ``train.batch_size: ...`` for ``train.run.batch_size``."""
    where = f"{prefix}." if prefix else ""
    for old, path in aliases(cls).items():
        full = where + path
        if message.startswith(full + ":") or message.startswith(full + " "):
            return f"{where}{old}{message[len(full):]}"
    return message


def parse_value(text: str) -> Any:
    """Parse the right side of ``key=value`` as YAML 1.2 (so 3, 1e-5, true, [1,2] work).

    A value that is not a string comes as :class:`Written` with the text as typed, so that a ``str``
    field takes ``[4:8]``, ``12:30`` or ``007`` as written (:func:`coerce`); text that is no YAML is a string.
    """
    try:
        value = load_yaml(text, keep_text=True)
    except yaml.YAMLError:
        return text
    if value is None or isinstance(value, (str, Written)):
        return value
    return Written(value, text.strip())


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
        for part in parts[:-1]:
            nxt = []
            for t in targets:
                if isinstance(t, list):
                    idxs = range(len(t)) if part == "*" else [_index(part, key, len(t))]
                    nxt.extend(t[i] for i in idxs)
                else:
                    t.setdefault(part, {})
                    if t[part] is None:
                        t[part] = {}
                    elif isinstance(t[part], Written) and isinstance(t[part].value, (list, dict)):
                        t[part] = t[part].value  # a list set by an earlier override, now indexed
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
