"""Rewrite config files, docs and Python code from the old config keys to the sectioned ones.

comarl 0.1 moved the flat ``train`` keys into sections (``train.num_generations`` ->
``train.rollout.num_generations``, ``train.preference.beta`` -> ``train.preference.dpo.beta``), moved
``train.critic.entropy_coef`` to ``train.loss.entropy_coef`` and renamed ``train.hardware.generation_batch_size``
to ``train.hardware.prompts_per_generate``. The old spellings warn until comarl 0.2, then stop working. This
script rewrites them, in place, keeping comments, order and layout:

* YAML files (``.yaml``, ``.yml``): the keys under ``train`` move into their sections, block by block;
* Markdown (``.md``): every `````yaml`` block as a YAML file, every ````python`` block as Python, and every
  dotted mention (``train.num_generations=8``) in the text;
* Python (``.py``): keyword arguments of ``TrainConfig(...)`` and ``PreferenceSettings(...)`` calls grouped into
  section objects (``TrainConfig(rollout=RolloutConfig(num_generations=4))``), the section classes added to
  the import that brings ``TrainConfig``, and dotted mentions in strings and comments;
* any other text file (``.sh``, ``.txt``): dotted mentions.

Each rewritten YAML text is checked: it must read as the same experiment as before and hold no old key. What
cannot be rewritten safely (a flow mapping ``train: {num_generations: 4}``, ``TrainConfig(**kwargs)``,
``CriticSettings(entropy_coef=...)``) is listed for a hand edit, with its line.

    python scripts/migrate_config_keys.py my_configs/ notes.md train.py      # rewrite in place
    python scripts/migrate_config_keys.py --check configs/                    # list, change nothing (exit 1 if any)
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a clone without installing: this checkout's comarl
    sys.path.insert(0, str(ROOT))

from comarl.config import ExperimentConfig  # noqa: E402
from comarl.core.config_io import DeprecatedKey, canonical, load_yaml, old_spellings  # noqa: E402

OLD = old_spellings(ExperimentConfig)
"""Full old key -> full key now (``train.num_generations`` -> ``train.rollout.num_generations``)."""
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*)\s*:(?=\s|$)(?P<rest>.*)$")


class NeedsHand(Exception):
    """Something the script does not rewrite (the message names the line); the file is left as it was."""


# ----------------------------------------------------------------- mentions in text: train.num_generations=8

_MENTION = re.compile(r"(?<!\w)(" + "|".join(re.escape(k) for k in sorted(OLD, key=len, reverse=True))
                      + r")(?![\w])")


def migrate_mentions(text: str) -> str:
    """Every dotted old key in ``text`` (``train.num_generations=8``, ```train.preference.beta```) -> the new."""
    return _MENTION.sub(lambda m: OLD[m.group(1)], text)


# ----------------------------------------------------------------- YAML, line by line


@dataclasses.dataclass
class Entry:
    """One key of a block mapping: its lines (leading comments included) and where its key line is."""

    key: str
    lines: list[str]
    head: int  # index of the key line in ``lines``


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _entries(lines: list[str], indent: int) -> tuple[list[str], list[Entry]]:
    """Split a block mapping's lines (all at ``indent`` or deeper) into what comes before its first key and its
    entries; comment and blank lines go with the key after them."""
    before: list[str] = []
    entries: list[Entry] = []
    pending: list[str] = []
    for line in lines:
        m = KEY_LINE.match(line)
        if m and len(m.group("indent")) == indent:
            entries.append(Entry(m.group("key"), pending + [line], len(pending)))
            pending = []
        elif not line.strip() or line.lstrip().startswith("#"):
            pending.append(line)
        elif entries:
            entries[-1].lines += pending + [line]
            pending = []
        else:
            before += pending + [line]
            pending = []
    if entries:
        entries[-1].lines += pending
    else:
        before += pending
    return before, entries


def _children(entry: Entry) -> tuple[int, list[str]] | None:
    """(indent, lines) of the block mapping under ``entry``'s key, or None when its value is on its line or is
    not a mapping."""
    rest = KEY_LINE.match(entry.lines[entry.head]).group("rest").split("#")[0].strip()
    body = entry.lines[entry.head + 1:]
    content = [line for line in body if line.strip() and not line.lstrip().startswith("#")]
    if rest or not content or not KEY_LINE.match(content[0]):
        return None
    return _indent(content[0]), body


def _shift(lines: list[str], by: int) -> list[str]:
    """Lines moved right (``by`` > 0) or left; blank lines stay blank."""
    return [((" " * by + line) if by >= 0 else line[-by:]) if line.strip() else line for line in lines]


def _renamed(e: Entry, key: str) -> Entry:
    lines = list(e.lines)
    lines[e.head] = re.sub(r"^( *)[A-Za-z_][\w-]*", lambda m: m.group(1) + key, lines[e.head], count=1)
    return Entry(key, lines, e.head)


def _trailing(lines: list[str]) -> int:
    """How many of ``lines`` at the end are blank or comments (they stay at the end of their block)."""
    n = 0
    while n < len(lines) and (not lines[-1 - n].strip() or lines[-1 - n].lstrip().startswith("#")):
        n += 1
    return n


def _migrate_mapping(lines: list[str], indent: int, step: int, path: str,
                     where: str) -> tuple[list[str], list[tuple[str, Entry]]]:
    """The block mapping ``lines`` (keys at ``indent``, children ``step`` further in; at dotted ``path``) with its
    old keys moved into their sections; returns (lines, entries that move out of it: (new full key, entry with
    its indent removed))."""
    cut = len(lines) - _trailing(lines)
    lines, tail = lines[:cut], lines[cut:]
    before, entries = _entries(lines, indent)
    order: list[Entry | str] = []  # kept entries and, where the first new section is to go, NEW_SECTIONS
    into: dict[str, list[Entry]] = {}  # section name -> entries moving into it (indent removed)
    outward: list[tuple[str, Entry]] = []
    existing = {e.key for e in entries}

    def arrive(new: str, e: Entry) -> None:
        rel = new[len(path) + 1:].split(".") if path and new.startswith(path + ".") else None
        if rel is None:
            outward.append((new, e))
        elif len(rel) == 1:
            order.append(_renamed(Entry(e.key, _shift(e.lines, indent), e.head), rel[0]))
        elif len(rel) == 2:
            if not any(name not in existing for name in into) and rel[0] not in existing:
                order.append(NEW_SECTIONS)
            into.setdefault(rel[0], []).append(_renamed(e, rel[1]))
        else:
            raise NeedsHand(f"{where}: {new} is more than one section below {path}; move it by hand")

    for e in entries:
        full = f"{path}.{e.key}" if path else e.key
        value = KEY_LINE.match(e.lines[e.head]).group("rest").split("#")[0].strip()
        if full in OLD:
            arrive(OLD[full], Entry(e.key, _shift(e.lines, -indent), e.head))
            continue
        if not any(k.startswith(full + ".") for k in OLD):
            order.append(e)
            continue
        child = _children(e)
        if child is None:
            if value.startswith("{") and old_keys_in(load_yaml("\n".join(_shift(e.lines, -indent))), path):
                raise NeedsHand(f"{where}: {full} is a flow mapping ({value[:30]}...) holding old keys; write it "
                                f"as a block mapping, or move them by hand")
            order.append(e)
            continue
        sub_indent, body = child
        new_body, out = _migrate_mapping(body, sub_indent, sub_indent - indent, full, where)
        for new, moved in out:
            arrive(new, moved)
        if any(line.strip() and not line.lstrip().startswith("#") for line in new_body):
            order.append(Entry(e.key, e.lines[:e.head + 1] + new_body, e.head))  # else all its keys moved out
    kept = {x.key: x for x in order if isinstance(x, Entry)}
    out_lines = list(before)
    for x in order:
        if isinstance(x, Entry):
            if x.key in into:  # an existing section: the moved keys go at its end
                child = _children(x)
                if child is None:
                    raise NeedsHand(f"{where}: {path}.{x.key} is not a block mapping; move its keys by hand")
                end = len(x.lines) - _trailing(x.lines[x.head + 1:])
                x = Entry(x.key, x.lines[:end] + [line for e in into[x.key] for line in _shift(e.lines, child[0])]
                          + x.lines[end:], x.head)
            out_lines += x.lines
        else:  # the new sections, in their dataclass's field order
            fields = [f.name for f in dataclasses.fields(_class_at(path))]
            for name in sorted((n for n in into if n not in kept), key=fields.index):
                out_lines.append(" " * indent + f"{name}:")
                out_lines += [line for e in into[name] for line in _shift(e.lines, indent + step)]
    return out_lines + tail, outward


NEW_SECTIONS = "<new sections>"


def _class_at(path: str) -> type:
    """The config dataclass at dotted ``path`` (``train.preference`` -> PreferenceSettings)."""
    from comarl.core.config_io import _field_class

    cls = ExperimentConfig
    for part in path.split("."):
        if part != "<i>":
            cls = _field_class(cls, part)
    return cls


def migrate_yaml(text: str, where: str = "<text>") -> str:
    """A YAML experiment's text with every old key moved into its section (comments and layout kept); raises
    :class:`NeedsHand` for what it does not rewrite and ``AssertionError`` if the result would read differently."""
    new_lines, out = _migrate_mapping(text.split("\n"), 0, 2, "", where)
    if out:
        raise NeedsHand(f"{where}: cannot place {out[0][0]}")
    new = "\n".join(new_lines)
    if new != text:
        check_same(text, new, where)
    return new


def check_same(old: str, new: str, where: str) -> None:
    """``new`` reads as ``old`` does (old keys moved) and holds no old key."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecatedKey)
        before = canonical(ExperimentConfig, load_yaml(old) or {})
    after = load_yaml(new) or {}
    left = old_keys_in(after)
    assert not left, f"{where}: the rewrite left old keys {left}"
    assert _pruned(after) == _pruned(before), f"{where}: the rewrite reads differently:\n{before}\n{after}"


