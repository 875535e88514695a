"""Expressions in call arguments (``num1=96 * 1``, ``len('') + 96``), computed as BFCL does, without ``eval``.

BFCL's decoder evaluates a binary operation in an argument with Python's ``eval`` in its own module
(``resolve_ast_by_type``: ``eval(ast.unparse(value))``), so ``f(num1=96 * 1)`` reads as ``num1=96`` and an
expression that raises (``1 / 0``, ``'%(x)s' % {}``) fails the decoding. comarl computes the same value, with
Python's own operators and errors, for expressions built from:

- literals (numbers, strings, bytes, ``True``/``False``/``None``, ``...``, lists, tuples, sets, dicts);
- unary ``- + not ~``, binary ``+ - * / // % ** << >> | & ^ @`` (``%`` on a string formats it),
  comparisons ``== != < <= > >= in`` / ``not in``, ``and`` / ``or``, ``x if c else y``, ``x[i]`` and
  ``x[a:b:c]``;
- calls of the pure builtins in :data:`BUILTINS` (``len``, ``abs``, ``min``, ``int``, ``str``, ``sorted``...),
  with positional arguments and the keywords listed there.

Anything else is refused (:class:`NotConstant`) where BFCL's ``eval`` would go on: a name (BFCL looks it up
among its module's globals and the builtins; an unknown one fails there too), an attribute or method call,
another function, ``is``, unpacking, f-strings, comprehensions and lambdas; so is work past the bounds of
:mod:`.limits` (:class:`~.limits.TooLarge`: an integer wider than 65,536 bits on the way, a value past
100,000 items, an expression nested deeper than 100, more work than one response may cost), where BFCL
would spend the time. An error Python raises on the expression becomes
:class:`ExpressionError`, BFCL's decoder failure. docs/bfcl.md lists every form that still differs.
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .limits import MAX_DEPTH, MAX_DIGITS, MAX_INT_BITS, MAX_SIZE, Budget, TooLarge, int_too_long


class NotConstant(ValueError):
    """The expression needs more than comarl computes (a name, another function, ``is``...)."""


class ExpressionError(ValueError):
    """Python raises on the expression (``1 / 0``, ``'%(x)s' % {}``): BFCL's ``eval`` fails the same way."""


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
           ast.BitAnd: operator.and_, ast.BitXor: operator.xor, ast.MatMult: operator.matmul}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos,
                                                         ast.Not: operator.not_, ast.Invert: operator.invert}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b}


@dataclass(frozen=True)
class Builtin:
    """A builtin the evaluator calls: the function, the keywords it may get, and its bound
    ``(args, sizes) -> (size of the result, work)`` (an upper bound, checked before the call)."""

    fn: Callable[..., Any]
    keywords: tuple[str, ...]
    bound: Callable[[Sequence[Any], Sequence[int]], tuple[int, int]]


def evaluate(node: ast.AST, budget: Budget | None = None) -> Any:
    """The value of an expression node, as Python's ``eval`` computes it (see the module docstring).

    ``evaluate(ast.parse("len('') + 96", mode="eval").body) == 96``; ``budget`` is the response's
    (:class:`~.limits.Budget`), a fresh one when None.

    Raises:
        NotConstant: a node outside what is computed here.
        TooLarge: a result or work past the bounds of :mod:`.limits`.
        ExpressionError: Python raises on the expression.
    """
    return _eval(node, budget or Budget(), 0)[0]


def snippet(node: ast.AST, limit: int = 80) -> str:
    """``node`` written back as text, cut at ``limit`` characters, for messages (``ast.unparse`` recurses: a
    node nested past Python's recursion limit is named by its type)."""
    try:
        text = ast.unparse(node)
    except RecursionError:
        return f"<a deeply nested {type(node).__name__}>"
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _apply(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args)`` with whatever Python raises turned into :class:`ExpressionError`."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # any error of the expression, as BFCL's decoder catches any
        raise ExpressionError(f"{type(e).__name__}: {e}") from None


def size_of(v: Any) -> int:
    """Logical size of a literal: 1, plus one per character or 64-bit word (items are sized where built)."""
    if type(v) is int:
        return 1 + v.bit_length() // 64
    if isinstance(v, (str, bytes)):
        return 1 + len(v)
    return 1


