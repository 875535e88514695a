"""Constant arithmetic in call arguments (``num1=96 * 1``), evaluated without ``eval``.

BFCL's decoder evaluates a binary operation in an argument with Python's ``eval``
(``resolve_ast_by_type``: ``eval(ast.unparse(value))``), so ``f(num1=96 * 1)`` reads
as ``num1=96``. comarl computes the same value for expressions built from literals:
numbers, strings, bytes, True/False/None, lists, tuples, sets and dicts, combined
with unary ``- + not ~`` and binary ``+ - * / // % ** << >> | & ^ @``, with Python's
own semantics (and its errors). Anything else inside the expression — a name, an
attribute, a call, a comprehension — is refused (:class:`NotConstant`), where BFCL's
``eval`` would look it up (``len('ab') * 2`` is 4 there). Results that would be huge
(an integer power or shift beyond 4096, a repeated sequence over a million items)
are refused too, where BFCL would spend the time computing them.
"""
from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

MAX_EXPONENT = 4096
MAX_ITEMS = 1_000_000

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
           ast.BitAnd: operator.and_, ast.BitXor: operator.xor, ast.MatMult: operator.matmul}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos,
                                                         ast.Not: operator.not_, ast.Invert: operator.invert}


class NotConstant(ValueError):
    """The expression needs more than literal arithmetic (or would be too large to compute)."""


def evaluate(node: ast.AST) -> Any:
    """The value of a constant expression node, as Python computes it.

    ``evaluate(ast.parse("96 * 1", mode="eval").body) == 96``; Python's own errors
    (``ZeroDivisionError``, ``TypeError`` for ``"a" - 1``) propagate.

    Raises:
        NotConstant: a node that is not a literal or an operator on literals, or a result too large.
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = evaluate(node.left), evaluate(node.right)
        _check_size(node.op, left, right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise NotConstant(f"unpacking in {ast.unparse(node)!r}")
        items = [evaluate(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items) if isinstance(node, ast.Tuple) else set(items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise NotConstant(f"'**' in {ast.unparse(node)!r}")
        return {evaluate(k): evaluate(v) for k, v in zip(node.keys, node.values) if k is not None}  # none is None
    raise NotConstant(f"{ast.unparse(node)!r} is not literal arithmetic")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    if isinstance(op, ast.Pow) and _is_int(left) and _is_int(right) and abs(left) > 1 and right > MAX_EXPONENT:
        raise NotConstant(f"{left} ** {right} is too large to compute")
    if isinstance(op, ast.LShift) and _is_int(right) and right > MAX_EXPONENT:
        raise NotConstant(f"a shift by {right} is too large to compute")
    if isinstance(op, ast.Mult):
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and _is_int(n) and len(seq) * n > MAX_ITEMS:
                raise NotConstant(f"a sequence repeated {n} times is too large to compute")