def _pruned(data: Any) -> Any:
    """``data`` without empty mappings (a section left empty, ``critic: {}``, means its defaults, as no key)."""
    if isinstance(data, dict):
        return {k: _pruned(v) for k, v in data.items() if v != {}}
    return data


def old_keys_in(data: Any, path: str = "") -> list[str]:
    """The old keys in a parsed YAML experiment (full dotted paths)."""
    found: list[str] = []
    if isinstance(data, dict):
        for k, v in data.items():
            full = f"{path}.{k}" if path else str(k)
            if full in OLD:
                found.append(full)
            found += old_keys_in(v, full + (".<i>" if full == "agents" else ""))
    elif isinstance(data, list) and path.endswith("<i>"):
        for item in data:
            found += old_keys_in(item, path)
    return found


# ----------------------------------------------------------------- Python: TrainConfig(num_generations=4, ...)

WIDTH = 120


def _sections_of(cls: type) -> dict[str, tuple[str, str]]:
    """Old keyword of ``cls`` -> (section field, its class name) for the flat keys that moved one level down;
    a renamed keyword (same level) -> ("", new name)."""
    from comarl.core.config_io import _field_class, aliases

    out = {}
    for old, path in aliases(cls).items():
        parts = path.split(".")
        if "." in old:
            continue
        if len(parts) == 1:
            out[old] = ("", parts[0])
        else:
            sub = _field_class(cls, parts[0])
            out[old] = (parts[0], sub.__name__)
    return out


