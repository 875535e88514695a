"""Batched generation with Hugging Face ``generate``.

One call per agent and turn: all P prompts of the batch (items x live branches)
times K samples go through ``model.generate`` together, left-padded with an
attention mask. The prompt part of the output is sliced off by position, never
searched for EOS, so a prompt that contains EOS/pad ids (chat templates) is
never cut. With ``share_prefix`` each prompt is prefilled once and its cache
expanded to its K samples (``shared_prefix.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

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
    """

    prompt_ids: list[list[int]]
    ids: list[list[int]]
    truncated: list[bool]
    texts: list[str]
    num_samples: int


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad ``seqs`` -> (ids [B, L], attention_mask [B, L])."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, s in enumerate(seqs):
        if s:
            ids[b, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[b, width - len(s):] = 1
    return ids, mask


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
    kwargs = dict(max_new_tokens=cfg.max_new_tokens, do_sample=do_sample,
                  pad_token_id=agent.tokenizer.pad_token_id, eos_token_id=agent.eos_ids)
    if do_sample:
        kwargs.update(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k or None)
    else:
        kwargs.update(temperature=None, top_p=None, top_k=None)
    return kwargs


@torch.no_grad()
def generate(agent, prompt_ids: list[list[int]], num_samples: int, greedy: bool = False,
             batch_size: int = 0, share_prefix: bool = False) -> Completions:
    """Sample ``num_samples`` completions per prompt with the agent's settings.

    ``greedy`` (or temperature 0) decodes greedily; ``batch_size`` > 0 splits
    the P prompts into chunks of that many prompts (memory cap), 0 = one call;
    ``share_prefix`` prefills each prompt once for its K samples.
    """
    model, tok = agent.model, agent.tokenizer
    k = num_samples
    chunks = batches(prompt_ids, batch_size)
    all_ids: list[list[int]] = []
    all_trunc: list[bool] = []
    was_training = model.training
    model.eval()
    try:
        for chunk in chunks:
            ids, mask = left_pad(chunk, tok.pad_token_id)
            ids, mask = ids.to(agent.device), mask.to(agent.device)
            shared = shared_prompt_inputs(model, ids, mask, k) if share_prefix else None
            if shared is None:
                out = model.generate(input_ids=ids, attention_mask=mask, num_return_sequences=k,
                                     **generation_kwargs(agent, greedy))
            else:
                out = model.generate(**shared, num_return_sequences=1, **generation_kwargs(agent, greedy))
            c_ids, c_trunc = cut_at_eos(out[:, ids.shape[1]:].cpu(), agent.eos_ids)
            all_ids += c_ids
            all_trunc += c_trunc
    finally:
        model.train(was_training)
    texts = tok.batch_decode(all_ids, skip_special_tokens=True)
    return Completions(prompt_ids=prompt_ids, ids=all_ids, truncated=all_trunc, texts=texts, num_samples=k)
