"""The Configuration reference page, generated from the config dataclasses.

Walks :class:`comarl.config.ExperimentConfig` field by field, recursively: a nested dataclass
(``train.critic``), a list of dataclasses (``agents.<i>``), an ``Optional[...]`` of a dataclass
(``env.reward_model``) and a dict of dataclasses (``<name>``) each become a section whose keys are
listed under it. Every key gets its dotted path (what ``key=value`` overrides take), its annotation
as written in the source, its default (as YAML would write it) and its docstring: the string literal
statement right after the field in the class body, read from the class source with :mod:`ast`.

Nothing here names a field of comarl's config, so new keys and sections appear on the page without
touching this file. The site's hook (``docs/site_hooks.py``) calls :func:`render` on every build;
``python docs/gen_config_reference.py`` prints the page.
"""
from __future__ import annotations

import ast
import dataclasses
import html
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any

LIST_INDEX = "<i>"
DICT_KEY = "<name>"


@dataclass(frozen=True)
class Key:
    """One row of the reference: a config key that holds a value (not a section)."""

    path: str
    type: str
    default: str
    doc: str
    old: tuple[str, ...] = ()
    """The key's names before it moved into its section or was renamed (deprecated spellings the config still
    accepts, with a warning, until comarl 0.2)."""


@dataclass(frozen=True)
class Section:
    """A dataclass reached through a field: its path, class, and the keys directly under it."""

    path: str
    cls: type
    type: str
    default: str
    doc: str
    keys: tuple[Key, ...]


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> docstring: the string statement right after ``name: type [= default]``.

    Fields of dataclass bases come first (a subclass's docstring wins). A field with no such
    string gets no entry.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        tree = ast.parse(source)
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef))
        body = node.body
        for stmt, nxt in zip(body, body[1:]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def annotation_text(cls: type) -> dict[str, str]:
    """Field name -> its annotation as written in the class body (``float | None``)."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        t = f.type
        out[f.name] = t if isinstance(t, str) else _type_name(t)
    return out


def _type_name(t: Any) -> str:
    if isinstance(t, type) and not typing.get_args(t):
        return t.__name__
    return repr(t).replace("typing.", "")


def _resolved_hints(cls: type) -> dict[str, Any]:
    """Field name -> the annotation as an object, or None where it cannot be evaluated."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a name only imported for type checking: resolve field by field
        module = sys.modules.get(cls.__module__)
        scope = dict(vars(module)) if module else {}
        hints = {}
        for f in dataclasses.fields(cls):
            try:
                hints[f.name] = eval(f.type, scope) if isinstance(f.type, str) else f.type  # noqa: S307
            except Exception:  # noqa: BLE001
                hints[f.name] = None
        return hints


def _dataclass_in(t: Any) -> tuple[type | None, str]:
    """The dataclass a field's type leads to and how: ('' direct, '?' optional, 'list', 'dict')."""
    if t is None:
        return None, ""
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        return t, ""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            inner, how = _dataclass_in(members[0])
            return inner, (how or "?")
        return None, ""
    if origin in (list, tuple, set, frozenset) or (origin is not None and _is_sequence(origin)):
        item_args = [a for a in args if a is not Ellipsis]
        if len(item_args) == 1:
            inner, how = _dataclass_in(item_args[0])
            if inner is not None and how in ("", "?"):
                return inner, "list"
        return None, ""
    if origin is dict or (origin is not None and _is_mapping(origin)):
        if len(args) == 2:
            inner, how = _dataclass_in(args[1])
            if inner is not None and how in ("", "?"):
                return inner, "dict"
    return None, ""


def _is_sequence(origin: Any) -> bool:
    import collections.abc as abc

    return isinstance(origin, type) and issubclass(origin, abc.Sequence) and not issubclass(origin, str)


def _is_mapping(origin: Any) -> bool:
    import collections.abc as abc

    return isinstance(origin, type) and issubclass(origin, abc.Mapping)


def _default(f: dataclasses.Field) -> tuple[bool, Any]:
    if f.default is not dataclasses.MISSING:
        return True, f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return True, f.default_factory()  # type: ignore[misc]
    return False, None


def format_default(value: Any) -> str:
    """A default as it would be written in a YAML file (``null``, ``true``, ``"magrpo"``, ``[0.9, 0.999]``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return f"{type(value).__name__}()"
    if isinstance(value, (list, tuple)) and value and all(dataclasses.is_dataclass(v) for v in value):
        return f"{len(value)} x {type(value[0]).__name__}()"
    try:
        return json.dumps(_plain(value))
    except (TypeError, ValueError):
        return repr(value)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def walk(root: type, prefix: str = "", _stack: tuple[type, ...] = (), _old: dict | None = None) -> list[Section]:
    """Every section under dataclass ``root`` (depth first, in field order), ``root`` itself first.

    ``root``'s own section has path ``prefix`` ('' for the top level). A dataclass met again
    inside itself is listed as a plain key, so recursive types end. A class with ``ALIASES`` (old key ->
    path inside it) gives each moved key its old names.
    """
    where = f"{prefix}." if prefix else ""
    aliases = getattr(root, "ALIASES", None)
    old = {path: list(names) for path, names in (_old or {}).items()}
    if isinstance(aliases, dict):
        for name, path in aliases.items():
            old.setdefault(where + path, []).append(where + name)
    docs = field_docs(root)
    hints = _resolved_hints(root)
    written = annotation_text(root)
    keys: list[Key] = []
    children: list[Section] = []
    for f in dataclasses.fields(root):
        if not f.init:  # not a config key: from_dict only fills init fields
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        has_default, value = _default(f)
        default = format_default(value) if has_default else "required"
        doc = docs.get(f.name, "")
        inner, how = _dataclass_in(hints.get(f.name))
        if inner is None or inner in _stack or inner is root:
            keys.append(Key(path, written[f.name], default, doc, tuple(old.get(path, ()))))
            continue
        sub_prefix = {"list": f"{path}.{LIST_INDEX}", "dict": f"{path}.{DICT_KEY}"}.get(how, path)
        sub = walk(inner, sub_prefix, _stack + (root,), old)
        head = sub[0]
        children.append(Section(sub_prefix, inner, written[f.name], default, doc, head.keys))
        children.extend(sub[1:])
    own = Section(prefix, root, root.__name__, "", _class_doc(root), tuple(keys))
    return [own] + children


def _class_doc(cls: type) -> str:
    doc = cls.__doc__ or ""
    if doc.startswith(f"{cls.__name__}("):  # dataclass's generated signature, not a docstring
        return ""
    return inspect.cleandoc(doc)


def all_keys(root: type) -> list[Key]:
    """Every key under ``root``, flattened, in page order."""
    return [k for s in walk(root) for k in s.keys]


_CODE = re.compile(r"(``?)(.+?)\1")


def md_text(text: str) -> str:
    """A docstring as one Markdown table cell: code spans kept (RST ``x`` -> `x`), the rest escaped."""
    text = " ".join(text.split())
    out, pos = [], 0
    for m in _CODE.finditer(text):
        out.append(_escape(text[pos:m.start()]))
        out.append(_code(m.group(2)))
        pos = m.end()
    out.append(_escape(text[pos:]))
    return "".join(out)


def _escape(text: str) -> str:
    text = html.escape(text, quote=False)
    for ch in "\\|*_[]`":
        text = text.replace(ch, "\\" + ch)
    return text


def _code(text: str) -> str:
    """A code span (a table cell may hold ``|`` inside one: Python-Markdown does not split there)."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _anchor(path: str) -> str:
    """``agents.<i>.lr`` -> ``agents.i.lr``: the key's id on the page (link ``configuration.md#train.run.seed``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", path.replace("<", "").replace(">", "")).strip("-") or "top-level"


def render(root: type | None = None) -> str:
    """The whole Markdown page for ``root`` (default :class:`comarl.config.ExperimentConfig`)."""
    if root is None:
        from comarl.config import ExperimentConfig as root  # noqa: N813
    sections = walk(root)
    lines = [
        "# Configuration reference",
        "",
        "Every key of an experiment config, generated from the dataclasses in the source on every build of",
        f"this site (`{root.__module__}.{root.__name__}` and the classes it holds), so it lists exactly what",
        "the code accepts. A YAML file sets them by section; on the command line a dotted key overrides one",
        "(`comarl train c.yaml train.rollout.num_generations=8 agents.0.temperature=0.7`). A key's old spelling "
        "(written flat under `train` before the sections) is noted beside it: deprecated, accepted with a warning "
        "until comarl 0.2 ([Old config keys](../runs.md#old-config-keys)). "
        f"`{LIST_INDEX}` is an index into a list (`agents.0.lr`, or `agents.*.lr` for every agent); "
        f"`{DICT_KEY}` a key of a mapping. Defaults are written as YAML writes them. "
        "An unknown key or a wrong type is an error that names the key.",
        "",
        f"{sum(len(s.keys) for s in sections)} keys in {sum(1 for s in sections if s.path or s.keys)} sections.",
        "",
        '<div class="config-reference" markdown>',  # md_in_html: the site's CSS keeps key paths on one line
        "",
    ]
    for s in sections:
        if not s.path and not s.keys:  # the root holds only sections
            continue
        title = s.path or "top level"
        lines.append(f"## {html.escape(title, quote=False)} {{#{_anchor(s.path)}}}")
        lines.append("")
        about = [f"`{s.cls.__name__}`"]
        if s.path:
            about.append(f"type {_code(s.type)}")
            about.append(f"default {_code(s.default)}")
        lines.append(" · ".join(about))
        lines.append("")
        for text in (s.doc, _class_doc(s.cls) if s.path else ""):
            if text:
                lines.append(md_text(text))
                lines.append("")
        if not s.keys:
            lines.append("No keys of its own; its sections follow.")
            lines.append("")
            continue
        lines.append("| key | type | default | description |")
        lines.append("|---|---|---|---|")
        for k in s.keys:
            anchor = f'<span id="{html.escape(_anchor(k.path))}"></span>'
            also = f" Old spelling (deprecated): {', '.join(_code(o) for o in k.old)}." if k.old else ""
            lines.append(f"| {anchor}{_code(k.path)} | {_code(k.type)} | {_code(k.default)} | {md_text(k.doc)}{also} |")
        lines.append("")
    lines += ["</div>", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
