"""Token log-probabilities of completions under a model, without a full log-softmax.

For each completion position we gather the chosen token's logit and subtract
``logsumexp`` over the vocabulary, in chunks of positions, in float32. Only the
completion positions are projected to logits (``logits_to_keep``), so memory is
O(B x C x V) for the completion length C, not the whole sequence.
"""
from __future__ import annotations

import torch


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
                        temperature: float = 1.0, forced: list[list[bool]] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of each completion given its prompt.

    Returns ``(logp [B, C], mask [B, C])``; positions with mask 0 hold 0. Logits
    are divided by ``temperature`` (when > 0) so that the log-probs are those of
    the distribution that sampled the completions. ``forced`` (optional, per
    completion token, structured generation) takes the forced tokens out of the
    mask; the other tokens' log-probs are unchanged (the model still sees every token).
    """
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
    if forced is not None:
        cmask = cmask * (1 - forced_mask(forced, c_len)).to(cmask)
    return logp * cmask, cmask


def forced_mask(forced: list[list[bool]], width: int) -> torch.Tensor:
    """Per-token forced flags -> [B, width] long, 1 where forced (padding: 0)."""
    out = torch.zeros((len(forced), width), dtype=torch.long)
    for i, f in enumerate(forced):
        if f:
            out[i, :len(f)] = torch.tensor(f[:width], dtype=torch.long)
    return out
