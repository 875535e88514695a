"""The metric keys comarl's code writes, found in its source, and the keys docs/logs.md documents.

Metric keys are written in a few dozen places (the rollout, each update, the critic, the preference rounds, the
environments), not declared in one table, so this module reads them out of the source with ``ast``:

- a string or f-string with a ``/`` that is a key of a dict literal or comprehension, the subscript of an
  assignment (``metrics["tree/nodes"] = ...``) or the first argument of ``add_metric``;
- any key of a dict literal, subscript or ``update(...)`` keyword written into a name that holds metrics
  (``metrics``, ``self.metrics``): the keys without a ``/`` (``epoch``, ``tokens_per_s``, ``pass_rate``).

Keys written by an environment (a file under ``comarl/envs/``, or inside a ``Transition(...)``) reach the logs as
``env/<key>`` (``rollout/tree.py`` adds the prefix), so they are returned with it. An f-string's replacement fields
become placeholders: ``f"{name}/loss"`` is ``<agent>/loss``.

``tests/e2e/test_docs_logs.py`` checks every key found here, and every key real runs log, against the page;
``docs/site_hooks.py`` appends the list found here to the page on every build (``render_index``).
"""
from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX_MARKER = "<!-- metric-key-index -->"

_SLASHED = re.compile(r"^[A-Za-z_{][A-Za-z0-9_{}.\[\]]*(/[A-Za-z0-9_{}.\[\]]+)+$")
_PLAIN = re.compile(r"^[a-z][a-z0-9_]*$")
_METRIC_NAMES = ("metrics", "self.metrics")  # names of dicts that hold metrics
_ENV_METRIC_NAMES = ("m", "parts")  # ... and in an environment: the reward's parts, merged into its metrics
_PLACEHOLDER = re.compile(r"<[^<>]*>")
# where a dict with a slash in a key is not a metrics dict: (file, key) -> why
NOT_METRICS = {("comarl/training/logging.py", "s/step"): "the progress bar's postfix",
               ("comarl/training/logging.py", "reward"): "the progress bar's postfix"}
# an f-string's replacement field -> the placeholder the page uses
PLACEHOLDERS = {
    "name": "agent", "agent.name": "agent", "team.agents[i].name": "agent", "self.agent_names[i]": "agent",
    "agents[a].name": "agent", "self.names[c]": "agent", "turn": "t", "si": "s", "i": "i", "k": "key",
    "key": "key", "d.type": "device", "d.index": "",
    "self.name": "helper",
}


@dataclass(frozen=True)
class CodeKey:
    """One metric key as the code writes it: ``template`` with ``<placeholders>``, its file and line."""

    template: str
    file: str
    line: int


def _template(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                expr = ast.unparse(v.value)
                parts.append(f"<{PLACEHOLDERS.get(expr, expr)}>")
        return "".join(parts).replace("<device><>", "<device>")
    return None


def _candidates(tree: ast.AST, env_file: bool):
    """(key node, written into a metrics name?, inside a Transition call?) for every place a key is written."""
    names = _METRIC_NAMES + (_ENV_METRIC_NAMES if env_file else ())

    def _holds_metrics(node: ast.AST) -> bool:
        return ast.unparse(node) in names

    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def in_transition(node: ast.AST) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Transition"):
                return True
        return False

    def named(node: ast.AST) -> bool:
        """A dict written into a metrics name: assigned to it, passed to its ``update``, or ``**``-spread
        inside such a dict."""
        up = parents.get(node)
        if isinstance(up, ast.Assign):
            return any(_holds_metrics(t) for t in up.targets)
        if isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute) and up.func.attr == "update":
            return _holds_metrics(up.func.value)
        if isinstance(up, ast.Dict) and any(k is None and v is node for k, v in zip(up.keys, up.values)):
            return named(up)
        if isinstance(up, ast.Call) and ast.unparse(up.func).endswith("Transition"):  # Transition(r, done, nxt, m)
            return node in up.args[3:4] or any(kw.arg == "metrics" and kw.value is node for kw in up.keywords)
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
            slashed = any(_SLASHED.match(_template(k) or "") for k in keys)
            for k in keys:
                yield k, named(node) or slashed, in_transition(node)
        elif isinstance(node, ast.DictComp):
            yield node.key, named(node), in_transition(node)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript):
                    yield t.slice, _holds_metrics(t.value), in_transition(node)
                elif isinstance(t, ast.Name) and t.id == "key":  # key = f"route/{...}"; metrics[key] = ...
                    yield node.value, False, False
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "add_metric" and node.args:
                yield node.args[0], False, False
            elif node.func.attr == "update" and _holds_metrics(node.func.value):
                for kw in node.keywords:
                    if kw.arg is not None:
                        yield ast.Constant(kw.arg, lineno=node.lineno), True, False


