"""One ``generate`` call for several LoRA agents on one base (peft mixed-adapter batch).

Agents whose models are :class:`~comarl.models.lora.AdapterModel` views of the same
:class:`~comarl.models.lora.SharedBase`, on the same device, with identical
``generate`` kwargs (:func:`~comarl.generation.hf.generation_kwargs`:
max_new_tokens, greedy or sampling with the same temperature/top_p/top_k, pad
and EOS ids) form a group. A group's prompts go through one call:

* agent j's prompt p is repeated K times (row ``p*K + k`` is its sample k, the
  layout ``num_return_sequences=K`` gives), agents' rows one after another;
* row b runs adapter ``adapter_names[b]`` (peft only repeats ``adapter_names``
  for beams, never for ``num_return_sequences``, hence the explicit repeat and
  ``num_return_sequences=1``);
* the rows are cut at EOS and split back into one :class:`Completions` per
  agent, decoded with that agent's tokenizer: the same format and order as one
  :func:`~comarl.generation.hf.generate` call per agent;
* prompts with a schema (structured generation) get a per-row program in one
  :class:`~comarl.generation.constrained.SchemaProcessor` for the whole call.

Greedy rows give the same tokens as separate calls (tested); sampled rows draw
from the same distributions, but the random stream is consumed differently.
With ``share_prefix`` each (agent, prompt) row is prefilled once under its
adapter and the cache expanded to its K rows (``shared_prefix.py``).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..models.lora import AdapterModel
from .constrained import processor_kwargs, schema_processor
from .hf import Completions, batches, cut_at_eos, generation_kwargs, left_pad
from .shared_prefix import shared_prompt_inputs


def adapter_group_key(agent, greedy: bool = False) -> tuple | None:
    """Agents with equal keys can share one mixed-adapter call; None = not a LoRA view (own call)."""
    model = getattr(agent, "model", None)
    if not isinstance(model, AdapterModel):
        return None
    kwargs = generation_kwargs(agent, greedy)
    settings = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))
    return id(model.shared), str(agent.device), settings


def adapter_groups(agents: Sequence, greedy: bool = False) -> list[list[int]]:
    """Partition agent indices into generation units, ordered by first member.

    Agents with the same :func:`adapter_group_key` form one unit; every other
    agent is a unit of its own. E.g. [lora(base A), full, lora(base A)] ->
    [[0, 2], [1]].
    """
    units: list[list[int]] = []
    by_key: dict[tuple, list[int]] = {}
    for i, agent in enumerate(agents):
        key = adapter_group_key(agent, greedy)
        if key is None:
            units.append([i])
        elif key in by_key:
            by_key[key].append(i)
        else:
            by_key[key] = [i]
            units.append(by_key[key])
    return units


@torch.no_grad()
def generate_adapters(agents: Sequence, prompt_ids: Sequence[list[list[int]]], num_samples: int,
                      greedy: bool = False, batch_size: int = 0,
                      schemas: Sequence[list | None] | None = None, share_prefix: bool = False) -> list[Completions]:
    """Completions for each agent of one adapter group (see :func:`adapter_groups`) from shared calls.

    Args:
        agents: agents whose models are views of one SharedBase with equal generate kwargs.
        prompt_ids: ``prompt_ids[j]`` are agent j's P_j prompts.
        num_samples: K completions per prompt.
        batch_size: > 0 caps the prompts (over all agents) per call, as in ``generate``; 0 = one call.
        schemas: optional, ``schemas[j]`` = agent j's [P_j] schemas (or None per prompt), as in ``generate``.
        share_prefix: prefill each (agent, prompt) row once and expand its cache to the K samples.
    Returns:
        one Completions per agent, ``ids[p*K + k]`` = sample k of its prompt p.
    """
    lead = agents[0]
    shared = lead.model.shared
    keys = {adapter_group_key(a, greedy) for a in agents}
    if None in keys or len(keys) != 1:
        raise ValueError(f"generate_adapters: agents {[a.name for a in agents]} are not one adapter group "
                         "(same LoRA base, device and generation settings)")
    k = num_samples
    schemas = schemas or [None] * len(agents)
    entries = [(j, p, sc[n] if sc else None) for j, (prompts, sc) in enumerate(zip(prompt_ids, schemas))
               for n, p in enumerate(prompts)]  # agent-major
    chunks = batches(entries, batch_size)
    ids_out: list[list[list[int]]] = [[] for _ in agents]
    trunc_out: list[list[bool]] = [[] for _ in agents]
    forced_out: list[list[list[bool]]] = [[] for _ in agents]
    kwargs = generation_kwargs(lead, greedy)
    was_training = [a.model.training for a in agents]
    shared.peft_model.eval()
    try:
        for chunk in chunks:
            if not chunk:
                continue
            names = [agents[j].model.adapter for j, _, _ in chunk for _ in range(k)]
            ids, mask = left_pad([p for _, p, _ in chunk], lead.tokenizer.pad_token_id)
            ids, mask = ids.to(lead.device), mask.to(lead.device)
            inputs = shared_prompt_inputs(shared.peft_model, ids, mask, k, adapter_names=names[::k]) \
                if share_prefix else None
            if inputs is None:  # row p*K + k = sample k of the chunk's prompt p
                inputs = {"input_ids": ids.repeat_interleave(k, dim=0),
                          "attention_mask": mask.repeat_interleave(k, dim=0)}
            proc = schema_processor(lead, [sc for _, _, sc in chunk for _ in range(k)], 1)  # one row per sample
            out = shared.generate_mixed(names, **inputs, num_return_sequences=1, **kwargs, **processor_kwargs(proc))
            c_ids, c_trunc = cut_at_eos(out[:, ids.shape[1]:].cpu(), lead.eos_ids)
            c_forced = proc.forced_for(c_ids) if proc is not None else [[False] * len(c) for c in c_ids]
            for r, (j, _, _) in enumerate(chunk):
                ids_out[j] += c_ids[r * k:(r + 1) * k]
                trunc_out[j] += c_trunc[r * k:(r + 1) * k]
                forced_out[j] += c_forced[r * k:(r + 1) * k]
    finally:
        for a, mode in zip(agents, was_training):
            a.model.train(mode)
    return [Completions(prompt_ids=list(prompt_ids[j]), ids=ids_out[j], truncated=trunc_out[j],
                        texts=a.tokenizer.batch_decode(ids_out[j], skip_special_tokens=True), num_samples=k,
                        forced=forced_out[j] if (own := schemas[j]) and any(s is not None for s in own) else None)
            for j, a in enumerate(agents)]