def _eval(node: ast.AST, budget: Budget, depth: int) -> tuple[Any, int]:
    """``(value, size bound)`` of ``node``."""
    if depth > MAX_DEPTH:
        raise TooLarge(f"an expression nested deeper than {MAX_DEPTH}")
    d = depth + 1
    if isinstance(node, ast.Constant):
        v = node.value
        if type(v) is int and int_too_long(v):  # BFCL writes the expression back as text first: that raises
            raise ExpressionError(f"an integer of more than {MAX_DIGITS} digits cannot be written as text")
        if type(v) is int and v.bit_length() > MAX_INT_BITS:
            raise TooLarge(f"an integer wider than {MAX_INT_BITS} bits")
        return v, size_of(v)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        v, s = _eval(node.operand, budget, d)
        budget.charge(s, s, "a unary operation")
        return _apply(_UNARY[type(node.op)], v), s
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        (left, sl), (right, sr) = _eval(node.left, budget, d), _eval(node.right, budget, d)
        size, work = _binary_bound(node.op, left, right, sl, sr)
        budget.charge(work, size, "a binary operation")
        return _apply(_BINARY[type(node.op)], left, right), size
    if isinstance(node, ast.BoolOp):
        v, s = None, 0
        for operand in node.values:  # Python's short circuit: the first falsy (and) / truthy (or) value
            v, s = _eval(operand, budget, d)
            if bool(v) != isinstance(node.op, ast.And):
                break
        return v, s
    if isinstance(node, ast.Compare):
        return _compare(node, budget, d)
    if isinstance(node, ast.IfExp):
        test, _ = _eval(node.test, budget, d)
        return _eval(node.body if _apply(bool, test) else node.orelse, budget, d)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise NotConstant("unpacking (*) in a display")
        items = [_eval(e, budget, d) for e in node.elts]
        values, size = [v for v, _ in items], 1 + sum(s for _, s in items)
        budget.charge(size, 1, "a display")
        return (values if isinstance(node, ast.List) else tuple(values) if isinstance(node, ast.Tuple)
                else _apply(set, values)), size
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise NotConstant("'**' in a dict display")
        pairs = [(_eval(k, budget, d), _eval(v, budget, d)) for k, v in zip(node.keys, node.values) if k is not None]
        size = 1 + sum(sk + sv for (_, sk), (_, sv) in pairs)
        budget.charge(size, 1, "a dict display")
        return _apply(dict, [(k, v) for (k, _), (v, _) in pairs]), size
    if isinstance(node, ast.Subscript):
        return _subscript(node, budget, d)
    if isinstance(node, ast.Call):
        return _call(node, budget, d)
    if isinstance(node, ast.Name):
        raise NotConstant(f"the name {node.id!r} (BFCL looks it up in its own module)")
    raise NotConstant(f"{type(node).__name__} {snippet(node, 60)} is not computed here")


def _is_int(v: Any) -> bool:
    return isinstance(v, int)  # bool included: True * 'ab' is 'ab' in Python


def _words(bits: float) -> int:
    return 1 + int(bits) // 64