def code_keys(root: Path = ROOT) -> list[CodeKey]:
    """Every metric key template written under ``root/comarl``, sorted, one entry per (template, file)."""
    found: dict[tuple[str, str], CodeKey] = {}
    for path in sorted((root / "comarl").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        env_file = rel.startswith("comarl/envs/")
        for node, named, transition in _candidates(ast.parse(path.read_text(encoding="utf-8")), env_file):
            key = _template(node)
            if key is None or (rel, key) in NOT_METRICS:
                continue
            bare = _PLACEHOLDER.sub("x", key)
            if not (_SLASHED.match(bare) or (named and _PLAIN.match(bare))):
                continue
            if (env_file or transition) and not key.startswith("env/"):
                key = f"env/{key}"
            found.setdefault((key, rel), CodeKey(key, rel, node.lineno))
    return sorted(found.values(), key=lambda k: (k.template, k.file))


# ---------------------------------------------------------------- the page

_ROW = re.compile(r"^\|(.+?)\|")
_CODE = re.compile(r"`([^`]+)`")


def documented_patterns(markdown: str) -> list[str]:
    """The keys docs/logs.md documents: the code spans in the first column of its tables, with ``<...>``
    placeholders (``<agent>/loss``, ``stage<s>/spread``)."""
    out = []
    for line in markdown.splitlines():
        m = _ROW.match(line.strip())
        if not m or set(m.group(1).strip()) <= {"-", ":", " "}:
            continue
        out += [c for c in _CODE.findall(m.group(1)) if _SLASHED.match(_PLACEHOLDER.sub("x", c)) or _PLAIN.match(c)]
    return out


def _glob(pattern: str) -> str:
    return _PLACEHOLDER.sub("*", pattern)


def documented(key: str, patterns: list[str]) -> bool:
    """Whether a logged key (``agent0/loss``) or a code template (``<agent>/loss``) is one of ``patterns``.
    ``eval/<key>`` is documented when ``<key>`` is (evaluation logs the rollout's keys under ``eval/``)."""
    if key.startswith("eval/"):  # the page's own eval/<key> row is this rule, not a pattern
        return documented(key[len("eval/"):], patterns)
    key = _glob(key)
    for p in patterns:
        g = _glob(p)
        if not p.startswith("eval/") and (fnmatch.fnmatchcase(key, g) or fnmatch.fnmatchcase(g, key)):
            return True
    return False


def render_index(keys: list[CodeKey]) -> str:
    """The generated list at the end of docs/logs.md: each key template and the files that write it."""
    files: dict[str, list[str]] = {}
    for k in keys:
        files.setdefault(k.template, []).append(k.file)
    rows = ["| Key, as the code writes it | Written in |", "|---|---|"]
    rows += [f"| `{t}` | {', '.join(f'`{f}`' for f in fs)} |" for t, fs in files.items()]
    return "\n".join(rows) + "\n"


__all__ = ["CodeKey", "INDEX_MARKER", "code_keys", "documented", "documented_patterns", "render_index"]
