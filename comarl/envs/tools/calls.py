"""From a model's free text to function calls, and from calls to canonical keys.

This is comarl's *lenient* parser: it reads calls out of text that BFCL's own
decoder rejects (a fence, prose, one call per line...). The number BFCL would give
comes from :mod:`.bfcl_decode` (the ``bfcl`` scoring mode).

Output formats (``fmt``):

- ``python`` / ``python_list``: Python call syntax, one call per line (``f(a=1)``)
  or a Python list of calls (``[f(a=1), g(b="x")]``, BFCL's form); dotted names
  (``math.hypot``) allowed. The two differ only in what the prompt asks for.
- ``json``: a JSON list of call objects, BFCL's ``{"function": ..., "parameters":
  {...}}`` or ``{"name": ..., "arguments": {...}}`` (arguments may be a JSON
  string), or ``{name: {...}}``.

``auto`` tries JSON when the text looks like it, then Python. Both strip
``<think>`` blocks and markdown fences; Python parsing skips prose lines and,
in a line that is not a call, picks out ``name(...)`` spans of the known
function names. Arguments must be keywords; values are literals or expressions
computed as BFCL computes them (:mod:`.arithmetic`: ``96 * 1`` is 96); a bare
name is kept as its text (BFCL treats it as a variable), ``true``/``false``/``null``
read as JSON.

Every text gets an answer in bounded time and memory (:mod:`.limits`): a text too
long, an expression too costly, a value too large or too deep, and whatever
Python's parser or ``json`` raise on it, make the response not parsed.
"""
from __future__ import annotations

import ast
import json
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from .arithmetic import evaluate, snippet
from .limits import MAX_CHARS, Budget, TooLarge, check_value

FORMATS = ("python", "python_list", "json", "auto")

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_JSON_NAMES = {"true": True, "false": False, "null": None, "none": None}


@dataclass(frozen=True)
class ToolCall:
    """One function call: a (possibly dotted) name and keyword arguments."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def as_bfcl(self) -> dict[str, dict[str, Any]]:
        """BFCL's decoded form ``{name: {arg: value}}``."""
        return {self.name: dict(self.args)}


@dataclass(frozen=True)
class ParsedCalls:
    """What one response held.

    Attributes:
        calls: the calls, in the order written.
        ok: True when at least one call was read, or the response says "no call"
            (empty, or ``[]``), and nothing that looked like a call failed to parse.
        errors: why call-like text was rejected (positional argument, bad value...).
    """

    calls: tuple[ToolCall, ...]
    ok: bool
    errors: tuple[str, ...] = ()


class _BadCall(ValueError):
    pass


# what Python's parser and json may raise on a text: SyntaxError, ValueError (a null byte, an int past 4,300
# digits), RecursionError (deep nesting), MemoryError (CPython's parser on e.g. 2,000 bare names in a row)
PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError)


