"""Output schemas: the fixed text of an answer with value slots the policy fills (structured generation).

An environment that wants structured output returns a prompt as
``with_schema(prompt, schema)``. A :class:`Schema` is a sequence of literal
text pieces and :class:`Slot` s, e.g. for a one-day plan::

    Schema(('{"days": [{"day": 1, "current_city": "', Slot(16), ', "lunch": "', Slot(24), '}]}'))

A slot's terminator (default ``"``) belongs to the slot, so the piece after a
slot starts after it (``, "lunch": "``, not ``", "lunch": "``). During
generation (``comarl/generation/constrained.py``) the literal pieces are
forced token by token and the model samples only inside slots; a slot ends
when the model writes its terminator (here the closing quote) or after
``max_tokens`` sampled tokens (then the terminator is forced); the completion
ends with a forced EOS after the last piece. Forced tokens are part of the
completion (the decoded text is the whole answer, ready to parse) but carry no
loss: the policy learns only the values and where each one ends.

An agent follows the schema unless its ``AgentConfig.structured`` is false;
without a schema a prompt is a plain string and nothing changes.
"""
from __future__ import annotations

from dataclasses import dataclass

from .prompt_notes import annotate

JSON_STRING_DISALLOWED = '"\\' + "".join(chr(c) for c in range(32))
"""Characters that cannot appear unescaped in a JSON string value: the quote, the backslash, control characters."""


@dataclass(frozen=True)
class Slot:
    """A value the policy writes.

    Attributes:
        max_tokens: the most tokens the policy may sample for this value; at the cap the terminator is forced.
        terminator: the text that ends the value (sampled by the policy, or forced at the cap); its first
            character must be in ``disallowed``, so no token can hold it except at its very end.
        disallowed: characters that may not appear inside the value (default: what a JSON string cannot
            hold unescaped), so a value can never break the surrounding format.
    """

    max_tokens: int = 32
    terminator: str = '"'
    disallowed: str = JSON_STRING_DISALLOWED

    def check(self, where: str) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"{where}: max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not self.terminator:
            raise ValueError(f"{where}: the terminator is empty")
        if self.terminator[0] not in self.disallowed:
            raise ValueError(f"{where}: the terminator's first character {self.terminator[0]!r} must be disallowed "
                             f"inside the value (else a value could contain it)")


@dataclass(frozen=True)
class Schema:
    """Literal text pieces (``str``) and value slots (:class:`Slot`), in order."""

    parts: tuple

    def __post_init__(self):
        object.__setattr__(self, "parts", tuple(self.parts))
        for n, p in enumerate(self.parts):
            if isinstance(p, Slot):
                p.check(f"schema part {n}")
            elif not isinstance(p, str):
                raise TypeError(f"schema part {n}: expected a str or a Slot, got {type(p).__name__}")

    @property
    def slots(self) -> list[Slot]:
        return [p for p in self.parts if isinstance(p, Slot)]

    def fill(self, values: list[str]) -> str:
        """The answer with ``values`` in the slots, each followed by its terminator (what a policy writes)."""
        if len(values) != len(self.slots):
            raise ValueError(f"schema has {len(self.slots)} slots, {len(values)} values given")
        it = iter(values)
        return "".join(p if isinstance(p, str) else next(it) + p.terminator for p in self.parts)


def with_schema(prompt: str, schema: Schema | None) -> str:
    """``prompt`` whose answer follows ``schema`` (the plain prompt when ``schema`` is None)."""
    return annotate(prompt, schema=schema) if schema is not None else prompt


def schema_of(prompt: str) -> Schema | None:
    """The schema declared with ``prompt`` (None for a plain string)."""
    return getattr(prompt, "schema", None)
