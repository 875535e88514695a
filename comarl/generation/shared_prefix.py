"""Prefill each distinct prompt once for K samples, then let ``generate`` continue from the expanded cache.

``num_return_sequences=K`` copies every prompt K times before the prefill, so
a 1,000-token prompt costs K x 1,000 tokens of prefill. Here the P left-padded
prompts minus their last token (``ids[:, :-1]``) run once, the cache is
expanded to the P*K rows (row ``p*K + k`` = sample k of prompt p, the layout
``num_return_sequences`` gives) and ``generate`` gets the full expanded ids
with that cache, so it runs only the last prompt token and the new tokens.
The prefill uses the same attention mask and position ids (real-token count)
as ``generate``, so greedy decoding gives the same tokens (tested) and
sampling draws from the same distributions.
"""
from __future__ import annotations

import torch

from ..objective.prefix_cache import (PrefixSharingUnsupported, cache_of, check_cache, expand_cache, known_unsupported,
                                      notice_fallback)


@torch.no_grad()
def shared_prompt_inputs(model, ids: torch.Tensor, mask: torch.Tensor, k: int, **forward_kwargs) -> dict | None:
    """``generate`` inputs for K samples of each row of ``ids`` [P, L] with its prompt prefilled once.

    Returns ``{input_ids [P*K, L], attention_mask [P*K, L], <cache kwarg>: cache}``
    (pass with ``num_return_sequences=1``), or None when sharing cannot help
    (K = 1, one-token prompts) or the model's cache cannot be expanded (then
    one notice per model). ``forward_kwargs`` go to the prefill forward (e.g.
    peft's ``adapter_names``, one per row of ``ids``).
    """
    if k < 2 or ids.shape[1] < 2 or known_unsupported(model):
        return None
    implementation = getattr(getattr(model, "generation_config", None), "cache_implementation", None)
    if implementation not in (None, "dynamic"):  # generate would build its own (static, hybrid...) cache
        notice_fallback(model, "generation", PrefixSharingUnsupported(f"generation_config.cache_implementation is "
                                                                      f"{implementation!r}"))
        return None
    pre_ids, pre_mask = ids[:, :-1], mask[:, :-1]
    pos = (pre_mask.cumsum(dim=1) - 1).clamp(min=0)  # what generate derives from the mask
    try:
        try:
            out = model(input_ids=pre_ids, attention_mask=pre_mask, position_ids=pos, use_cache=True,
                        logits_to_keep=1, **forward_kwargs)
        except TypeError:  # models without logits_to_keep
            out = model(input_ids=pre_ids, attention_mask=pre_mask, position_ids=pos, use_cache=True,
                        **forward_kwargs)
        cache, cache_kw = cache_of(out)
        check_cache(cache)
    except PrefixSharingUnsupported as e:
        notice_fallback(model, "generation", e)
        return None
    expand_cache(cache, torch.arange(ids.shape[0], device=ids.device).repeat_interleave(k))
    return {"input_ids": ids.repeat_interleave(k, dim=0), "attention_mask": mask.repeat_interleave(k, dim=0),
            cache_kw: cache}