def fenced_blocks(text: str) -> list[str]:
    """The bodies of markdown fences: after a line opening with three backticks, up to the next three
    backticks or the end (one pass; a regex with backtracking took quadratic time on rows of backticks).

    ``fenced_blocks("a\n```py\nf(x=1)\n```\nb") == ["f(x=1)\n"]``.
    """
    out, pos = [], 0
    while (start := text.find("```", pos)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:
            break
        end = text.find("```", newline + 1)
        out.append(text[newline + 1:] if end < 0 else text[newline + 1:end])
        if end < 0:
            break
        pos = end + 3
    return out


def clean_text(text: str) -> str:
    """Drop ``<think>`` blocks; keep only fenced code when there are fences."""
    text = _THINK.sub("", text or "")
    blocks = fenced_blocks(text)
    return "\n".join(b.strip() for b in blocks) if blocks else text.strip()


def parse_calls(text: str, fmt: str = "python", names: Iterable[str] = ()) -> ParsedCalls:
    """Parse one agent's response into calls.

    Args:
        text: the model's response.
        fmt: ``python`` | ``python_list`` | ``json`` | ``auto`` (see the module docstring).
        names: the function names of the task, used to find calls inside prose.

    ``parse_calls('Sure!\\n```python\\nf(a=1)\\ng.h(b="x")\\n```')``
    -> calls ``(f(a=1), g.h(b='x'))``, ok.
    """
    if fmt not in FORMATS:
        raise ValueError(f"call format must be one of {FORMATS}, got {fmt!r}")
    if len(text or "") > MAX_CHARS:
        return ParsedCalls((), False, (f"longer than {MAX_CHARS:,} characters: not read",))
    body = clean_text(text)
    if body in ("", "[]"):
        # an empty response or [] says "no call"; a response that was all <think> (cut off) says nothing
        ok = body == "[]" or not (text or "").strip()
        return ParsedCalls((), ok, () if ok else ("only a <think> block, no answer",))
    if fmt == "json" or (fmt == "auto" and body[:1] in "[{"):
        parsed = _bounded(_parse_json(body))
        if fmt == "json" or parsed.calls:
            return parsed
    return _bounded(_parse_python(body, tuple(names), Budget()))


def _bounded(parsed: ParsedCalls) -> ParsedCalls:
    """``parsed``, or no call when a value is past the bounds of :mod:`.limits` (too deep, an int too long)."""
    try:
        for c in parsed.calls:
            check_value(c.args, f"{c.name}'s arguments")
    except TooLarge as e:
        return ParsedCalls((), False, (str(e),))
    return parsed


# -- python syntax

def _quiet_parse(src: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(src, mode="exec")


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise _BadCall(f"not a function name: {snippet(node)}")


def _value(node: ast.AST, budget: Budget) -> Any:
    """A literal argument value; tuples stay tuples (BFCL's checker cares); ``budget``: the response's."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List):
        return [_value(e, budget) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e, budget) for e in node.elts)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _BadCall("'**' inside a dict value")
        try:
            return {_value(k, budget): _value(v, budget)
                    for k, v in zip(node.keys, node.values) if k is not None}  # none is None
        except TypeError as e:  # an unhashable key
            raise _BadCall(f"dict value {snippet(node)}: {e}") from None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, budget)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Name):
        return _JSON_NAMES.get(node.id.lower(), node.id)
    if isinstance(node, ast.BinOp):
        try:
            return evaluate(node, budget)
        except ValueError as e:  # NotConstant, ExpressionError
            raise _BadCall(f"argument value {snippet(node)}: {e}") from None
    raise _BadCall(f"unsupported argument value {snippet(node)} (use a literal)")


def _call(node: ast.AST, budget: Budget) -> ToolCall:
    if not isinstance(node, ast.Call):
        raise _BadCall(f"not a call: {snippet(node)}")
    name = _dotted(node.func)
    if node.args:
        raise _BadCall(f"{name}: positional argument(s); write keyword=value")
    args: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise _BadCall(f"{name}: '**' arguments are not accepted")
        if kw.arg in args:
            raise _BadCall(f"{name}: argument {kw.arg!r} given twice")
        args[kw.arg] = _value(kw.value, budget)
    return ToolCall(name, args)


def _call_nodes(src: str) -> list[ast.Call] | None:
    """The call nodes of ``src`` when it is one call, a list/tuple of calls, or call statements; else None."""
    try:
        tree = _quiet_parse(src)
    except PARSE_ERRORS:
        return None
    nodes: list[ast.expr] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Expr):
            return None
        v = stmt.value
        nodes += v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v]
    calls = [n for n in nodes if isinstance(n, ast.Call)]
    if not nodes or len(calls) != len(nodes):
        return None
    return calls


def gold_call_from_text(src: str, schemas: Sequence[Mapping[str, Any]]) -> ToolCall:
    """One call written as text in a gold answer (BFCL multi-turn style, ``"sort('a.pdf')"``).

    Unlike model output, positional arguments are allowed: they take the schema's parameters in
    order, required ones first. Raises ValueError when ``src`` is not one call.
    """
    nodes = _call_nodes(src.strip())
    if nodes is None or len(nodes) != 1:
        raise ValueError(f"not one call: {src!r}")
    node = nodes[0]
    try:
        name = _dotted(node.func)
        schema = next((f for f in schemas if f.get("name") == name), {})
        params = schema.get("parameters", {})
        order = list(dict.fromkeys([*params.get("required", []), *params.get("properties", {})]))
        if len(node.args) > len(order):
            raise ValueError(f"{name}: {len(node.args)} positional argument(s), "
                             f"the schema names {len(order)} parameter(s)")
        budget = Budget()
        args = {p: _value(a, budget) for p, a in zip(order, node.args)}
        for kw in node.keywords:
            if kw.arg is None or kw.arg in args:
                raise ValueError(f"{name}: bad or repeated keyword argument in {src!r}")
            args[kw.arg] = _value(kw.value, budget)
    except _BadCall as e:
        raise ValueError(str(e)) from None
    return ToolCall(name, args)


def _convert(nodes: Sequence[ast.AST], calls: list[ToolCall], errors: list[str], budget: Budget) -> None:
    for n in nodes:
        try:
            calls.append(_call(n, budget))
        except _BadCall as e:
            errors.append(str(e))


_NAME_PAREN = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\s*\(")


def _spans(line: str, names: Sequence[str]) -> list[str]:
    """``name(...)`` substrings of ``line`` for known names, parentheses balanced outside quotes; a span's
    inside is not searched again, and a call left open runs to the end of the line (so each character is
    read once)."""
    out, pos = [], 0
    while (m := _NAME_PAREN.search(line, pos)) is not None:
        pos = m.end()
        if m.group(1) not in names:
            continue
        depth, end = 0, None
        for i, c in _unquoted(line, m.end() - 1):
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    end = i + 1
                    break
        if end is None:
            break
        out.append(line[m.start():end])
        pos = end
    return out


def _unquoted(text: str, start: int = 0):
    """``(index, char)`` of the characters of ``text`` from ``start`` that lie outside '...' / "..." quotes."""
    quote, i = "", start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        else:
            yield i, c
        i += 1


def _parse_python(body: str, names: Sequence[str], budget: Budget) -> ParsedCalls:
    calls: list[ToolCall] = []
    errors: list[str] = []
    whole = _call_nodes(body)
    if whole is not None:
        _convert(whole, calls, errors, budget)
        return ParsedCalls(tuple(calls), not errors, tuple(errors))
    for raw in _logical_lines(body):
        line = _BULLET.sub("", raw).strip().rstrip(",;")
        if not line or line in ("[", "]"):
            continue
        nodes = _call_nodes(line) if _looks_like_call(line) else None
        if nodes is not None:
            _convert(nodes, calls, errors, budget)
            continue
        spans = _spans(line, names)
        if not spans and _looks_like_call(line):
            errors.append(f"cannot parse {line[:80]!r}")
        for src in spans:
            nodes = _call_nodes(src)
            if nodes is None:
                errors.append(f"cannot parse {src[:80]!r}")
            else:
                _convert(nodes, calls, errors, budget)
    return ParsedCalls(tuple(calls), bool(calls) and not errors, tuple(errors))


def _logical_lines(body: str) -> list[str]:
    """Lines, with a call that spans several lines (``f(\n  a=1,\n)``) joined into one."""
    out: list[str] = []
    buf: list[str] = []
    depth = 0
    for line in body.splitlines():
        buf.append(line.strip() if buf else line)
        for _, c in _unquoted(line):  # a quote left open ends with its line (prose apostrophes)
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth = max(0, depth - 1)
        if depth == 0:
            out.append(" ".join(buf))
            buf = []
    if buf:
        out.append(" ".join(buf))
    return out


def _looks_like_call(line: str) -> bool:
    return bool(re.match(r"^\[?\s*[A-Za-z_][\w.]*\s*\(.*\)\s*\]?$", line))


# -- json syntax

def _json_call(obj: Any) -> ToolCall:
    if not isinstance(obj, dict):
        raise _BadCall(f"a call must be a JSON object, got {type(obj).__name__}")
    if "name" in obj:
        name, args = obj["name"], obj.get("arguments", obj.get("parameters", {}))
    elif isinstance(obj.get("function"), str):  # BFCL's JSON form
        name, args = obj["function"], obj.get("parameters", obj.get("arguments", {}))
    elif len(obj) == 1:
        name, args = next(iter(obj.items()))
    else:
        raise _BadCall(f"call object without 'function' or 'name': keys {sorted(obj)}")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except PARSE_ERRORS:
            raise _BadCall(f"{name}: arguments string is not JSON") from None
    if not isinstance(name, str) or not isinstance(args, dict):
        raise _BadCall(f"call {name!r}: arguments must be an object")
    return ToolCall(name, dict(args))


def _parse_json(body: str) -> ParsedCalls:
    candidates = [body]
    for open_, close in ("[]", "{}"):
        a, b = body.find(open_), body.rfind(close)
        if 0 <= a < b:
            candidates.append(body[a:b + 1])
    for src in candidates:
        try:
            obj = json.loads(src)
        except PARSE_ERRORS:  # not JSON, nested past the recursion limit, an int past 4,300 digits
            continue
        items = obj if isinstance(obj, list) else [obj]
        calls, errors = [], []
        for it in items:
            try:
                calls.append(_json_call(it))
            except _BadCall as e:
                errors.append(str(e))
        return ParsedCalls(tuple(calls), not errors and (bool(calls) or items == []), tuple(errors))
    return ParsedCalls((), False, ("no JSON list of calls found",))


# -- canonical form

def canonical_value(v: Any) -> Any:
    """A hashable, type-tagged form of a value: dict key order and surrounding spaces of strings do
    not matter, nothing else is merged. Deliberately not BFCL's lossy string normalisation, under
    which ``"AA"``, ``"Aa"`` and ``"aa"`` (three genotypes, BFCL parallel_116) would be one call."""
    if isinstance(v, bool) or v is None:
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", v)
    if isinstance(v, str):
        return ("s", v.strip())
    if isinstance(v, (list, tuple)):
        return ("l" if isinstance(v, list) else "t", tuple(canonical_value(x) for x in v))
    if isinstance(v, (set, frozenset)):
        return ("set", tuple(sorted((canonical_value(x) for x in v), key=repr)))
    if isinstance(v, dict):  # sorted by repr: two keys of one text (1 and '1') may hold values that do not order
        return ("d", tuple(sorted(((str(k), canonical_value(x)) for k, x in v.items()), key=repr)))
    return ("r", repr(v))


def typed_value(v: Any, schema_type: str | None) -> Any:
    """``v`` as BFCL's checker reads it for a parameter of ``schema_type``: an int given for a
    ``float`` parameter is that float, a tuple given for a ``tuple`` parameter is a list; anything
    else as written. ``typed_value(6, "float") == 6.0``."""
    if schema_type == "float" and type(v) is int:
        return float(v)
    if schema_type == "tuple" and type(v) is tuple:
        return list(v)
    return v


def _param_types(schemas: Iterable[Mapping[str, Any]]) -> dict[str | None, dict[str, Any]]:
    out: dict[str | None, dict[str, Any]] = {}
    for s in schemas:
        props = (s.get("parameters") or {}).get("properties") or {}
        out.setdefault(s.get("name"), {p: (d or {}).get("type") for p, d in props.items() if isinstance(d, Mapping)})
    return out


def call_key(call: ToolCall, schemas: Iterable[Mapping[str, Any]] = ()) -> tuple:
    """The canonical key of a call: name and sorted canonical arguments, each value first read as
    its parameter's declared type in ``schemas`` (:func:`typed_value`), so ``f(height=6)`` and
    ``f(height=6.0)`` are one call when ``height`` is a float."""
    types = _param_types(schemas).get(call.name, {})
    return (call.name, tuple(sorted(((k, canonical_value(typed_value(v, types.get(k)))) for k, v in call.args.items()),
                                    key=lambda kv: (str(kv[0]), repr(kv[1])))))


def merge_calls(per_agent: Sequence[Sequence[ToolCall]], schemas: Iterable[Mapping[str, Any]] = ()) -> list[ToolCall]:
    """The team's calls: the multiset union of the agents' calls under :func:`call_key` (with the
    task's ``schemas``, so values equal once read as their declared type are one call).

    A call written by several agents counts once; a call one agent writes k times counts k times
    (max over agents), since a request may need the same call twice (BFCL parallel_158 asks for two
    draws from each of two normal distributions). Order: first appearance, agent by agent.

    So a call the request needs twice, written once by each of two agents, is kept once: the team
    answer has one call too few. Chosen over keeping it twice (the sum over agents) because under a
    sum every call that two agents both write is a duplicate that fails BFCL's count check: the
    ``same_prompt`` role asks every agent for every call, and ``self_select`` agents overlap on the
    calls they are surest of, while a needed repeat is rare (parallel_158 is the one question of the
    440 that needs an identical call twice) and one agent can write both copies. Overlap is not free:
    the reward's ``cross_duplicate`` term charges it. A rule reading the gold answer (keep as many
    copies as it needs) was rejected: writing every call many times would then cost nothing.

    ``merge_calls([[a, a, b], [a, c]]) -> [a, a, b, c]``; ``merge_calls([[a], [a]]) -> [a]``.
    """
    schemas = list(schemas)
    need: Counter = Counter()
    for calls in per_agent:
        need |= Counter(call_key(c, schemas) for c in calls)
    out: list[ToolCall] = []
    have: Counter = Counter()
    for calls in per_agent:
        for c in calls:
            k = call_key(c, schemas)
            if have[k] < need[k]:
                have[k] += 1
                out.append(c)
    return out


def format_call(call: ToolCall, fmt: str = "python") -> str:
    """A call written out in ``fmt`` (``python``: ``f(a=1, b='x')``; ``json``: one object in BFCL's form,
    ``{"function": "f", "parameters": {...}}``)."""
    if fmt == "json":
        return json.dumps({"function": call.name, "parameters": dict(call.args)}, ensure_ascii=False)
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.args.items())})"