def _aliased_classes() -> dict[str, type]:
    """Name -> class for the config classes whose keywords have old names."""
    from comarl.config import HardwareConfig, TrainConfig
    from comarl.critics.settings import CriticSettings
    from comarl.preference.settings import PreferenceSettings

    return {c.__name__: c for c in (TrainConfig, PreferenceSettings, HardwareConfig, CriticSettings)}


def _call_name(node: ast.Call) -> tuple[str, str] | None:
    """(prefix, class name) of ``TrainConfig(...)`` / ``comarl.TrainConfig(...)`` calls of an aliased class."""
    f = node.func
    if isinstance(f, ast.Name) and f.id in _aliased_classes():
        return "", f.id
    if isinstance(f, ast.Attribute) and f.attr in _aliased_classes():
        return ast.unparse(f.value) + ".", f.attr
    return None


Arg = Any
"""A call argument: its text, or (prefix, head, [arguments]) for a call written by the script
(``run=RunConfig(...)``: prefix ``run=``, head ``RunConfig``)."""


def _flat(arg: Arg) -> str:
    if isinstance(arg, str):
        return arg
    prefix, head, inner = arg
    return f"{prefix}{head}({', '.join(_flat(a) for a in inner)})"


def _wrap(head: str, args: list[Arg], col: int) -> str:
    """``head(arg, arg, ...)`` starting at column ``col``, wrapped at argument boundaries to ``WIDTH`` with the
    continuation lines under the first argument; an argument that fits on no line is wrapped inside."""
    if col + len(_flat(("", head, args))) <= WIDTH:
        return _flat(("", head, args))
    inner = col + len(head) + 1
    text = head + "("
    for i, a in enumerate(args):
        end = ", " if i < len(args) - 1 else ")"
        here = col + len(text) if "\n" not in text else len(text.rsplit("\n", 1)[1])
        flat = _flat(a) + end.rstrip()
        if here + len(flat) > WIDTH and not text.endswith("("):
            text = text.rstrip() + "\n" + " " * inner
            here = inner
        if here + len(flat) > WIDTH and not isinstance(a, str):
            prefix, sub_head, sub_args = a
            text += prefix + _wrap(sub_head, sub_args, here + len(prefix)) + end
        else:
            text += _flat(a) + end
    return text


