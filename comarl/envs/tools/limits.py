"""What reading one response may cost: the bounds both call readers hold, so every text gets a score.

A policy in training eventually writes anything, and the reward is computed in the trainer's process. The
readers (:mod:`.calls`, :mod:`.bfcl_decode`) and the literal arithmetic (:mod:`.arithmetic`) keep one
response's work and memory bounded with these numbers; a text past one of them is read as a failure (no
call, not parsed; docs/bfcl.md lists where BFCL itself would still compute):

- ``MAX_CHARS``: longer responses are not read (a 50,000-character answer is ~12k tokens; the configs
  generate 256). Parsing is linear in the text; Python's parser keeps ~0.5 KB per character at worst.
- ``MAX_INT_BITS``: no integer computed on the way is wider (``2 ** 65536`` is refused, ``2 ** 5000`` is not).
- ``MAX_DIGITS``: an integer in a call's value has at most Python's int-to-text limit of 4,300 digits (past
  it, ``str`` raises, as BFCL's own checker does on it).
- ``MAX_SIZE``: the logical size of a value (one per item, character and 64-bit word, shared items counted
  each time they appear) and of all of one response's values together.
- ``MAX_DEPTH``: nesting of a value and of an expression.
- ``WORK``: units of work (about one machine word or item touched) for one response's arithmetic, charged
  before each operation runs (:class:`Budget`).
"""
from __future__ import annotations

from typing import Any

MAX_CHARS = 50_000
MAX_INT_BITS = 1 << 16
MAX_DIGITS = 4300
MAX_SIZE = 100_000
MAX_DEPTH = 100
WORK = 50_000_000

_DIGITS_LIMIT = 10 ** MAX_DIGITS  # the first integer with MAX_DIGITS + 1 digits


class TooLarge(ValueError):
    """A value or computation past one of the bounds above."""


class Budget:
    """The work and size one response's arithmetic may still spend; each operation charges it first.

    ``Budget().charge(10, 1, "2 ** 600")`` takes 10 work units and 1 size unit; past either total it raises
    :class:`TooLarge` naming ``what``.
    """

    def __init__(self, work: int = WORK, size: int = MAX_SIZE):
        self.work, self.size = work, size

    def charge(self, work: int, size: int, what: str) -> None:
        self.work -= work
        self.size -= size
        if self.work < 0:
            raise TooLarge(f"{what}: more work than one response may cost ({WORK:,} units)")
        if self.size < 0:
            raise TooLarge(f"{what}: values larger than one response may hold ({MAX_SIZE:,} items)")


def int_too_long(v: int) -> bool:
    """Whether ``v`` has more than :data:`MAX_DIGITS` decimal digits (``str(v)`` would raise)."""
    return v >= _DIGITS_LIMIT or v <= -_DIGITS_LIMIT


def check_value(value: Any, what: str = "argument value") -> None:
    """Raise :class:`TooLarge` when ``value`` nests deeper than :data:`MAX_DEPTH`, holds an int of more than
    :data:`MAX_DIGITS` digits, or has more than :data:`MAX_SIZE` items (walked without recursion)."""
    stack, seen = [(value, 0)], 0
    while stack:
        v, depth = stack.pop()
        seen += 1
        if seen > MAX_SIZE:
            raise TooLarge(f"{what}: more than {MAX_SIZE:,} items")
        if depth > MAX_DEPTH:
            raise TooLarge(f"{what}: nested deeper than {MAX_DEPTH}")
        if type(v) is int and int_too_long(v):
            raise TooLarge(f"{what}: an integer of more than {MAX_DIGITS:,} digits")
        if isinstance(v, (list, tuple, set, frozenset)):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, dict):
            stack.extend((x, depth + 1) for kv in v.items() for x in kv)
