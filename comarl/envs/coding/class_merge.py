"""ClassEval's method split and class merge of comarl's preset (``presets/default.py``).

Split rule (``env.args.split``), over the benchmark's method order m_0..m_{M-1}
and N agents:

- ``alternate`` (default): method j goes to agent ``j mod N``.
- ``halves``: contiguous chunks of ``ceil(M/N)`` methods: agent 0 the first chunk, ...

Merged program: the benchmark's ``import_statement`` lines and the agents'
imports / the agents' module-level helper functions / the class header and
``__init__`` from the benchmark's ``class_constructor`` / each method: the
version of the agent it was assigned to, else another agent's version, else a
stub that raises ``NotImplementedError`` / extra methods agents added.
"""
from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .extract import Block, extract_code, is_stub, parses, split_blocks

SPLITS = ("alternate", "halves")
_SELF_DEF = re.compile(r"^(?:async\s+)?def\s+\w+\s*\(\s*self\b")


def split_methods(methods: Sequence[str], num_agents: int, rule: str = "alternate") -> list[list[str]]:
    """Methods per agent under ``rule`` (see module docstring)."""
    if rule == "alternate":
        return [list(methods[i::num_agents]) for i in range(num_agents)]
    if rule == "halves":
        size = max(1, math.ceil(len(methods) / num_agents))
        return [list(methods[i * size:(i + 1) * size]) for i in range(num_agents)]
    raise ValueError(f"env.args.split: must be one of {SPLITS}, got {rule!r}")


@dataclass(frozen=True)
class AgentCode:
    """What one agent's response contributes: imports, helper functions, methods by name."""

    imports: list[str]
    helpers: list[Block]
    methods: dict[str, Block]


def _class_body_blocks(block: Block) -> list[Block]:
    lines = block.text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.lstrip().startswith("class ")), 0)
    return split_blocks(textwrap.dedent("\n".join(lines[start + 1:])))


def parse_agent_code(response: str) -> AgentCode:
    """Methods (from any class in the response, or top-level ``def f(self, ...)``), helpers and imports."""
    imports, helpers = [], []
    methods: dict[str, Block] = {}
    for b in split_blocks(extract_code(response)):
        if b.kind == "import":
            imports.append(b.text)
        elif b.kind == "class":
            for m in _class_body_blocks(b):
                if m.kind == "def" and m.name is not None:  # a def block always has its name
                    methods[m.name] = m
        elif b.kind == "def" and b.name is not None:
            first = next(l for l in b.text.splitlines() if not l.startswith("@"))
            if _SELF_DEF.match(first):
                methods[b.name] = b
            else:
                helpers.append(b)
    return AgentCode(imports, helpers, methods)


@dataclass(frozen=True)
class MergedClass:
    """The merged program and what the reward needs.

    Attributes:
        program: imports + helpers + class.
        written: per agent, the benchmark methods it wrote with a real body.
        method_share: share of the benchmark methods with a real body in the class.
        overlap: benchmark methods written by two or more agents.
        compiled / syntax_error: whether ``program`` parses.
        spans: per benchmark method, the (first, last) lines of its definition in ``program`` (the sandbox
            checks that the class's method is still that definition after every test: ``TestJob.pinned``).
    """

    program: str
    written: tuple[tuple[str, ...], ...]
    method_share: float
    overlap: tuple[str, ...]
    compiled: bool
    syntax_error: str | None
    spans: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def _indent(text: str) -> str:
    return textwrap.indent(text, "    ", lambda l: True if l.strip() else False)


def merge_class(item: Mapping[str, Any], responses: Sequence[str], assignment: Sequence[Sequence[str]]) -> MergedClass:
    """Merge the agents' methods into the benchmark's class (rules in the module docstring)."""
    methods = list(item["methods"])
    codes = [parse_agent_code(r) for r in responses]
    written = [tuple(m for m in methods if m in c.methods and not is_stub(c.methods[m])) for c in codes]
    owner = {m: i for i, ms in enumerate(assignment) for m in ms}

    chosen = {}
    for m in methods:
        order = ([owner[m]] if m in owner else []) + [i for i in range(len(codes)) if i != owner.get(m)]
        for i in order:
            if m in written[i]:
                chosen[m] = codes[i].methods[m].text
                break
    extra = {}
    for c in codes:
        for name, b in c.methods.items():
            if name not in methods and name != "__init__" and name not in extra:
                extra[name] = b.text

    imports = list(dict.fromkeys(list(item.get("import_statement") or []) + [i for c in codes for i in c.imports]))
    helpers = {b.name: b.text for c in codes for b in c.helpers}
    ctor = item["class_constructor"].rstrip().splitlines()
    header, init = ctor[0].rstrip(), "\n".join(ctor[1:])
    parts = [header]
    if item.get("class_description", "").strip():
        parts.append(item["class_description"].rstrip())
    if init.strip():
        parts.append(textwrap.indent(textwrap.dedent(init), "    "))
    first_method = len(parts)
    for m in methods:
        text = chosen.get(m) or (f"def {m}(self, *args, **kwargs):\n"
                                 f"    raise NotImplementedError({m + ' was not written'!r})")
        parts.append(_indent(text))
    parts.extend(_indent(t) for t in extra.values())
    head = "\n".join(imports) + "\n\n" + "\n\n".join(helpers.values()) + "\n\n"
    program = head + "\n\n".join(parts) + "\n"
    line = head.count("\n") + 1 + sum(p.count("\n") + 2 for p in parts[:first_method])
    spans = {}
    for m, part in zip(methods, parts[first_method:]):
        spans[m] = (line, line + part.count("\n"))
        line += part.count("\n") + 2
    ok, err = parses(program)
    overlap = tuple(m for m in methods if sum(m in w for w in written) >= 2)
    share = len(chosen) / len(methods) if methods else 0.0
    return MergedClass(program, tuple(written), share, overlap, ok, err, spans)
