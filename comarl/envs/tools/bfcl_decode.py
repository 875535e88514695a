"""Calls read from a response as BFCL's own pipeline reads a prompting model's text.

This is the ``bfcl`` scoring mode (docs/bfcl.md): the number it gives is the one
BFCL would give. It follows ``bfcl_eval`` 2026.3.23, written here (comarl does not
import ``bfcl_eval`` at run time):

1. reasoning: the text after the last ``</think>``, leading newlines dropped
   (the Qwen prompting handler's ``_parse_query_response_prompting``; a ``<think>``
   never closed is left in and breaks the decoding);
2. ``default_decode_ast_prompting``: strip backticks, newlines and spaces from both
   ends, add ``[`` / ``]`` when the text does not start / end with them;
3. ``ast_parse`` (Python): one expression whose items are calls (a single call, or a
   list of calls); anything else fails — calls on separate lines, a ```` ```python ````
   fence (its language tag stays), prose, bullets, numbering, a trailing ``;``, a
   tuple of calls inside the list;
4. ``resolve_ast_call`` / ``resolve_ast_by_type``: dotted names joined; only keyword
   arguments are read (positional ones are dropped); values: constants (``...`` as
   ``"..."``), ``-x`` of a constant (any unary operator reads as minus, so ``+5`` is
   ``-5``, as BFCL does), lists, dicts, tuples, a bare name as its text, a call
   without keywords as its source text, a call with keywords as ``{name: {args}}``,
   ``a[i]`` as its text, and binary operations computed (:mod:`.arithmetic`);
   anything else fails;
5. ``is_function_calling_format_output``: a list of ``{name: {args}}``.

JSON (``fmt="json"``, BFCL's ``ReturnFormat.JSON``): after step 2, the first
``[{...}, ...]`` span is read as JSON (:func:`call_list_span`: the span BFCL's regex
finds, in one pass where the regex backtracks exponentially); each object's
``"function"`` and ``"parameters"`` make a call (a missing key fails); text that is
not JSON reads as no call. ``"name"``/``"arguments"`` objects are not BFCL's form and fail.

A failure is a response with no calls; ``ok`` is False (the reward's parse term). Any
error of the decoding is a failure, as BFCL's runner counts any exception of its decoder
as ``decoder_failed``; so is a response past the bounds of :mod:`.limits` (longer than
50,000 characters, an expression too costly, a value nested deeper than 100 or holding
an int past 4,300 digits, on which BFCL's own checker raises).
"""
from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from .arithmetic import evaluate, snippet
from .calls import PARSE_ERRORS, ParsedCalls, ToolCall
from .limits import MAX_CHARS, Budget, TooLarge, check_value

BFCL_FORMATS = ("python", "json")
BOUNDS = "past comarl's bounds (limits.py, docs/bfcl.md)"


class _Undecodable(ValueError):
    pass


def strip_reasoning(text: str) -> str:
    """``"<think>...</think>\\n\\n[f(a=1)]" -> "[f(a=1)]"``; text without ``</think>`` unchanged."""
    return text.split("</think>")[-1].lstrip("\n") if "</think>" in text else text


def bracketed(text: str) -> str:
    """Step 2: ``"```\\nf(a=1)\\n```" -> "[f(a=1)]"``."""
    text = text.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    return text


def decode_bfcl(text: str, fmt: str = "python") -> ParsedCalls:
    """The calls BFCL decodes from ``text`` (see the module docstring).

    ``decode_bfcl("[f(a=96 * 1), g.h(b='x')]").calls == (f(a=96), g.h(b='x'))``;
    ``decode_bfcl("f(a=1)\\ng(b=2)").ok is False``.
    """
    if fmt not in BFCL_FORMATS:
        raise ValueError(f"BFCL decoding format must be one of {BFCL_FORMATS}, got {fmt!r}")
    if len(text or "") > MAX_CHARS:
        return ParsedCalls((), False, (f"{BOUNDS}: longer than {MAX_CHARS:,} characters, not read",))
    body = bracketed(strip_reasoning(text or ""))
    try:
        decoded = _python(body, Budget()) if fmt == "python" else _json(body)
    except TooLarge as e:
        return ParsedCalls((), False, (f"{BOUNDS}: {e}",))
    except (*PARSE_ERRORS, _Undecodable, TypeError, ArithmeticError) as e:  # ValueError: NotConstant and more
        return ParsedCalls((), False, (f"BFCL cannot decode it: {type(e).__name__}: {str(e)[:200]}",))
    if decoded is None:
        return ParsedCalls((), False, ("BFCL finds no JSON list in it (read as no call)",))
    for d in decoded:
        if not (isinstance(d, dict) and len(d) == 1 and isinstance(next(iter(d.values())), dict)):
            return ParsedCalls((), False, (f"BFCL rejects the decoded output's format: {repr(d)[:200]}",))
    calls = tuple(ToolCall(name, args) for d in decoded for name, args in d.items())
    try:
        for c in calls:
            check_value(c.args, "the arguments")
    except TooLarge as e:
        return ParsedCalls((), False, (f"{BOUNDS}: {e}",))
    return ParsedCalls(calls, True)


