"""Schemas (structured generation) on a vLLM engine: the HF path's state machine as a vLLM logits processor.

The HF path forces a schema's literal pieces token by token and lets the model sample only inside value
slots (``constrained.py``). Here the same :class:`~comarl.generation.constrained.Program` drives a
per-request vLLM logits processor (:class:`SchemaLogitsProcessor`, installed in every engine that runs in
this process):

* each prompt's program is registered under a key (:func:`register`); the key travels in
  ``SamplingParams.extra_args`` (a string, so nothing but the key crosses vLLM's request plumbing), and the
  processor looks the program up when vLLM adds the request (each of its K samples gets its own state);
* at every step the per-request function advances its row over the tokens emitted since its last call
  and masks the logits: a forced token alone (logit kept, the rest ``-inf``), inside a slot the allowed
  tokens only, after the last piece nothing (EOS is forced, the request stops);
* ``forced`` flags are recomputed afterwards by replaying the program over the emitted ids
  (:func:`forced_flags`): the program is deterministic given the tokens, so no state leaves the engine.

The registry lives in this process, so schemas need an in-process engine (``EngineSettings.in_process``);
an engine in its own process refuses them. Log-probs: the engine's are taken after this mask (a forced
token's is 0, a slot token's is renormalised over the allowed tokens), while the trainer's are those of
the unconstrained model with forced tokens out of the loss (docs/structured.md), so a gap on slot tokens
is by design.
"""
from __future__ import annotations

import itertools
import threading

import torch

from .constrained import _FORCE, _SAMPLE, TABLES, Program, _Row

EXTRA_KEY = "comarl_schema"
"""``SamplingParams.extra_args`` key naming a registered program."""

_lock = threading.Lock()
_programs: dict[str, tuple[Program, object, tuple[int, ...]]] = {}
_keys = itertools.count()


def register(program: Program, tokenizer, eos_ids) -> str:
    """Make ``program`` (compiled for ``tokenizer``) findable by the engine's processor; returns its key."""
    with _lock:
        key = f"schema-{next(_keys)}"
        _programs[key] = (program, tokenizer, tuple(eos_ids))
    return key


def release(keys) -> None:
    """Forget programs once their requests are done."""
    with _lock:
        for k in keys:
            _programs.pop(k, None)


class _RequestMask:
    """One request's row of the program: advance over new tokens, then mask the next token's logits."""

    def __init__(self, program: Program, tokenizer, eos_ids: tuple[int, ...]):
        self.row, self.tok, self.exclude, self.seen = _Row(program), tokenizer, eos_ids, 0
        self.closing: dict = {}

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        for t in output_ids[self.seen:]:
            act, what = self.row.action()
            self.row.advance(t, self.closing.get(what) if act == _SAMPLE else None)
        self.seen = len(output_ids)
        act, what = self.row.action()
        if act == _FORCE:
            keep = logits[what].clone()
            logits.fill_(float("-inf"))
            logits[what] = keep
        elif act == _SAMPLE:
            table = TABLES.table(self.tok, what, logits.shape[-1], self.exclude, logits.device)
            self.closing[what] = table.closing
            logits.masked_fill_(~table.allowed, float("-inf"))
        return logits


def forced_flags(program: Program, tokenizer, eos_ids, ids: list[int], vocab_size: int) -> list[bool]:
    """Per token of ``ids`` (one completion), True where the program forced it (replayed, as the engine ran it)."""
    row, flags = _Row(program), []
    for t in ids:
        act, what = row.action()
        flags.append(act == _FORCE)
        closing = TABLES.table(tokenizer, what, vocab_size, tuple(eos_ids), "cpu").closing if act == _SAMPLE else None
        row.advance(t, closing)
    return flags


def processor_class():
    """The vLLM logits-processor class (built on first use, so that importing comarl never imports vLLM)."""
    global _CLASS
    if _CLASS is None:
        from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

        class SchemaLogitsProcessor(AdapterLogitsProcessor):
            """Per-request schema masks for requests whose ``extra_args`` name a registered program."""

            def is_argmax_invariant(self) -> bool:
                return False  # forcing changes greedy choices too

            def new_req_logits_processor(self, params):
                key = (params.extra_args or {}).get(EXTRA_KEY)
                if key is None:
                    return None
                with _lock:
                    entry = _programs.get(key)
                if entry is None:
                    raise RuntimeError(f"schema program {key} is not registered in this process (schemas need an "
                                       f"in-process engine)")
                return _RequestMask(*entry)

        _CLASS = SchemaLogitsProcessor
    return _CLASS


_CLASS: type | None = None
