"""Token-exact preference pairs: the sampled ids and schema-forced flags travel with a pair's texts.

A pair made in a run (the rounds' pools and pair files, online ``pairs_out``) records under ``tokens``,
per side (``chosen``, ``rejected``) and agent, the completion's token ids as sampled, which of them a
schema forced (``"0110..."``, empty without a schema), and a fingerprint of the tokenizer that made
them. :func:`side_tokens` gives them back when the agent's tokenizer has that fingerprint, so DPO scores
exactly the sampled tokens and leaves forced ones out of the loss, as the online update does. A pair
without the record, or made by another tokenizer (a comparator model's, a file from another run), is
re-tokenised from its text.
"""
from __future__ import annotations

import hashlib
import json

from ..core.types import AgentSamples


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of the vocabulary and the special ids (cached on the tokenizer)."""
    fp = getattr(tokenizer, "_comarl_fingerprint", None)
    if fp is None:
        vocab = sorted(tokenizer.get_vocab().items())
        blob = json.dumps([vocab, tokenizer.eos_token_id, tokenizer.pad_token_id])
        fp = hashlib.sha1(blob.encode()).hexdigest()[:16]
        try:
            tokenizer._comarl_fingerprint = fp
        except AttributeError:  # a tokenizer object that refuses attributes: hashed again next time
            pass
    return fp


def joint_tokens(samples: list[AgentSamples], idx: list[int], fingerprints: list[str]) -> dict:
    """One side of a pair: agent i's sample ``idx[i]`` of ``samples[i]`` ([N] each)."""
    return {"ids": [list(s.completion_ids[k]) for s, k in zip(samples, idx)],
            "forced": ["".join("1" if f else "0" for f in s.forced[k]) if s.forced is not None else ""
                       for s, k in zip(samples, idx)],
            "tokenizer": list(fingerprints)}


def side_tokens(pair: dict, side: str, i: int, fingerprint: str) -> tuple[list[int], list[bool]] | None:
    """Agent i's recorded (ids, forced flags) of ``side``, or None: no record, or another tokenizer's."""
    rec = (pair.get("tokens") or {}).get(side)
    if not rec or i >= len(rec["tokenizer"]) or rec["tokenizer"][i] != fingerprint:
        return None
    ids, forced = list(rec["ids"][i]), rec["forced"][i]
    return ids, [c == "1" for c in forced] if forced else [False] * len(ids)
