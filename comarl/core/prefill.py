"""Forced response prefixes ("prefill"): the start of an answer that the environment writes, not the policy.

An environment that declares an output schema can force its opening (e.g.
``{"days": [{"day": 1, "current_city": "``) by returning the prompt as
``with_prefill(prompt, prefix)``. The agent renders the prompt (chat template
and generation prompt) and appends the prefix, so generation continues from
inside the assistant turn. The prefix tokens belong to the *prompt*: they are
never sampled and never in the loss, so the policy learns only what follows.
The environment puts the prefix back in front of the completion before it
parses it (:func:`restore`).
"""
from __future__ import annotations

from .prompt_notes import annotate


def with_prefill(prompt: str, prefill: str) -> str:
    """``prompt`` whose answer must start with ``prefill`` (a plain str when ``prefill`` is empty)."""
    return annotate(prompt, prefill=prefill) if prefill else prompt


def prefill_of(prompt: str) -> str:
    """The forced answer start of ``prompt`` ("" for a plain string)."""
    return getattr(prompt, "prefill", "")


def restore(prefill: str, completion: str) -> str:
    """The full answer: the forced start followed by what the policy wrote."""
    return prefill + completion
