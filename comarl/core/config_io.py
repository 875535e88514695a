"""Filling config dataclasses from YAML dicts and ``key=value`` overrides.

Dataclasses are the source of truth. Unknown keys, wrong types and bad values
raise :class:`ConfigError` naming the dotted key (``train.rollout.num_generations``).

A dataclass decorated with :func:`aliased` keeps the old names of fields that moved into sections
(:class:`Moved` attributes, ``train.num_generations`` for ``train.rollout.num_generations``) for one
release: in files, in ``key=value`` overrides (:func:`canonical`, :func:`canonical_key`), as keyword
arguments and as attributes, each use with a one-line :class:`DeprecatedKey` warning naming the new key.

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
import warnings
from typing import Any, Union

import yaml
from typing_extensions import deprecated


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
        with open(path, encoding="utf-8") as f:
            text = f.read()
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
        args = typing.get_args(tp)
        if len(args) == 2 and dataclasses.is_dataclass(args[1]):  # a mapping of sections (helpers.<name>)
            return {str(k): coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
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


# ----------------------------------------------------------------- old spellings (deprecated, one release)

REMOVED_IN = "0.2"
"""The comarl version that stops accepting the old spellings (flat ``train`` keys, moved keys)."""


class DeprecatedKey(FutureWarning):
    """A config key, keyword argument or attribute written in a spelling that comarl 0.2 drops: a flat ``train``
    key (``train.num_generations``), or a key that moved (``train.critic.entropy_coef``).

    A FutureWarning, not a DeprecationWarning: the old spellings are written by the people who run comarl (YAML
    files, ``key=value`` overrides), and Python shows FutureWarnings to them by default, while a
    DeprecationWarning raised inside comarl is hidden unless they turn warnings on."""


def warn_old(old: str, new: str, stacklevel: int = 3) -> None:
    """One line naming the old spelling and the one to write instead."""
    warnings.warn(f"{old} is deprecated, write {new} (comarl {REMOVED_IN} drops the old spelling; "
                  f"scripts/migrate_config_keys.py rewrites YAML files)", DeprecatedKey, stacklevel=stacklevel)


T = typing.TypeVar("T")


class Moved(typing.Generic[T]):
    """The old name of a field that moved into a section, as an attribute: reading or setting it warns
    (:class:`DeprecatedKey`) and reaches the field at ``path`` (dotted, inside the same object).

    Written out in the class body (``num_generations = Moved[int]("rollout.num_generations")``) rather than
    served by a dynamic ``__getattr__``: mypy sees each old name with its type, and, as ``__get__``/``__set__``
    are marked ``@deprecated``, reports every use of one in comarl (``enable_error_code = deprecated``).
    :func:`aliased` turns them into the class's ``ALIASES`` for YAML, overrides and keyword arguments."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = ""
        self.owner = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.owner = name, owner.__name__

    @typing.overload
    def __get__(self, obj: None, owner: type | None = None) -> Moved[T]: ...

    @typing.overload
    @deprecated("an old config key: read it from its section", category=None)  # warned by warn_old at run time
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        warn_old(f"{self.owner}.{self.name}", f"{self.owner}.{self.path}")
        *head, last = self.path.split(".")
        for part in head:
            obj = getattr(obj, part)
        return getattr(obj, last)

    @deprecated("an old config key: set it in its section", category=None)
    def __set__(self, obj: object, value: T) -> None:
        warn_old(f"{self.owner}.{self.name}", f"{self.owner}.{self.path}")
        *head, last = self.path.split(".")
        for part in head:
            obj = getattr(obj, part)
        setattr(obj, last, value)


def aliases(cls) -> dict[str, str]:
    """``cls.ALIASES``: old key -> dotted path inside ``cls`` (empty for a class without). An old key may be
    dotted too (``critic.entropy_coef`` -> ``loss.entropy_coef``: a key that moved between sections)."""
    found = getattr(cls, "ALIASES", None)
    return found if isinstance(found, dict) else {}


def _is_alias(cls, key: str, value: Any = None, last: bool = True) -> bool:
    """An alias applies to ``key`` unless ``key`` is also a field and names that section (a mapping, or a
    path that goes on)."""
    if key not in aliases(cls) or "." in key:
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


def _take_dotted(cls, data: dict, out: dict, where: str) -> None:
    """Move the dotted old keys of ``cls`` (``critic.entropy_coef``) found in ``data`` to their paths in ``out``."""
    for old, path in aliases(cls).items():
        if "." not in old:
            continue
        *head, last = old.split(".")
        node: Any = data
        for part in head:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or last not in node:
            continue
        parent = out
        for part in head:
            parent[part] = dict(parent[part])
            parent = parent[part]
        _put(out, path.split("."), parent.pop(last), f"{where}{old}", where)