HOMES = {"RolloutConfig": ("comarl", "comarl.config"), "LossConfig": ("comarl", "comarl.config"),
         "RunConfig": ("comarl", "comarl.config"), "HardwareConfig": ("comarl", "comarl.config"),
         "PairSettings": ("comarl.preference", "comarl.preference.settings"),
         "DPOSettings": ("comarl.preference", "comarl.preference.settings"),
         "IterativeSettings": ("comarl.preference", "comarl.preference.settings")}
"""Section class -> the modules an import of it may come from (the first one the file imports from wins)."""


def _call_args(node: ast.Call, text: str, where: str, hand: list[str], needed: set[str]) -> list[Arg] | None:
    """The arguments of config call ``node`` with its old keywords grouped into section calls (or renamed), or
    None when it has none or needs a hand edit (then noted in ``hand``)."""
    prefix, name = _call_name(node)
    cls = _aliased_classes()[name]
    table = _sections_of(cls)
    for k in node.keywords:
        if k.arg in getattr(cls, "MOVED_OUT", {}):
            hand.append(f"{where}:{node.lineno}: {name}({k.arg}=...) is now {cls.MOVED_OUT[k.arg]}; move it by hand")
    if not any(k.arg in table for k in node.keywords):
        return None
    if any(k.arg is None for k in node.keywords):  # rewritten; what the mapping holds is the caller's to check
        hand.append(f"{where}:{node.lineno}: {name}(..., **...): check the keys the mapping holds")

    def seg(n: ast.AST) -> str:
        return ast.get_source_segment(text, n)

    sections = {section: head for section, head in table.values() if section}
    args: list[Arg] = [seg(a) for a in node.args]
    made: dict[str, list[Arg]] = {}  # section -> the inner arguments of its call
    for k in node.keywords:
        if k.arg in table and not table[k.arg][0]:  # renamed in place
            args.append(f"{table[k.arg][1]}={seg(k.value)}")
        elif k.arg is None:
            args.append(f"**{seg(k.value)}")
        elif k.arg in table or k.arg in sections:
            section = table[k.arg][0] if k.arg in table else k.arg
            if section not in made:
                made[section] = []
                args.append(("@", section, made[section]))
            if k.arg in table:
                made[section].append(f"{k.arg}={seg(k.value)}")
                continue
            value = k.value  # the section given too: its own keywords join the moved ones
            called = getattr(value.func, "id", None) or getattr(value.func, "attr", None) \
                if isinstance(value, ast.Call) else None
            if called != sections[section]:
                hand.append(f"{where}:{node.lineno}: {name}({section}=...) and old keywords of {section}; "
                            f"merge them by hand")
                return None
            made[section][:0] = [seg(x) for x in value.args] + [
                f"**{seg(x.value)}" if x.arg is None else f"{x.arg}={seg(x.value)}" for x in value.keywords]
        else:
            args.append(f"{k.arg}={seg(k.value)}")
    out: list[Arg] = []
    for a in args:
        if isinstance(a, tuple):
            section = a[1]
            out.append((f"{section}=", prefix + sections[section], a[2]))
            needed.add(sections[section])
        else:
            out.append(a)
    return out


