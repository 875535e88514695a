"""Encode each distinct prompt once: KV-cache checks, expansion, and the fallback notice.

With K samples per prompt, generation and the update both used to push every
prompt through the model K times. Sharing the prefix means: run the U distinct
prompts once (``use_cache=True``), then give each of the B samples a copy of
its prompt's keys and values (``index_select`` along the batch, which is
differentiable: in the update the gradient of all K samples flows back into the
one prompt forward).

Only transformers' ``DynamicCache`` made of plain full-attention
``DynamicLayer`` s is expanded. Anything else (no cache returned, e.g. under
gradient checkpointing; sliding-window or static layers; a legacy tuple cache)
raises :class:`PrefixSharingUnsupported`; callers then take the plain path and
:func:`notice_fallback` prints one line per model.
"""
from __future__ import annotations

import sys
import weakref

import torch


class PrefixSharingUnsupported(Exception):
    """The model's KV cache cannot be expanded to samples (or back-propagated through)."""


_UNSUPPORTED: "weakref.WeakSet" = weakref.WeakSet()
_NOTICED: set[tuple[int, str]] = set()


def unique_prompts(prompts: list[list[int]]) -> tuple[list[list[int]], torch.Tensor]:
    """Distinct prompts in order of first appearance and, per row, the index of its prompt.

    ``[[1, 2], [1, 2], [3]] -> ([[1, 2], [3]], tensor([0, 0, 1]))``.
    """
    where: dict[tuple[int, ...], int] = {}
    index = [where.setdefault(tuple(p), len(where)) for p in prompts]
    distinct = [list(t) for t in where]
    return distinct, torch.tensor(index, dtype=torch.long)


def worth_sharing(prompts: list[list[int]]) -> bool:
    """True when some prompt repeats (K >= 2 samples of one prompt) and no prompt is empty.

    With all prompts distinct nothing is saved and the split costs a second
    forward call, so the plain path is taken.
    """
    return bool(prompts) and all(prompts) and len({tuple(p) for p in prompts}) < len(prompts)


def cache_of(output) -> tuple[object, str]:
    """``(cache, keyword)`` of a forward's output: transformers >= 5.2x names it ``cache``, older ``past_key_values``.

    The keyword is the one to pass the cache back with.
    """
    for name in ("cache", "past_key_values"):
        try:
            if name in output and output[name] is not None:
                return output[name], name
        except TypeError:  # not a mapping
            if getattr(output, name, None) is not None:
                return getattr(output, name), name
    return None, "past_key_values"


def check_cache(cache) -> None:
    """Raise :class:`PrefixSharingUnsupported` unless ``cache`` is a DynamicCache of plain DynamicLayers."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError as e:  # transformers before per-layer caches
        raise PrefixSharingUnsupported(f"this transformers has no per-layer DynamicCache ({e})") from e

    if cache is None:
        raise PrefixSharingUnsupported("the model returned no KV cache (use_cache off, e.g. gradient checkpointing)")
    if not isinstance(cache, DynamicCache):
        raise PrefixSharingUnsupported(f"its KV cache is a {type(cache).__name__}, not a DynamicCache")
    kinds = {type(layer).__name__ for layer in cache.layers if type(layer) is not DynamicLayer}
    if kinds:
        raise PrefixSharingUnsupported(f"its KV cache has {sorted(kinds)} layers (only full-attention DynamicLayer)")


def expand_cache(cache, index: torch.Tensor) -> None:
    """Row b of every layer's keys/values becomes row ``index[b]`` (in place on the cache object).

    Keys/values ``[U, H, P, D] -> [B, H, P, D]``. ``index_select`` is
    differentiable: gradients of the B rows are summed into their U sources.
    """
    for layer in cache.layers:
        if layer.is_initialized and layer.keys.numel():
            idx = index.to(layer.keys.device)
            layer.keys = layer.keys.index_select(0, idx)
            layer.values = layer.values.index_select(0, idx)


def uses_gradient_checkpointing(model) -> bool:
    """transformers turns the cache off in training under gradient checkpointing: nothing to share."""
    if not model.training:
        return False
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # the new name first (no warning)
        try:
            value = getattr(model, name)
        except Exception:  # absent, or an exotic wrapper
            continue
        return bool(value)
    return False


def notice_fallback(model, where: str, err: Exception, remember: bool = True) -> None:
    """One line per model and place (the first time) saying sharing is off and why.

    ``remember``: the model can never share (later calls skip the attempt, see
    :func:`known_unsupported`); False for a passing condition such as gradient
    checkpointing in training mode.
    """
    if remember:
        try:
            _UNSUPPORTED.add(model)
        except TypeError:  # not weak-referenceable
            pass
    key = (id(model), where)
    if key in _NOTICED:
        return
    _NOTICED.add(key)
    print(f"comarl: shared-prefix {where} off for {type(model).__name__} ({err}); encoding each sample's "
          f"prompt separately", file=sys.stderr, flush=True)


def known_unsupported(model) -> bool:
    """True once :func:`notice_fallback` remembered ``model`` as unable to share."""
    try:
        return model in _UNSUPPORTED
    except TypeError:
        return False