def _put(out: dict, path: list[str], value: Any, old: str, where: str) -> None:
    """``value``, written under the old key ``old``, set at ``path`` in ``out`` (copying the mappings on the way),
    with a warning; an error if the new key is there too."""
    node = out
    for part in path[:-1]:
        if not isinstance(node.setdefault(part, {}), dict):
            node[part] = {}
        node[part] = dict(node[part])
        node = node[part]
    if path[-1] in node:
        raise ConfigError(f"{old} and {where}{'.'.join(path)} are the same key (the first is its old name); "
                          f"give it once")
    warn_old(old, f"{where}{'.'.join(path)}", stacklevel=5)
    node[path[-1]] = value


def canonical(cls, data: Any, prefix: str = "") -> Any:
    """``data`` (a YAML mapping for dataclass ``cls``) with every old key moved to its section, at every level,
    each with a :class:`DeprecatedKey` warning; a key given both ways is an error that names both."""
    if not isinstance(data, dict) or not dataclasses.is_dataclass(cls):
        return data
    where = f"{prefix}." if prefix else ""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items() if not _is_alias(cls, k, v)}
    for k, v in data.items():
        if _is_alias(cls, k, v):
            _put(out, aliases(cls)[k].split("."), v, where + k, where)
    _take_dotted(cls, data, out, where)
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
    """A dotted override key with every old part replaced by its path (``train.num_generations`` ->
    ``train.rollout.num_generations``, with a :class:`DeprecatedKey` warning); list indices and ``*`` pass
    through."""
    parts, out = key.split("."), list[str]()
    i = 0
    while i < len(parts):
        part = parts[i]
        moved = _dotted_at(cls, parts, i)
        if moved is not None:
            old, path = moved
            warn_old(".".join(out + parts[i:i + len(old)]), ".".join(out + path))
            parts[i:i + len(old)] = path
            continue
        if cls is not None and _is_alias(cls, part, last=i == len(parts) - 1):
            new = aliases(cls)[part].split(".")
            warn_old(".".join(out + [part]), ".".join(out + new))
            parts[i:i + 1] = new
            continue
        out.append(part)
        if cls is not None and dataclasses.is_dataclass(cls) and not (part.isdigit() or part == "*"):
            sub = _field_class(cls, part)
            if sub is not None and _listed(cls, part) and i + 1 < len(parts):
                out.append(parts[i + 1])  # the index
                i += 1
            cls = sub
        i += 1
    return ".".join(out)


def _dotted_at(cls, parts: list[str], i: int) -> tuple[list[str], list[str]] | None:
    """The dotted old key of ``cls`` that ``parts[i:]`` starts with, as (old parts, new parts), or None."""
    for old, path in aliases(cls).items():
        split = old.split(".")
        if len(split) > 1 and parts[i:i + len(split)] == split:
            return split, path.split(".")
    return None


def aliased(cls):
    """Class decorator for a sectioned config dataclass: its :class:`Moved` attributes (and ``MOVED_KEYS``, old
    dotted keys -> paths) become ``cls.ALIASES``; its constructor also takes the old names as keyword arguments,
    with a :class:`DeprecatedKey` warning (``TrainConfig(num_generations=4)`` sets ``.rollout.num_generations``).
    A ``MOVED_OUT`` mapping (old keyword -> its new key outside the class, ``entropy_coef`` ->
    ``train.loss.entropy_coef``) keeps such a keyword's value in ``moved_out(obj)`` for the owner to place."""
    cls.ALIASES = {**{name: d.path for name, d in vars(cls).items() if isinstance(d, Moved)},
                   **getattr(cls, "MOVED_KEYS", {})}
    init = cls.__init__
    names = {f.name for f in dataclasses.fields(cls)}
    out_of: dict[str, str] = getattr(cls, "MOVED_OUT", {})

    def __init__(self, *args, **kwargs):
        flat = {k: kwargs.pop(k) for k in list(kwargs) if k in aliases(cls) and "." not in k and not (
            k in names and dataclasses.is_dataclass(kwargs[k]))}
        gone = {k: kwargs.pop(k) for k in list(kwargs) if k in out_of}
        unknown = sorted(set(kwargs) - names)
        if unknown:  # Python's own message names no close key
            raise TypeError(unknown_key_message(unknown[0], names, _leaves(cls), python_cls=cls))
        init(self, *args, **kwargs)
        for k, v in flat.items():
            section, _, rest = aliases(cls)[k].partition(".")
            shown = f"{section}={_section_class(cls, section)}({rest}=...)" if rest else f"{section}=..."
            warn_old(f"{cls.__name__}({k}=...)", f"{cls.__name__}({shown})")
            obj = self
            *head, last = aliases(cls)[k].split(".")
            for part in head:
                obj = getattr(obj, part)
            setattr(obj, last, v)
        for k, v in gone.items():
            warn_old(f"{cls.__name__}({k}=...)", out_of[k])
            self.__dict__.setdefault(_MOVED_OUT, {})[out_of[k]] = v

    __init__.__doc__ = init.__doc__
    cls.__init__ = __init__
    return cls