def _positions(text: str):
    """(line, column) as ast gives them (1-based lines, columns in UTF-8 bytes) -> offset in ``text``."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    return lambda lineno, col: offsets[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode(errors="ignore"))


def migrate_python(text: str, where: str = "<text>") -> tuple[str, list[str]]:
    """``text`` with the old keywords of config calls grouped into section objects, the new classes imported,
    and mentions rewritten; returns (text, what needs a hand edit)."""
    hand: list[str] = []
    for attempt in range(5):  # a call inside a rewritten call is rewritten on the next pass
        try:
            tree = ast.parse(text)
        except SyntaxError:
            break
        pos = _positions(text)
        edits: list[tuple[int, int, str]] = []
        needed: set[str] = set()
        found: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) is not None:
                args = _call_args(node, text, where, found, needed)
                if args is not None:
                    start, end = pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset)
                    head = text[start:pos(node.func.end_lineno, node.func.end_col_offset)]
                    edits.append((start, end, _wrap(head, args, node.col_offset)))
        if attempt == 0:  # line numbers as in the file given
            hand = found
        if not edits:
            break
        for start, end, new in sorted(edits, reverse=True):
            if not any(s < start and end <= e for s, e, _ in edits):  # an inner call waits for the next pass
                text = text[:start] + new + text[end:]
        text = _import(text, {n for n in needed if n not in _qualified(text)}, where, hand)
    return migrate_mentions(text), hand


def _qualified(text: str) -> set[str]:
    """Section classes ``text`` only uses qualified (``comarl.RunConfig``): nothing to import for them."""
    return {n for n in HOMES if f".{n}(" in text and not re.search(rf"(?<![\w.]){n}\(", text)}


def _import(text: str, names: set[str], where: str, hand: list[str]) -> str:
    """``names`` added to the first ``from <home> import ...`` statement of ``text`` for each (:data:`HOMES`)."""
    for name in sorted(names):
        tree = ast.parse(text)
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module in HOMES[name]]
        if any(a.name == name for n in imports for a in n.names):
            continue
        if not imports:
            hand.append(f"{where}: add an import of {name} (from {HOMES[name][0]})")
            continue
        node = min(imports, key=lambda n: (HOMES[name].index(n.module), n.lineno))
        listed = sorted([ast.unparse(a) for a in node.names] + [name], key=lambda x: (not x[0].isupper(), x))
        lines = text.splitlines(keepends=True)
        start = sum(len(x) for x in lines[:node.lineno - 1]) + node.col_offset
        end = sum(len(x) for x in lines[:node.end_lineno - 1]) + node.end_col_offset
        stmt = f"from {node.module} import " + ", ".join(listed)
        if len(stmt) + node.col_offset > WIDTH:
            stmt = _wrap(f"from {node.module} import ", listed, node.col_offset)
        text = text[:start] + stmt + text[end:]
    return text


# ----------------------------------------------------------------- Markdown: yaml and python blocks, mentions

_FENCE = re.compile(r"^(?P<fence>```+)(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)


def migrate_markdown(text: str, where: str = "<text>") -> tuple[str, list[str]]:
    hand: list[str] = []
    out, pos = [], 0
    for m in _FENCE.finditer(text):
        out.append(migrate_mentions(text[pos:m.start("body")]))
        body, lang = m.group("body"), m.group("lang")
        line = text.count("\n", 0, m.start()) + 1
        if lang in ("yaml", "yml"):
            try:
                body = migrate_yaml(body, f"{where}:{line}")
            except NeedsHand as e:
                hand.append(str(e))
            body = migrate_mentions(body)
        elif lang in ("python", "py"):
            body, more = migrate_python(body, f"{where}:{line}")
            hand += more
        else:
            body = migrate_mentions(body)
        out.append(body)
        pos = m.end("body")
    out.append(migrate_mentions(text[pos:]))
    return "".join(out), hand


# ----------------------------------------------------------------- files


def migrate_text(path: Path, text: str) -> tuple[str, list[str]]:
    """The new text of the file at ``path`` and what needs a hand edit there."""
    where = str(path)
    if path.suffix in (".yaml", ".yml"):
        try:
            return migrate_mentions(migrate_yaml(text, where)), []
        except NeedsHand as e:
            return text, [str(e)]
    if path.suffix == ".md":
        return migrate_markdown(text, where)
    if path.suffix == ".py":
        return migrate_python(text, where)
    return migrate_mentions(text), []


def files(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".yaml", ".yml", ".md", ".py", ".sh",
                                                                                      ".txt"))
        else:
            out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="files or folders (.yaml/.yml, .md, .py, .sh, .txt in them)")
    ap.add_argument("--check", action="store_true", help="only list the files that would change (exit 1 if any)")
    args = ap.parse_args(argv)
    changed, hand = [], []
    for path in files(args.paths):
        text = path.read_text(encoding="utf-8")
        new, todo = migrate_text(path, text)
        hand += todo
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "would rewrite" if args.check else "rewrote"
    for p in changed:
        print(f"{verb} {p}")
    for h in hand:
        print(f"by hand: {h}")
    print(f"{len(changed)} file(s) {'to rewrite' if args.check else 'rewritten'}, {len(hand)} place(s) to edit by hand",
          file=sys.stderr)
    return 1 if (args.check and changed) or hand else 0


if __name__ == "__main__":
    sys.exit(main())