def _python(body: str, budget: Budget) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(body, mode="eval").body
    if isinstance(tree, ast.Call):
        return [_call(tree, budget)]
    if not isinstance(tree, (ast.List, ast.Tuple, ast.Set)):
        raise _Undecodable(f"not a list of calls: {snippet(tree)}")
    out = []
    for node in tree.elts:
        if not isinstance(node, ast.Call):
            raise _Undecodable(f"not a call: {snippet(node)}")
        out.append(_call(node, budget))
    return out


def _name(func: ast.AST) -> str:
    """BFCL's reading of a callee: the attribute chain, plus the name it starts from when it is one."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _call(node: ast.Call, budget: Budget) -> dict[str, dict[Any, Any]]:
    return {_name(node.func): {kw.arg: _value(kw.value, budget) for kw in node.keywords}}


def _value(node: ast.AST | None, budget: Budget) -> Any:
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        operand = node.operand
        if not isinstance(operand, ast.Constant):
            raise _Undecodable(f"{snippet(node)}: a unary operator on a non-constant")
        return -operand.value  # type: ignore[operator]  # as BFCL's decoder: on a string the TypeError is caught
    if isinstance(node, ast.List):
        return [_value(e, budget) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k, budget): _value(v, budget) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp):
        return evaluate(node, budget)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return ast.unparse(node) if not node.keywords else _call(node, budget)
    if isinstance(node, ast.Tuple):
        return tuple(_value(e, budget) for e in node.elts)
    if isinstance(node, ast.Subscript):
        return f"{ast.unparse(node.value)}[{ast.unparse(node.slice)}]"
    raise _Undecodable(f"unsupported value {snippet(node) if node is not None else '**'}")


def call_list_span(text: str) -> tuple[int, int] | None:
    """Where ``re.search(r"\\[\\s*{.*?}\\s*(?:,\\s*{.*?}\\s*)*\\]", text, re.DOTALL)`` matches, found in one
    pass (BFCL's JSON parser runs that regex; it backtracks exponentially on ``[{},{},{}...`` left open).

    The regex is ``[`` ws ``{`` X ``}`` then, from after each ``}``, the same *tail*: ws, then ``]`` (done) or
    ``,`` ws ``{`` X ``}`` and the tail again, with X any text, shortest first. So the match closes each object
    at the first ``}`` whose tail completes. ``tail[j]`` says whether the tail completes from ``j``,
    ``close[i]`` is the first ``}`` at or after ``i`` whose tail completes; both are built from the right.

    ``call_list_span('x [{"a": 1}, {"b": 2}] y') == (2, 22)``.
    """
    n = len(text)
    nonspace = [n] * (n + 2)  # first non-whitespace index at or after i (\s is str.isspace)
    for i in range(n - 1, -1, -1):
        nonspace[i] = nonspace[i + 1] if text[i].isspace() else i
    tail = [False] * (n + 2)
    close = [n] * (n + 2)
    for i in range(n, -1, -1):
        j = nonspace[i]
        if j < n and text[j] == "]":
            tail[i] = True
        elif j < n and text[j] == ",":
            k = nonspace[j + 1]
            tail[i] = k < n and text[k] == "{" and close[k + 1] < n
        if i < n:
            close[i] = i if text[i] == "}" and tail[i + 1] else close[i + 1]
    for start in range(n):
        o = nonspace[start + 1] if text[start] == "[" else n
        if o < n and text[o] == "{" and close[o + 1] < n:
            end = close[o + 1]
            while True:
                j = nonspace[end + 1]
                if text[j] == "]":
                    return start, j + 1
                end = close[nonspace[j + 1] + 1]
    return None


def _json(body: str) -> list[dict[str, Any]] | None:
    m = re.search(r"\[.*\]", body, re.DOTALL)
    body = m.group(0) if m else body
    span = call_list_span(body)
    body = body[span[0]:span[1]] if span else body
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    out = []
    for item in obj:
        if isinstance(item, dict):
            if "function" not in item or "parameters" not in item:
                raise _Undecodable(f"a call object without 'function' and 'parameters': keys {sorted(item)}")
            out.append({item["function"]: item["parameters"]})
    return out
