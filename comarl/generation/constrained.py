"""Constrained decoding for schemas (``comarl/core/schema.py``): forced skeleton, sampled values.

Why a ``LogitsProcessor`` with a per-row state machine: it plugs into HF
``generate`` unchanged (batched, ``num_return_sequences``, sampling or greedy,
the KV cache, peft's mixed-adapter batches), costs one pass over the rows per
step, and needs no second model call. It runs before the temperature/top-k/top-p
warpers (transformers puts custom processors first), so those act on the
constrained distribution. Each row follows its own program (rows of one call
may have different schemas, or none):

* literal piece -> its tokens (the piece tokenised on its own) are forced one by one;
* slot -> the model samples among *allowed* tokens: those whose text holds no
  disallowed character ("clean"), and those that are a clean text followed by
  the terminator at their very end ("closing"; sampling one ends the value);
  after ``max_tokens`` sampled tokens the terminator's tokens are forced;
* after the last piece, EOS is forced; the row is then finished.

BPE merges across the terminator: a token such as ``",`` or ``"}`` holds the
terminator *and* text that belongs to the next literal piece. We disallow it
(its first character, the terminator's, is disallowed inside values and it
does not end with the terminator), so the model must close a value with a
token that ends exactly at the terminator (the bare ``"`` always exists in a
byte-level BPE). The alternative, accepting a merged token when its tail
agrees with the next piece and re-tokenising the rest of that piece per row,
keeps the model's own tokenisation at the boundary but makes the boundary
between learned and forced text fall inside a token; we keep the split exact
and the vocabulary masks precomputed (two boolean vectors per slot kind).

Forced steps are recorded per row, so :class:`~comarl.generation.hf.Completions`
can say which completion tokens were forced; they leave the loss
(``completion_logprobs(..., forced=...)``). Log-probs of sampled value tokens
are those of the unconstrained model (like top-k/top-p, the constraint is not
in the log-probs; docs/structured.md).

Tokenizers: literal pieces are tokenised separately and concatenated, so the
decoded completion is the schema text only when decoding concatenated ids
gives the concatenated text (byte-level BPE: Qwen, Llama 3, GPT-2, SmolLM);
this is checked per piece and a tokenizer that fails it is refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..core.schema import Schema, Slot

_FORCE, _SAMPLE, _FREE = 0, 1, 2


def token_texts(tokenizer, vocab_size: int, exclude: set[int]) -> list[str]:
    """Text of every token id < ``vocab_size`` on its own; "" for special ids, ``exclude`` and ids past the
    tokenizer."""
    n = min(len(tokenizer), vocab_size)
    texts = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False,
                                   clean_up_tokenization_spaces=False)
    texts += [""] * (vocab_size - n)
    for i in set(tokenizer.all_special_ids) | set(exclude):
        if 0 <= i < vocab_size:
            texts[i] = ""
    return texts


def classify_tokens(texts: list[str], slot: Slot) -> tuple[torch.Tensor, torch.Tensor]:
    """Which tokens a slot allows: ``(allowed [V], closing [V])`` bool.

    clean: non-empty text without a disallowed character; closing: clean text (possibly empty)
    followed by the terminator, which ends the token. allowed = clean | closing. E.g. with
    terminator ``"``: ``Paris`` clean, ``s"`` and ``"`` closing, ``",`` and ``a\\n`` neither.
    """
    bad, term = set(slot.disallowed), slot.terminator
    clean = torch.tensor([bool(t) and not (set(t) & bad) for t in texts], dtype=torch.bool)
    closing = torch.tensor([bool(t) and t.endswith(term) and not (set(t[:len(t) - len(term)]) & bad)
                            for t in texts], dtype=torch.bool)
    return clean | closing, closing


@dataclass
class _SlotTable:
    allowed: torch.Tensor  # [V] bool
    closing: frozenset  # ids that end the value


class _Tables:
    """Slot tables per (tokenizer, slot kind, vocab size), built once per process (a vocabulary pass ~1 s)."""

    def __init__(self) -> None:
        self._texts: dict = {}
        self._tables: dict = {}
        self._ids: dict = {}

    def texts(self, tok, vocab_size: int, exclude: tuple) -> list[str]:
        key = (id(tok), vocab_size, exclude)
        if key not in self._texts:
            self._texts[key] = (tok, token_texts(tok, vocab_size, set(exclude)))
        return self._texts[key][1]

    def table(self, tok, slot: Slot, vocab_size: int, exclude: tuple, device) -> _SlotTable:
        key = (id(tok), slot.terminator, slot.disallowed, vocab_size, exclude, str(device))
        if key not in self._tables:
            allowed, closing = classify_tokens(self.texts(tok, vocab_size, exclude), slot)
            if not closing.any():
                raise ValueError(f"structured generation: no token of the tokenizer ends with the terminator "
                                 f"{slot.terminator!r}; every value would run to its cap")
            self._tables[key] = (tok, _SlotTable(allowed.to(device), frozenset(closing.nonzero().flatten().tolist())))
        return self._tables[key][1]

    def ids(self, tok, text: str, eos_ids: tuple) -> list[int]:
        """Token ids of a literal piece, checked to decode back to itself (also after itself) and hold no EOS."""
        key = (id(tok), text)
        if key not in self._ids:
            ids = list(tok(text, add_special_tokens=False)["input_ids"])
            again = tok.decode(ids + ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            if again != text + text:
                raise ValueError(f"structured generation: the tokenizer does not decode the schema text {text!r} back "
                                 f"to itself after other text (got {again!r} for it twice); schemas need a tokenizer "
                                 f"whose decode of concatenated ids is the concatenated text (byte-level BPE)")
            if set(ids) & set(eos_ids):
                raise ValueError(f"structured generation: the schema text {text!r} contains an EOS token")
            self._ids[key] = (tok, ids)
        return self._ids[key][1]


TABLES = _Tables()


@dataclass
class Program:
    """A schema compiled for one tokenizer: ``steps`` are literal token-id lists and slots, then [EOS]."""

    steps: list
    term_ids: dict  # terminator -> token ids (forced at a slot's cap)
    worst_case: int  # most completion tokens a row can take

    @classmethod
    def compile(cls, schema: Schema, tok, eos_ids: list[int]) -> "Program":
        eos = tuple(eos_ids)
        steps: list = []
        term_ids: dict = {}
        worst = 1  # the final EOS
        for p in schema.parts:
            if isinstance(p, Slot):
                if p.terminator not in term_ids:
                    term_ids[p.terminator] = TABLES.ids(tok, p.terminator, eos)
                steps.append(p)
                worst += p.max_tokens + len(term_ids[p.terminator])
            elif p:
                ids = TABLES.ids(tok, p, eos)
                steps.append(ids)
                worst += len(ids)
        steps.append([eos_ids[0]])
        return cls(steps, term_ids, worst)


class _Row:
    """Where one row is in its program: the forced tokens still queued, or the slot and its sampled count."""

    def __init__(self, program: Program):
        self.program, self.step, self.count = program, -1, 0
        self.queue: list[int] = []
        self._next()

    def _next(self) -> None:
        self.step += 1
        self.count = 0
        steps = self.program.steps
        self.queue = list(steps[self.step]) if self.step < len(steps) and isinstance(steps[self.step], list) else []

    def action(self):
        if self.queue:
            return _FORCE, self.queue[0]
        if self.step >= len(self.program.steps):
            return _FREE, None
        return _SAMPLE, self.program.steps[self.step]

    def advance(self, token: int, closing: frozenset | None) -> None:
        if self.queue:
            self.queue.pop(0)
            if not self.queue:
                self._next()
        elif self.step < len(self.program.steps):  # in a slot
            slot = self.program.steps[self.step]
            if closing is None:
                raise ValueError("a row in a slot advanced without the slot's closing tokens")
            if token in closing:
                self._next()
            else:
                self.count += 1
                if self.count >= slot.max_tokens:
                    self.queue = list(self.program.term_ids[slot.terminator])


class SchemaProcessor:
    """Per-row constrained decoding for one ``generate`` call (see the module docstring); a HF logits processor
    (a plain callable, so that importing comarl does not import transformers).

    Args:
        programs: one per row of the call (row b of ``num_return_sequences=K`` is prompt b // K), None = free row.
        tokenizer: the rows' tokenizer (one per call).
        eos_ids: EOS ids (never allowed inside a slot).
    """

    def __init__(self, programs: list[Program | None], tokenizer, eos_ids: list[int]):
        self.rows = [_Row(p) if p is not None else None for p in programs]
        self.tok, self.exclude = tokenizer, tuple(eos_ids)
        self.forced: list[list[bool]] = [[] for _ in programs]
        self.start: int | None = None
        self.seen = 0
        self.closing: dict = {}  # slot -> closing ids of its table

    def _table(self, slot: Slot, scores: torch.Tensor) -> _SlotTable:
        table = TABLES.table(self.tok, slot, scores.shape[-1], self.exclude, scores.device)
        self.closing[slot] = table.closing
        return table

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.start is None:
            self.start = input_ids.shape[1]
        new = input_ids.shape[1] - self.start
        for t in range(self.seen, new):
            last = input_ids[:, self.start + t].tolist()
            for row, tok_id in zip(self.rows, last):
                if row is not None:
                    act, what = row.action()
                    row.advance(tok_id, self.closing.get(what) if act == _SAMPLE else None)
        self.seen = new
        force_rows, force_ids = [], []
        sample_rows: dict[Any, list[int]] = {}
        for r, row in enumerate(self.rows):
            act, what = row.action() if row is not None else (_FREE, None)
            self.forced[r].append(act == _FORCE)
            if act == _FORCE:
                force_rows.append(r)
                force_ids.append(what)
            elif act == _SAMPLE:
                sample_rows.setdefault(what, []).append(r)
        if force_rows:
            rows = torch.tensor(force_rows, device=scores.device)
            scores[rows] = float("-inf")
            scores[rows, torch.tensor(force_ids, device=scores.device)] = 0.0
        for slot, members in sample_rows.items():
            allowed = self._table(slot, scores).allowed
            idx = torch.tensor(members, device=scores.device)
            scores[idx] = scores[idx].masked_fill(~allowed, float("-inf"))
        return scores

    def forced_for(self, completions: list[list[int]]) -> list[list[bool]]:
        """Per row, which of its (EOS-cut) completion tokens were forced."""
        return [flags[:len(c)] for flags, c in zip(self.forced, completions)]


def schema_processor(agent, schemas: list[Schema | None], k: int) -> SchemaProcessor | None:
    """The processor for one call of ``agent`` over prompts with ``schemas`` (K rows each), None if none has one.

    Raises:
        ValueError: the agent's ``max_new_tokens`` cannot hold a schema's longest answer (named by agent and prompt).
    """
    if all(s is None for s in schemas):
        return None
    tok, eos = agent.tokenizer, list(agent.eos_ids)
    programs: list[Program | None] = []
    limit = agent.config.max_new_tokens
    for p, schema in enumerate(schemas):
        prog = Program.compile(schema, tok, eos) if schema is not None else None
        if schema is not None and prog is not None and prog.worst_case > limit:
            raise ValueError(f"agents.{agent.index}.max_new_tokens: {agent.name}'s max_new_tokens={limit} cannot hold "
                             f"the structured answer of prompt {p}: up to {prog.worst_case} tokens (skeleton, "
                             f"{len(schema.slots)} slots at their max_tokens, EOS); raise max_new_tokens or lower "
                             f"the slots' max_tokens")
        programs += [prog] * k
    return SchemaProcessor(programs, tok, eos)


def processor_kwargs(proc: SchemaProcessor | None) -> dict:
    """``generate`` kwargs that install ``proc`` (none for None)."""
    if proc is None:
        return {}
    from transformers import LogitsProcessorList

    return {"logits_processor": LogitsProcessorList([proc])}