_MOVED_OUT = "_comarl_moved_out"


def moved_out(obj: Any) -> dict[str, Any]:
    """The values given to ``obj``'s constructor under a keyword that moved out of its class (new key -> value),
    taken (emptied) by this call: the owner of both sections places them (``TrainConfig`` for
    ``CriticSettings(entropy_coef=...)``)."""
    return obj.__dict__.pop(_MOVED_OUT, {}) if hasattr(obj, "__dict__") else {}


def _section_class(cls, name: str) -> str:
    sub = _field_class(cls, name)
    return sub.__name__ if sub is not None else name


def _leaves(cls) -> dict[str, str]:
    """Key -> its path for the keys one level down in ``cls``'s sections (``num_generations`` ->
    ``rollout.num_generations``): the suggestions for a misspelt key, in the new spelling."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        sub = _field_class(cls, f.name)
        if sub is not None and not _listed(cls, f.name):
            for g in dataclasses.fields(sub):
                out.setdefault(g.name, f"{f.name}.{g.name}")
    return out


def _listed(cls, name: str) -> bool:
    """Whether field ``name`` of ``cls`` holds a list (``agents``): its keys are reached through an index."""
    try:
        _, tp = _is_optional(typing.get_type_hints(cls).get(name))
    except Exception:
        return False
    return typing.get_origin(tp) in (list, tuple)


def from_dict(cls, data: dict, prefix: str = ""):
    """Build dataclass ``cls`` from ``data`` (old keys of ``ALIASES`` accepted, with a warning); unknown keys are
    errors."""
    data = canonical(cls, data, prefix)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(unknown_key_message(unknown[0], names, _leaves(cls), prefix))
    kwargs = {k: coerce(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    return cls(**kwargs)


def unknown_key_message(key: str, fields: set[str], leaves: dict[str, str] | None = None, prefix: str = "",
                        python_cls: type | None = None) -> str:
    """``unknown config key train.num_generation (did you mean train.rollout.num_generations?)``: the closest of
    the ``fields`` and the keys inside the sections (``leaves``: key -> its path) by difflib, each named by its
    path, or, when none is close, the fields (not the ~100 keys inside). ``python_cls``: the class, for a
    keyword argument (``TrainConfig(num_generation=4)`` -> ``rollout=RolloutConfig(num_generations=...)``)."""
    where, leaves = f"{prefix}." if prefix else "", leaves or {}
    close = difflib.get_close_matches(key, sorted(fields | set(leaves)), n=2, cutoff=0.7)
    inside = f" and the keys inside its sections ({', '.join(sorted(leaves)[:3])}, ...)" if leaves else ""
    if python_cls is not None:
        def python(name: str) -> str:
            if name in fields or name not in leaves:
                return name
            section, leaf = leaves[name].split(".", 1)
            return f"{section}={_section_class(python_cls, section)}({leaf}=...)"
        hint = (f"did you mean {' or '.join(python(c) for c in close)}?" if close
                else f"it takes {', '.join(sorted(fields))}{inside}")
        return f"{python_cls.__name__}() got an unknown argument {key!r} ({hint})"
    if close:
        named = [where + (c if c in fields else leaves[c]) for c in close]
        return f"unknown config key {where}{key} (did you mean {' or '.join(named)}?)"
    return (f"unknown config key {where}{key} (none of {prefix or 'the top level'}'s keys is close; it has "
            f"{', '.join(sorted(fields))}{inside})")


def _misplaced(cls, key: str, section: dict, prefix: str) -> None:
    """A key of one section written in another (``train.rollout.batch_size``): name the section that has it."""
    sub = _field_class(cls, key)
    if sub is None:
        return
    own = {f.name for f in dataclasses.fields(sub)} | set(aliases(sub))
    leaves = _leaves(cls)
    for name in section:
        if name not in own and name in leaves:
            where = f"{prefix}." if prefix else ""
            raise ConfigError(f"unknown config key {where}{key}.{name} (did you mean {where}{leaves[name]}?)")


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


def old_spellings(root, prefix: str = "") -> dict[str, str]:
    """Every old key under dataclass ``root`` -> its key now, as full dotted paths (``train.num_generations`` ->
    ``train.rollout.num_generations``, ``train.critic.entropy_coef`` -> ``train.loss.entropy_coef``); a list of
    sections is written ``agents.<i>``. For scripts/migrate_config_keys.py and the test that no shipped file uses
    an old key."""
    where = f"{prefix}." if prefix else ""
    out = {where + old: where + path for old, path in aliases(root).items()}
    for f in dataclasses.fields(root):
        sub = _field_class(root, f.name)
        if sub is not None and sub is not root:
            out.update(old_spellings(sub, where + f.name + (".<i>" if _listed(root, f.name) else "")))
    return out