def _too_wide(bits: float, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise TooLarge(f"{what}: an integer of ~{bits:.0f} bits (more than {MAX_INT_BITS})")


def _binary_bound(op: ast.operator, left: Any, right: Any, sl: int, sr: int) -> tuple[int, int]:
    """``(size, work)`` bound of ``left op right``; raises TooLarge when the result would be too large."""
    both_int = _is_int(left) and _is_int(right)
    if isinstance(op, ast.Pow) and both_int:
        if right < 0 or abs(left) <= 1:
            return 2, 2
        _too_wide(right, "a power")  # |left| >= 2: at least `right` bits
        bits = right * math.log2(abs(left)) + 1
        _too_wide(bits, "a power")
        w = _words(bits)
        return w + 1, w * w
    if isinstance(op, ast.LShift) and both_int:
        if right < 0 or left == 0:
            return 2, 2
        bits = left.bit_length() + right
        _too_wide(bits, "a shift")
        return _words(bits) + 1, _words(bits)
    if isinstance(op, ast.Mult):
        if both_int:
            return sl + sr, sl * sr
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and _is_int(n):
                size = 1 + max(n, 0) * (size_of(seq) - 1 if isinstance(seq, (str, bytes)) else _items_size(seq, sl))
                if size > MAX_SIZE:
                    raise TooLarge(f"a sequence repeated {n} times: more than {MAX_SIZE:,} items")
                return size, size
        return sl + sr, 2
    if isinstance(op, ast.Mod) and isinstance(left, (str, bytes)):
        size = format_bound(left, right, sr)
        if size > MAX_SIZE:
            raise TooLarge(f"formatting {left[:40]!r}: more than {MAX_SIZE:,} characters")
        return size, size
    if isinstance(op, (ast.Mod, ast.FloorDiv, ast.Div)):
        return sl + sr, sl * sr
    return sl + sr, sl + sr


def _items_size(seq: Sequence[Any], size: int) -> int:
    """The size a list/tuple adds per repetition: its items (``size`` less the container's own 1)."""
    return max(size - 1, len(seq))


def format_bound(fmt: str | bytes, args: Any, args_size: int) -> int:
    """An upper bound on the length of ``fmt % args``: the format's length, and per conversion the most
    text the arguments print as (:func:`print_bound`) and its width and precision (``'%.9f'`` adds 9; a
    ``*`` adds the largest integer argument). Reads the conversion specifiers as CPython's ``%`` does:
    ``%`` [``(key)`` with nested parentheses] [flags] [width] [``.`` precision] [length] type."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    printed = print_bound(args, args_size)
    total, i, n = len(text), 0, len(text)
    while True:
        i = text.find("%", i)
        if i < 0:
            return total
        total += printed
        i += 1
        if i < n and text[i] == "(":
            level, i = 1, i + 1
            while i < n and level:
                level += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
        while i < n and text[i] in "-+ #0":
            i += 1
        for part in range(2):  # width, then precision after a '.'
            if part == 1:
                if i < n and text[i] == ".":
                    i += 1
                else:
                    break
            if i < n and text[i] == "*":
                total += _largest_int(args)
                i += 1
            else:
                j = i
                while i < n and text[i].isdigit():
                    i += 1
                if i > j:
                    total += int(text[j:i]) if i - j <= 12 else 10 ** 12
        while i < n and text[i] in "hlL":
            i += 1
        i += 1  # the conversion type ('%' for a literal %)


def print_bound(v: Any, size: int) -> int:
    """The most characters ``str``/``repr`` of ``v`` (of logical size ``size``) can write: per character of a
    string 10 (``'\\U000e0000'``), of bytes 4 (``\\x00``), per 64-bit word of an int 20 digits, 52 for a
    float or complex; a tuple, list or dict of such sums its items (plus 4 each for quotes and separators);
    anything else 64 per size unit."""
    def scalar(x: Any) -> int | None:
        if isinstance(x, str):
            return 10 * len(x) + 3
        if isinstance(x, bytes):
            return 4 * len(x) + 3
        if type(x) is int:
            return 20 * (1 + x.bit_length() // 64) + 1
        if isinstance(x, (bool, float, complex)) or x is None:
            return 52
        return None

    one = scalar(v)
    if one is not None:
        return one
    items = list(v.values()) + list(v) if isinstance(v, dict) else v if isinstance(v, (tuple, list)) else None
    if items is not None and len(items) <= 1000:
        bounds = [scalar(x) for x in items]
        if all(b is not None for b in bounds):
            return 2 + sum(b + 4 for b in bounds if b is not None)
    return 64 * size


def _largest_int(args: Any) -> int:
    values = args if isinstance(args, tuple) else (args,)
    return max((abs(v) for v in values if _is_int(v)), default=0)


def _compare(node: ast.Compare, budget: Budget, depth: int) -> tuple[Any, int]:
    left, sl = _eval(node.left, budget, depth)
    result: Any = True
    for op, comparator in zip(node.ops, node.comparators):  # chained: stops at the first false link
        if type(op) not in _COMPARE:
            raise NotConstant("'is' / 'is not' (identity of literals depends on how Python stores constants)")
        right, sr = _eval(comparator, budget, depth)
        budget.charge(sl + sr + (min(sl, 100) * sr if isinstance(op, (ast.In, ast.NotIn)) else 0), 1,
                      "a comparison")
        result = _apply(_COMPARE[type(op)], left, right)
        if not _apply(bool, result):
            break
        left, sl = right, sr
    return result, 1


def _subscript(node: ast.Subscript, budget: Budget, depth: int) -> tuple[Any, int]:
    value, size = _eval(node.value, budget, depth)
    s = node.slice
    if isinstance(s, ast.Slice):
        parts = [_eval(p, budget, depth)[0] if p is not None else None for p in (s.lower, s.upper, s.step)]
        index: Any = _apply(slice, *parts)
    else:
        index = _eval(s, budget, depth)[0]
    budget.charge(size, size, "a subscript")
    return _apply(operator.getitem, value, index), size


def _call(node: ast.Call, budget: Budget, depth: int) -> tuple[Any, int]:
    name = node.func.id if isinstance(node.func, ast.Name) else None
    builtin = BUILTINS.get(name or "")
    if builtin is None:
        raise NotConstant(f"a call of {snippet(node.func, 40)} (only {', '.join(BUILTINS)} are computed)")
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise NotConstant(f"unpacking (* or **) in a call of {name}")
    bad = [k.arg for k in node.keywords if k.arg not in builtin.keywords]
    if bad:
        raise NotConstant(f"{name}: keyword {bad[0]!r} is not computed here")
    args = [_eval(a, budget, depth) for a in node.args]
    kwargs = {k.arg: _eval(k.value, budget, depth) for k in node.keywords if k.arg is not None}
    values = [v for v, _ in args] + [v for v, _ in kwargs.values()]
    sizes = [s for _, s in args] + [s for _, s in kwargs.values()]
    size, work = builtin.bound(values, sizes)
    if size > MAX_SIZE:
        raise TooLarge(f"{name}(...): a result of more than {MAX_SIZE:,} items")
    budget.charge(work, size, f"{name}(...)")
    return _apply(builtin.fn, *[v for v, _ in args], **{k: v for k, (v, _) in kwargs.items()}), size


# -- the builtins, each with its bound


def _linear(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    return sum(sizes) + 1, sum(sizes) + 1


def _scalar(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    return 2, sum(sizes) + 1


def _text(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    """``str`` / ``repr`` / ``hex``...: :func:`print_bound` (``bin`` writes 64 characters per word); int ->
    text is quadratic in the words."""
    s = sum(sizes) + 1
    size = max(print_bound(args[0], sizes[0]), 66 * sizes[0]) if len(args) == 1 else 64 * s
    return size, s * s + size


def _to_int(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    if args and isinstance(args[0], (str, bytes)):
        base = args[1] if len(args) > 1 and _is_int(args[1]) and 2 <= args[1] <= 36 else 16  # 0: a prefix says
        bits = len(args[0].strip()) * math.log2(max(base, 10))
        _too_wide(bits, "int(...)")
        w = _words(bits)
        return w + 1, w * w + len(args[0])
    if args and isinstance(args[0], float):
        return 18, 18  # at most 1024 bits
    return _linear(args, sizes)


def _round(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    if len(args) == 2 and _is_int(args[0]) and _is_int(args[1]) and args[1] < 0:
        _too_wide(-args[1], "round(...)")
        bits = -args[1] * math.log2(10)  # round(n, -k) computes 10 ** k
        _too_wide(bits, "round(...)")
        w = _words(bits) + sizes[0]
        return w, w * w
    return _linear(args, sizes)


def _pow(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    if len(args) == 3 and all(_is_int(a) for a in args):  # modular: one squaring per exponent bit
        w = sizes[2]
        return w + 1, (abs(args[1]).bit_length() + 1) * w * w
    if len(args) == 2:
        return _binary_bound(ast.Pow(), args[0], args[1], sizes[0], sizes[1])
    return _linear(args, sizes)


def _sum(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    start = args[1] if len(args) > 1 else 0
    total = sum(sizes) + 1
    if isinstance(start, (int, float, complex)):
        return total, total
    n = len(args[0]) if args and hasattr(args[0], "__len__") else total
    return total, n * total  # sequences are concatenated one by one: quadratic


def _sorted(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    s = sum(sizes) + 1
    return s, s * max(1, s.bit_length())


def _copy(args: Sequence[Any], sizes: Sequence[int]) -> tuple[int, int]:
    s = sum(sizes) + 1
    return 2 * s, 2 * s  # list('abc') makes a one-character string per character


BUILTINS: dict[str, Builtin] = {
    "abs": Builtin(abs, (), _linear), "len": Builtin(len, (), _scalar), "bool": Builtin(bool, (), _scalar),
    "min": Builtin(min, ("default",), _linear), "max": Builtin(max, ("default",), _linear),
    "sum": Builtin(sum, ("start",), _sum), "round": Builtin(round, ("ndigits",), _round),
    "int": Builtin(int, ("base",), _to_int), "float": Builtin(float, (), _scalar),
    "str": Builtin(str, (), _text), "repr": Builtin(repr, (), _text), "hex": Builtin(hex, (), _text),
    "oct": Builtin(oct, (), _text), "bin": Builtin(bin, (), _text), "ord": Builtin(ord, (), _scalar),
    "chr": Builtin(chr, (), _scalar), "divmod": Builtin(divmod, (), _linear), "pow": Builtin(pow, ("mod",), _pow),
    "sorted": Builtin(sorted, ("reverse",), _sorted), "list": Builtin(list, (), _copy),
    "tuple": Builtin(tuple, (), _copy), "any": Builtin(any, (), _scalar), "all": Builtin(all, (), _scalar),
}
"""The builtins computed here: pure, and bounded by their arguments' size (``range``, ``map``, ``sum`` of a
generator and anything taking a function are not)."""
