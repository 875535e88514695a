"""Batched generation with Hugging Face ``generate``.

One call per agent and turn: all P prompts of the batch (items x live branches)
times K samples go through ``model.generate`` together, left-padded with an
attention mask. The prompt part of the output is sliced off by position, never
searched for EOS, so a prompt that contains EOS/pad ids (chat templates) is
never cut. With ``share_prefix`` each prompt is prefilled once and its cache
expanded to its K samples (``shared_prefix.py``).

A model sharded with FSDP2 (``train.hardware.sharding=fsdp``) must be whole when
``generate`` runs: the trainer gathers it once per step around the rollout
(``comarl.compute.sharding.Sharding.gathered``), so decoding does no
communication and ranks may decode different numbers of tokens. A sharded
model that is not gathered is refused here rather than left to hang.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..objective.logprobs import left_pad
from .constrained import processor_kwargs, schema_processor
from .shared_prefix import shared_prompt_inputs


@dataclass
class Completions:
    """K completions for each of P prompts, prompt-major.

    Attributes:
        prompt_ids: length P, the unpadded prompt ids.
        ids: length P*K; ``ids[p*K + k]`` is sample k of prompt p, cut after its
            first EOS (EOS included) and without padding.
        truncated: length P*K; True when no EOS came before max_new_tokens.
        texts: decoded completions (special tokens skipped), length P*K.
        forced: None, or length P*K: per token of ``ids[s]``, True where the token was forced
            by the prompt's schema (structured generation, ``comarl/generation/constrained.py``).
    """

    prompt_ids: list[list[int]]
    ids: list[list[int]]
    truncated: list[bool]
    texts: list[str]
    num_samples: int
    forced: list[list[bool]] | None = None


def cut_at_eos(generated: torch.Tensor, eos_ids: list[int]) -> tuple[list[list[int]], list[bool]]:
    """Cut each row of ``generated`` [B, T] (completion part only) after its first EOS.

    Returns (ids per row including that EOS, truncated flag per row). Padding
    after the EOS is dropped. Rows without EOS keep all T tokens and are flagged.
    """
    is_eos = torch.zeros_like(generated, dtype=torch.bool)
    for e in eos_ids:
        is_eos |= generated == e
    has = is_eos.any(dim=1)
    first = torch.where(has, is_eos.int().argmax(dim=1), torch.full_like(has, generated.shape[1], dtype=torch.long))
    lengths = torch.where(has, first + 1, first).tolist()
    rows = generated.tolist()
    return [r[:n] for r, n in zip(rows, lengths)], [not h for h in has.tolist()]


def batches(seq: list, size: int) -> list[list]:
    """``seq`` in chunks of ``size`` (``size`` <= 0: one chunk), the generation memory cap."""
    return [seq] if size <= 0 else [seq[i:i + size] for i in range(0, len(seq), size)]


def generation_kwargs(agent, greedy: bool = False) -> dict:
    """``model.generate`` kwargs from the agent's settings (greedy, or temperature 0, decodes greedily)."""
    cfg = agent.config
    do_sample = not greedy and cfg.temperature > 0
    # synced_gpus=False: an FSDP-managed model is whole here (see the module docstring), so each rank
    # stops decoding on its own; transformers' default would all-reduce a flag per token across ranks
    kwargs = dict(max_new_tokens=cfg.max_new_tokens, do_sample=do_sample, synced_gpus=False,
                  pad_token_id=agent.tokenizer.pad_token_id, eos_token_id=agent.eos_ids)
    if do_sample:
        kwargs.update(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k or None)
    else:
        kwargs.update(temperature=None, top_p=None, top_k=None)
    return kwargs


def _check_whole(agent) -> None:
    """Refuse a sharded (DTensor) model outside the trainer's gathered block."""
    from torch.distributed.tensor import DTensor

    if isinstance(next(agent.model.parameters()), DTensor):
        raise RuntimeError(f"{agent.name} is sharded (train.hardware.sharding=fsdp): generate on it inside "
                           f"Sharding.gathered(), which makes it whole on every rank first")


@torch.no_grad()
def generate(agent, prompt_ids: list[list[int]], num_samples: int, greedy: bool = False,
             batch_size: int = 0, schemas: list | None = None, share_prefix: bool = False) -> Completions:
    """Sample ``num_samples`` completions per prompt with the agent's settings.

    ``greedy`` (or temperature 0) decodes greedily; ``batch_size`` > 0 splits
    the P prompts into chunks of that many prompts (memory cap), 0 = one call.
    ``schemas``: optional [P] ``comarl.core.schema.Schema`` or None per prompt: constrained decoding
    (``constrained.py``); the result's ``forced`` says which tokens were forced.
    ``share_prefix`` prefills each prompt once for its K samples.
    """
    model, tok = agent.model, agent.tokenizer
    _check_whole(agent)
    k = num_samples
    if schemas is not None and len(schemas) != len(prompt_ids):
        raise ValueError(f"generate: {len(schemas)} schemas for {len(prompt_ids)} prompts")
    chunks = batches(prompt_ids, batch_size)
    schema_chunks = batches(list(schemas) if schemas else [None] * len(prompt_ids), batch_size)
    all_ids: list[list[int]] = []
    all_trunc: list[bool] = []
    all_forced: list[list[bool]] = []
    was_training = model.training
    model.eval()
    try:
        for chunk, chunk_schemas in zip(chunks, schema_chunks):
            ids, mask = left_pad(chunk, tok.pad_token_id)
            ids, mask = ids.to(agent.device), mask.to(agent.device)
            proc = schema_processor(agent, chunk_schemas, k)
            shared = shared_prompt_inputs(model, ids, mask, k) if share_prefix else None
            if shared is None:
                out = model.generate(input_ids=ids, attention_mask=mask, num_return_sequences=k,
                                     **generation_kwargs(agent, greedy), **processor_kwargs(proc))
            else:
                out = model.generate(**shared, num_return_sequences=1, **generation_kwargs(agent, greedy),
                                     **processor_kwargs(proc))
            c_ids, c_trunc = cut_at_eos(out[:, ids.shape[1]:].cpu(), agent.eos_ids)
            all_ids += c_ids
            all_trunc += c_trunc
            all_forced += proc.forced_for(c_ids) if proc is not None else [[False] * len(c) for c in c_ids]
    finally:
        model.train(was_training)
    texts = tok.batch_decode(all_ids, skip_special_tokens=True)
    return Completions(prompt_ids=prompt_ids, ids=all_ids, truncated=all_trunc, texts=texts, num_samples=k,
                       forced=all_forced if schemas and any(s is not None for s in schemas) else None)
