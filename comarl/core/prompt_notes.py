"""Prompts that carry notes about their answer: an output schema (``schema.py``), a forced prefix (``prefill.py``).

An environment returns prompts as strings, so everything that reads a prompt
(templates, logs, pickles to other ranks) keeps working; an annotated prompt is
a ``str`` subclass whose notes ride along. Notes compose: adding a prefix to a
prompt with a schema keeps the schema, and the other way round.
"""
from __future__ import annotations

from typing import Any


class AnnotatedPrompt(str):
    """A prompt string with ``schema`` (None: free text) and ``prefill`` ("" : none) notes for its answer."""

    schema: Any = None
    prefill: str = ""

    def __new__(cls, prompt: str, schema: Any = None, prefill: str = "") -> "AnnotatedPrompt":
        obj = super().__new__(cls, prompt)
        obj.schema, obj.prefill = schema, prefill
        return obj

    def __reduce__(self):  # pickles (multiprocessing, torch.distributed object lists) keep the notes
        return (AnnotatedPrompt, (str(self), self.schema, self.prefill))


def annotate(prompt: str, **notes: Any) -> str:
    """``prompt`` with ``notes`` (``schema=``, ``prefill=``) set over those it already carries; a plain ``str``
    when no note is left."""
    unknown = set(notes) - {"schema", "prefill"}
    if unknown:
        raise TypeError(f"annotate: unknown prompt notes {sorted(unknown)} (schema, prefill)")
    schema = notes.get("schema", getattr(prompt, "schema", None))
    prefill = notes.get("prefill", getattr(prompt, "prefill", ""))
    if schema is None and not prefill:
        return str(prompt)
    return AnnotatedPrompt(str(prompt), schema, prefill)
