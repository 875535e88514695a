"""Token log-probabilities of completions under a model, without a full log-softmax.

For each completion position we gather the chosen token's logit and subtract
``logsumexp`` over the vocabulary, in chunks of positions, in float32. Only the
completion positions are projected to logits (``logits_to_keep``), so memory is
O(B x C x V) for the completion length C, not the whole sequence.

With ``share_prefix`` the B samples' U distinct prompts go through the model
once and the completions run against the expanded prompt cache
(:func:`shared_prefix_logprobs`); same log-probs and gradients, U x P + B x C
tokens through the model instead of B x (P + C).
"""
from __future__ import annotations

import torch

from .prefix_cache import (PrefixSharingUnsupported, cache_of, check_cache, expand_cache, known_unsupported,
                           notice_fallback, unique_prompts, uses_gradient_checkpointing, worth_sharing)


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


def collate(prompts: list[list[int]], completions: list[list[int]], pad_id: int):
    """Pack (prompt, completion) pairs as [left-padded prompt | right-padded completion].

    Returns ``input_ids [B, P+C]``, ``attention_mask [B, P+C]``, ``position_ids
    [B, P+C]`` (count of real tokens before each position, as ``generate`` uses)
    and ``completion_mask [B, C]`` (1 on real completion tokens, EOS included).
    """
    p_len = max(len(p) for p in prompts)
    c_len = max(1, max(len(c) for c in completions))
    b = len(prompts)
    ids = torch.full((b, p_len + c_len), pad_id, dtype=torch.long)
    mask = torch.zeros((b, p_len + c_len), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, p_len - len(p):p_len] = torch.tensor(p, dtype=torch.long)
        mask[i, p_len - len(p):p_len] = 1
        if c:
            ids[i, p_len:p_len + len(c)] = torch.tensor(c, dtype=torch.long)
            mask[i, p_len:p_len + len(c)] = 1
    pos = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return ids, mask, pos, mask[:, p_len:].clone()


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor, chunk: int = 128) -> torch.Tensor:
    """log p(target) for logits [B, C, V] and targets [B, C] -> [B, C] (float32).

    Computed as ``logit[target] - logsumexp(logits)`` over chunks of C so that no
    float32 copy of the full [B, C, V] tensor is made at once.
    """
    out = []
    for s in range(0, logits.shape[1], chunk):
        part = logits[:, s:s + chunk].float()
        tgt = targets[:, s:s + chunk]
        out.append(part.gather(-1, tgt.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(part, dim=-1))
    return torch.cat(out, dim=1)


def completion_logprobs(model, prompts: list[list[int]], completions: list[list[int]], pad_id: int,
                        temperature: float = 1.0, share_prefix: bool = False,
                        forced: list[list[bool]] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of each completion given its prompt.

    Returns ``(logp [B, C], mask [B, C])``; positions with mask 0 hold 0. Logits
    are divided by ``temperature`` (when > 0) so that the log-probs are those of
    the distribution that sampled the completions. ``share_prefix`` encodes
    each distinct prompt once when some prompt repeats (:func:`shared_prefix_logprobs`;
    falls back to the plain path with a one-line notice for models whose cache
    cannot be expanded). ``forced`` (optional, per completion token, structured
    generation) takes the forced tokens out of the mask; the other tokens'
    log-probs are unchanged (the model still sees every token).
    """
    out = None
    if share_prefix and worth_sharing(prompts) and not known_unsupported(model):
        if uses_gradient_checkpointing(model) and torch.is_grad_enabled():
            notice_fallback(model, "update", PrefixSharingUnsupported("gradient checkpointing turns the cache off"),
                            remember=False)
        else:
            try:
                out = shared_prefix_logprobs(model, prompts, completions, pad_id, temperature)
            except PrefixSharingUnsupported as e:
                notice_fallback(model, "update", e)
    if out is None:
        out = _plain_logprobs(model, prompts, completions, pad_id, temperature)
    logp, cmask = out
    if forced is not None:
        cmask = cmask * (1 - forced_mask(forced, cmask.shape[1])).to(cmask)
        logp = logp * cmask
    return logp, cmask


def _plain_logprobs(model, prompts, completions, pad_id, temperature):
    """[prompt | completion] of every sample through the model (the prompt once per sample)."""
    device = next(model.parameters()).device
    ids, attn, pos, cmask = collate(prompts, completions, pad_id)
    ids, attn, pos, cmask = ids.to(device), attn.to(device), pos.to(device), cmask.to(device)
    c_len = cmask.shape[1]
    try:
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=c_len + 1).logits
    except TypeError:  # models without logits_to_keep
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, -(c_len + 1):]
    logits = logits[:, :-1]
    if temperature and temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = gather_logprobs(logits, ids[:, -c_len:])
    return logp * cmask, cmask


def forced_mask(forced: list[list[bool]], width: int) -> torch.Tensor:
    """Per-token forced flags -> [B, width] long, 1 where forced (padding: 0)."""
    out = torch.zeros((len(forced), width), dtype=torch.long)
    for i, f in enumerate(forced):
        if f:
            out[i, :len(f)] = torch.tensor(f[:width], dtype=torch.long)
    return out


def shared_prefix_logprobs(model, prompts: list[list[int]], completions: list[list[int]], pad_id: int,
                           temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`completion_logprobs` with each distinct prompt encoded once.

    1. The U distinct prompts, left-padded ``[U, P]``, go through the model once
       (``use_cache=True``, gradients on if enabled); the last position's logits
       ``[U, V]`` give every sample's first completion token.
    2. The cache is expanded to the B samples (``index_select`` along the batch:
       the K samples' gradients sum into their prompt's one forward).
    3. Completion tokens ``c[:, :C-1]`` ``[B, C-1]`` run against that cache with the
       attention mask ``[prompt mask | completion mask]`` (cached left pads stay
       masked) and position ids continuing each row's real-token count (as
       :func:`collate`); their logits give tokens 1..C-1.

    Returns ``(logp [B, C], mask [B, C])`` as :func:`completion_logprobs`; raises
    :class:`PrefixSharingUnsupported` when the model's cache cannot be expanded.
    """
    device = next(model.parameters()).device
    distinct, index = unique_prompts(prompts)
    index = index.to(device)
    p_ids, p_mask = left_pad(distinct, pad_id)
    p_len = p_ids.shape[1]
    p_ids, p_mask = p_ids.to(device), p_mask.to(device)
    p_pos = (p_mask.cumsum(dim=1) - 1).clamp(min=0)
    try:
        out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True, logits_to_keep=1)
        first = out.logits[:, -1]
    except TypeError:  # models without logits_to_keep
        out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True)
        first = out.logits[:, -1]
    cache, cache_kw = cache_of(out)
    check_cache(cache)

    c_len = max(1, max(len(c) for c in completions))
    c_ids = torch.full((len(completions), c_len), pad_id, dtype=torch.long)
    c_mask = torch.zeros((len(completions), c_len), dtype=torch.long)
    for b, c in enumerate(completions):
        if c:
            c_ids[b, :len(c)] = torch.tensor(c, dtype=torch.long)
            c_mask[b, :len(c)] = 1
    c_ids, c_mask = c_ids.to(device), c_mask.to(device)
    scale = temperature and temperature > 0 and temperature != 1.0
    if scale:
        first = first / temperature
    first = first.float()  # [U, V]
    chosen = first[index, c_ids[:, 0]]  # [B]: each sample's first token under its prompt's last logits
    logp0 = chosen - torch.logsumexp(first, dim=-1)[index]
    parts = [logp0.unsqueeze(1)]
    if c_len > 1:
        expand_cache(cache, index)
        full = torch.cat([p_mask.index_select(0, index), c_mask], dim=1)  # [B, P + C]
        pos = (full.cumsum(dim=1) - 1).clamp(min=0)[:, p_len:p_len + c_len - 1]
        logits = model(input_ids=c_ids[:, :-1], attention_mask=full[:, :-1], position_ids=pos,
                       use_cache=True, **{cache_kw: cache}).logits  # [B, C-1, V]
        if scale:
            logits = logits / temperature
        parts.append(gather_logprobs(logits, c_ids[:, 1:]))
    logp = torch.cat(parts, dim=1)
    return logp * c_mask, c_mask
