"""A team's generation: one call per agent (or per shared LoRA base) for every prompt of a turn.

The team generator contract the rollout calls (``RolloutSettings.generator``; this module's
``generate_for_agents`` is the default, Hugging Face ``generate`` underneath)::

    generator(agents, prompt_ids, k, greedy=False, batch_size=0, batch_adapters=True, schemas=None,
              share_prefix=False, scope=None) -> list[Completions]     # one per agent, in agent order

``prompt_ids[i]``: agent i's prompts (token ids); K samples each (1 when ``greedy``); ``schemas[i]``: agent
i's per-prompt schemas or None; ``scope(agents)``: a context in which those agents' sharded models are
whole (a call with no prompt still enters it).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch

from .adapters import adapter_groups, generate_adapters
from .devices import device_groups, overlap_generation
from .hf import Completions, generate


def scripted(generate_one: Callable) -> Callable:
    """A team generator calling ``generate_one`` per agent (no LoRA grouping): a test's scripted generator."""
    def generator(agents, prompt_ids, k, **kw):
        return generate_for_agents(agents, prompt_ids, k, **{**kw, "batch_adapters": False}, generate_one=generate_one)

    return generator


def generate_for_agents(agents: Sequence, prompt_ids: list[list[list[int]]], k: int, greedy: bool = False,
                        batch_size: int = 0, batch_adapters: bool = True, schemas: list | None = None,
                        share_prefix: bool = False, scope=None, generate_one: Callable = generate) -> list:
    """Completions per agent: ``prompt_ids[i]`` are agent i's prompts; results in agent order.

    ``generate_one(agent, prompt_ids, k, greedy=, batch_size=, share_prefix=[, schemas=])``: one agent's
    call (Hugging Face ``generate`` by default; a test's scripted generator).

    ``schemas``: optional, ``schemas[i]`` = agent i's per-prompt schemas or None (structured generation).

    With ``batch_adapters``, LoRA agents that are adapters of one shared base
    with identical generation settings make ONE ``generate`` call together
    (peft mixed-adapter batch, ``comarl/generation/adapters.py``); every other
    agent makes its own call. When the calls sit on two or more distinct CUDA
    devices, each device's calls run in their own thread so that generation
    overlaps across GPUs (the CUDA kernels release the GIL); otherwise (CPU,
    one GPU) they run one after another. ``share_prefix`` prefills each prompt
    once for its K samples (``comarl/generation/shared_prefix.py``).

    ``scope`` (sharded agents gathered one at a time, ``RolloutSettings.lockstep``): each call runs inside
    ``scope(its agents)``, one after another, and a call with no prompt still enters it (the rank joins
    the all-gather of the others and generates nothing).
    """
    units = adapter_groups(agents, greedy) if batch_adapters else [[i] for i in range(len(agents))]
    devices = [str(getattr(agents[u[0]], "device", "cpu")) for u in units]
    out: list = [None] * len(agents)
    schemas = schemas or [None] * len(agents)

    def call(u: list[int]) -> None:
        if not any(prompt_ids[i] for i in u):  # nothing to generate here (a sharded rank joining the others)
            for i in u:
                out[i] = Completions([], [], [], [], k)
            return
        if len(u) == 1:
            extra = {"schemas": schemas[u[0]]} if schemas[u[0]] is not None else {}  # (test doubles lack it)
            out[u[0]] = generate_one(agents[u[0]], prompt_ids[u[0]], k, greedy=greedy, batch_size=batch_size,
                                     share_prefix=share_prefix, **extra)
        else:
            extra = {"schemas": [schemas[i] for i in u]} if any(schemas[i] is not None for i in u) else {}
            comps = generate_adapters([agents[i] for i in u], [prompt_ids[i] for i in u], k, greedy=greedy,
                                      batch_size=batch_size, share_prefix=share_prefix, **extra)
            for i, c in zip(u, comps):
                out[i] = c

    def run(group: list[int]) -> None:
        for g in group:
            dev = torch.device(devices[g])
            with scope([agents[i] for i in units[g]]) if scope is not None else contextlib.nullcontext():
                if dev.type == "cuda" and torch.cuda.is_available():
                    with torch.cuda.device(dev):
                        call(units[g])
                else:
                    call(units[g])

    if scope is None and overlap_generation(devices):  # gathers are collectives: one call at a time
        from concurrent.futures import ThreadPoolExecutor

        groups = device_groups(devices)
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            for f in [pool.submit(run, g) for g in groups]:
                f.result()
    else:
        run(list(range(len(units))))
    return out
