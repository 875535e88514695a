"""Agents on vLLM engines: which engine samples for which agent, one engine call per base, weights synced.

:class:`VLLMGenerator` is built once for a team (after the agents, before the first rollout):

* every full-weight agent gets its own engine (agents that share one model object, ``share_weights_with``,
  share it); all LoRA agents on one :class:`~comarl.models.lora.SharedBase` share ONE engine serving the frozen
  base, with one adapter per agent;
* :meth:`VLLMGenerator.generate_for_agents` (also the object's ``__call__``: it is a team generator,
  ``generation/team.py``, the rollout's and ``train.hardware.generator: vllm``'s) has the signature of
  ``rollout.generate_for_agents`` and
  returns the same per-agent :class:`~comarl.generation.hf.Completions` (as
  :class:`~comarl.generation.vllm_engine.EngineCompletions`, with the engine's log-probs); the agents
  of one engine go through ONE engine call (a LoRA request and sampling settings per prompt, so agents
  with different temperatures still share it); agents left on HF (``on_vllm``) run as today;
* :meth:`VLLMGenerator.sync` pushes the trained weights after an optimiser step: a full agent's
  parameters, or each LoRA agent's adapter (re-registered under a new id; the base is never pushed).

Where the engines run:

* **torchrun** (several ranks): every rank builds the same engines in its own process (``vllm_engine.py``:
  ``external_launcher``), samples its own share of the batch with them and pushes after each step.
* **FSDP2-sharded agents** (``sharding``): an engine is built, and a full agent pushed, inside
  ``Sharding.gathered`` (the whole model on every rank for the push: its parameters once more in memory, as
  for the rollout); a LoRA agent's adapter is gathered alone (``vllm_weights.gathered_adapter``), the base
  never after the engine started. Building and pushing are then collectives: every rank pushes the same
  agents in the same order (``Team.sync_generator`` does).
* **Agents on their own devices**: with ``in_process: false`` each engine runs in its own process, on its
  agent's GPU or (CPU) bound to its agent's ``agent_cpus``; the engines then sample concurrently, one thread
  each waiting on its engine.

A push or engine call past its limit (``push_timeout_s``, ``call_timeout_s``) stops the run with one line
naming the rank and the agents; under torchrun a push that fails does the same (``stop``).

Prompts with a schema (structured generation) run through the engine's schema mask (``vllm_schema.py``)
and return ``forced`` flags as on the HF path. Refused with a one-line error: a model on the ``meta``
device, sharded (DTensor) parameters without the run's ``sharding``, an agent on a GPU other than the
in-process engine's (cuda:0), two engines bound to overlapping CPUs, schemas on an engine in its own
process, and a LoRA view passed where full weights are expected.
``batch_size`` and ``share_prefix`` do not apply to vLLM agents (the engine schedules its own batches
within its KV-cache budget and shares prompt blocks through its prefix cache).
"""
from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from ..compute import distributed as dist
from ..compute.watchdog import rank_name, stop_run
from ..core.config_io import ConfigError
from ..models.lora import AdapterModel
from .adapters import adapter_groups, generate_adapters
from .constrained import schema_processor
from .hf import Completions, generate
from .vllm_engine import EngineCompletions, EngineSettings, Sampling, VLLMEngine
from .vllm_settings import cpu_set
from .vllm_weights import gathered_adapter


def _is_lora_view(agent) -> bool:
    return isinstance(getattr(agent, "model", None), AdapterModel)


def engine_key(agent) -> tuple:
    """Agents with equal keys share one engine: a LoRA base, or one model object."""
    return ("lora", id(agent.model.shared)) if _is_lora_view(agent) else ("full", id(agent.model))


def check_agent(agent, sharded: bool = False, in_process: bool = True) -> None:
    """Refuse an agent the vLLM generator cannot serve (one line naming the agent and the reason)."""
    from torch.distributed.tensor import DTensor

    first = next(agent.model.parameters())
    if first.device.type == "meta":
        raise ValueError(f"{agent.name}: its model is on the meta device (a sharded run's rank > 0 before its shards "
                         f"are filled); build the vLLM engines after Sharding.add")
    if isinstance(first, DTensor) and not sharded:
        raise ValueError(f"{agent.name}: its model is sharded (train.hardware.sharding=fsdp); give the VLLMGenerator "
                         f"the run's sharding, which gathers the weights it builds engines from and pushes")
    check_device(first.device, agent.name, in_process)


def check_device(device, name: str, in_process: bool = True) -> None:
    """An in-process engine runs on this process's GPU (cuda:0, or the rank's under torchrun): refuse an agent
    placed on another GPU unless its engine gets its own process (``in_process: false``), started on that GPU."""
    if device.type != "cuda" or not in_process:
        return
    own = dist.local_rank() if dist.world_size() > 1 else 0
    if (device.index or 0) != own:
        raise ValueError(f"{name}: on {device}, but an in-process vLLM engine runs on cuda:{own}; set "
                         f"train.hardware.vllm.in_process: false to start its engine on its own GPU")


class VLLMGenerator:
    """vLLM engines for a team's agents (module docstring).

    Args:
        agents: the team, in order.
        settings: :class:`EngineSettings` for every engine.
        on_vllm: per agent, True = sampled by vLLM; None = every agent.
        sharding: the run's FSDP2 :class:`~comarl.compute.sharding.Sharding` when the agents are sharded.
        engine_factory: builds one engine (``VLLMEngine``'s arguments); a test passes a fake.
        stop: called with one line when a push or an engine call runs past its limit, or (torchrun) a push
            fails; default: stop the run (``compute.watchdog.stop_run``); a test passes a fake.
    """

    def __init__(self, agents: Sequence, settings: EngineSettings | None = None,
                 on_vllm: Sequence[bool] | None = None, sharding=None, engine_factory: Callable = VLLMEngine,
                 stop: Callable[[str], object] = stop_run):
        self.agents = list(agents)
        self.settings = settings or EngineSettings()
        self.sharding, self.factory, self.stop = sharding, engine_factory, stop
        on_vllm = [True] * len(self.agents) if on_vllm is None else list(on_vllm)
        if len(on_vllm) != len(self.agents):
            raise ValueError(f"VLLMGenerator: on_vllm has {len(on_vllm)} entries for {len(self.agents)} agents")
        self.settings.check_agents(len(self.agents))
        self.members: dict[tuple, list[int]] = {}
        for i, (a, use) in enumerate(zip(self.agents, on_vllm)):
            if use:
                check_agent(a, sharding is not None, self.settings.in_process)
                self.members.setdefault(engine_key(a), []).append(i)
        self.cpus = self._engine_cpus()
        self.engines: dict[tuple, VLLMEngine] = {}
        try:
            for key, idx in self.members.items():
                with self._gathered([self.agents[idx[0]].model]):
                    self.engines[key] = self._build(key, idx)
        except BaseException:
            self.close()
            raise
        self.engine_of = {i: key for key, idx in self.members.items() for i in idx}
        # engines in their own processes sample at once, one thread waiting on each
        self.concurrent = not self.settings.in_process and len(self.engines) > 1

    def _gathered(self, models):
        return self.sharding.gathered(models) if self.sharding is not None else contextlib.nullcontext()

    def _engine_cpus(self) -> dict[tuple, str | None]:
        """Each engine's CPU list (``agent_cpus``): equal for the agents of one engine, disjoint across engines."""
        cpus = self.settings.agent_cpus
        if cpus is None:
            return {key: None for key in self.members}
        out: dict[tuple, str | None] = {}
        taken: dict[int, str] = {}
        for key, idx in self.members.items():
            lists = {str(cpus[i]) for i in idx}
            names = ", ".join(self.agents[i].name for i in idx)
            if len(lists) > 1:
                raise ConfigError(f"train.hardware.vllm.agent_cpus: {names} share one engine but name different CPUs "
                                 f"({sorted(lists)})")
            mine = lists.pop()
            for c in cpu_set(mine):
                if c in taken:
                    raise ConfigError(f"train.hardware.vllm.agent_cpus: CPU {c} is given to the engines of {taken[c]} "
                                     f"and of {names}; give each engine its own cores")
                taken[c] = names
            out[key] = mine
        return out

    def _build(self, key: tuple, idx: list[int]) -> VLLMEngine:
        lead = self.agents[idx[0]]
        names = ", ".join(self.agents[i].name for i in idx)
        device = next(lead.model.parameters()).device
        where = {"cpus": self.cpus[key], "gpu": (device.index or 0) if device.type == "cuda" else None,
                 "on_timeout": self.stop}
        if key[0] == "full":
            return self.factory(lead.model, lead.tokenizer, self.settings, name=names, **where)
        rank = max(self.agents[i].config.lora.r for i in idx)
        engine = self.factory(lead.model.shared.peft_model, lead.tokenizer, self.settings, lora_rank=rank,
                              num_adapters=len(idx), name=f"LoRA base of {names}", **where)
        for i in idx:  # inside the gathered build: whole here (peft's state_dict would give FSDP's shards)
            view = self.agents[i].model
            engine.push_adapter(view.adapter, view, gathered_adapter(view) if self.sharding is not None else None)
        return engine

    def _check_team(self, agents: Sequence) -> None:
        if len(agents) != len(self.agents) or any(a is not b for a, b in zip(agents, self.agents)):
            raise ValueError("VLLMGenerator: generate_for_agents got other agents than the team it was built for")

    def generate_for_agents(self, agents: Sequence, prompt_ids: list[list[list[int]]], k: int, greedy: bool = False,
                            batch_size: int = 0, batch_adapters: bool = True, schemas: list | None = None,
                            share_prefix: bool = False, scope=None) -> list[Completions]:
        """Completions per agent (``prompt_ids[i]`` = agent i's prompts), as ``rollout.generate_for_agents``.

        vLLM agents: one engine call per engine (its agents' prompts together); ``batch_size``,
        ``batch_adapters``, ``share_prefix`` and ``scope`` apply to the agents left on HF only (a vLLM engine
        holds whole weights, so sharded runs need no gather to sample from it).
        """
        self._check_team(agents)
        schemas = schemas or [None] * len(agents)
        out: list = [None] * len(agents)
        for idx in self.members.values():
            for i in idx:
                if schemas[i] is not None and any(sc is not None for sc in schemas[i]):
                    schema_processor(agents[i], schemas[i], 1)  # HF's checks and messages (max_new_tokens, tokenizer)
        calls = [(self.engines[key], key, idx, prompt_ids, k, greedy, schemas, out)
                 for key, idx in self.members.items()]
        if self.concurrent:
            with ThreadPoolExecutor(max_workers=len(calls)) as pool:
                for f in [pool.submit(self._engine_call, *c) for c in calls]:
                    f.result()
        else:
            for c in calls:
                self._engine_call(*c)
        rest = [i for i in range(len(agents)) if i not in self.engine_of]
        if rest:
            self._hf_calls(rest, prompt_ids, k, greedy, batch_size, batch_adapters, schemas, share_prefix, scope, out)
        return out

    def __call__(self, agents: Sequence, prompt_ids: list[list[list[int]]], k: int, **kwargs) -> list[Completions]:
        """The team generator contract (``generation/team.py``; ``RolloutSettings.generator``):
        :meth:`generate_for_agents`."""
        return self.generate_for_agents(agents, prompt_ids, k, **kwargs)

    def _engine_call(self, engine: VLLMEngine, key: tuple, idx: list[int], prompt_ids, k: int, greedy: bool,
                     schemas: list, out: list) -> None:
        prompts, sampling, adapters, owner, prompt_schemas = [], [], [], [], []
        for i in idx:
            agent = self.agents[i]
            s = Sampling.of(agent, greedy)
            for n, p in enumerate(prompt_ids[i]):
                prompts.append(p)
                prompt_schemas.append(schemas[i][n] if schemas[i] is not None else None)
                sampling.append(s)
                adapters.append(agent.model.adapter if key[0] == "lora" else None)
                owner.append(i)
        comp = engine.generate(prompts, k, sampling, adapters if key[0] == "lora" else None,
                               schemas=prompt_schemas if any(sc is not None for sc in prompt_schemas) else None)

        def has_schema(i: int) -> bool:  # as on the HF path: forced flags for an agent with a schema prompt
            return comp.forced is not None and schemas[i] is not None and any(sc is not None for sc in schemas[i])

        rows: dict[int, list[int]] = {i: [] for i in idx}
        for n, i in enumerate(owner):
            rows[i].append(n)
        for i in idx:  # the engine's texts: agents of one engine share one tokenizer (one base, or one model)
            samples = [n * k + j for n in rows[i] for j in range(k)]
            out[i] = EngineCompletions(prompt_ids=[prompts[n] for n in rows[i]], ids=[comp.ids[s] for s in samples],
                                       truncated=[comp.truncated[s] for s in samples],
                                       texts=[comp.texts[s] for s in samples], num_samples=k,
                                       forced=[comp.forced[s] for s in samples]
                                       if has_schema(i) and comp.forced is not None else None,
                                       logprobs=[comp.logprobs[s] for s in samples])

    def _hf_calls(self, rest, prompt_ids, k, greedy, batch_size, batch_adapters, schemas, share_prefix, scope,
                  out) -> None:
        """The agents left on HF, one unit after another (as the rollout does on one device)."""
        sub = [self.agents[i] for i in rest]
        units = adapter_groups(sub, greedy) if batch_adapters else [[j] for j in range(len(sub))]
        for unit in units:
            idx = [rest[j] for j in unit]
            agents = [self.agents[i] for i in idx]
            with scope(agents) if scope is not None else contextlib.nullcontext():
                if not any(prompt_ids[i] for i in idx):
                    for i in idx:
                        out[i] = Completions([], [], [], [], k)
                elif len(idx) == 1:
                    i = idx[0]
                    extra = {"schemas": schemas[i]} if schemas[i] is not None else {}
                    out[i] = generate(self.agents[i], prompt_ids[i], k, greedy=greedy, batch_size=batch_size,
                                      share_prefix=share_prefix, **extra)
                else:
                    extra = {"schemas": [schemas[i] for i in idx]} if any(schemas[i] is not None for i in idx) else {}
                    comps = generate_adapters(agents, [prompt_ids[i] for i in idx], k, greedy=greedy,
                                              batch_size=batch_size, share_prefix=share_prefix, **extra)
                    for i, c in zip(idx, comps):
                        out[i] = c

    def sync(self, agents: Sequence | None = None) -> dict[str, float]:
        """Push the current weights of ``agents`` (default: every vLLM agent) into their engines: a full engine's
        model once, a LoRA engine's adapters one by one. Call after the optimiser step, before the next rollout;
        with ``sharding`` every rank calls it with the same agents (the gathers are collectives). Returns seconds
        per engine name."""
        wanted = {id(a) for a in (agents if agents is not None else self.agents)}
        times: dict[str, float] = {}
        for key, idx in self.members.items():
            engine = self.engines[key]
            chosen = [i for i in idx if id(self.agents[i]) in wanted]
            if not chosen:
                continue
            times[engine.name] = self._push(engine, key, chosen)
        return times

    def _push(self, engine: VLLMEngine, key: tuple, chosen: list[int]) -> float:
        """One engine's push; under torchrun a push that fails stops the run with one line (the other ranks may
        wait in a collective this rank would never join)."""
        agent = self.agents[chosen[0]]
        try:
            if key[0] == "full":
                with self._gathered([agent.model]):  # whole on every rank (sharded), else a no-op
                    return engine.push_weights(agent.model)
            total = 0.0
            for i in chosen:
                agent = self.agents[i]
                state = gathered_adapter(agent.model) if self.sharding is not None else None  # never the base
                total += engine.push_adapter(agent.model.adapter, agent.model, state)
            return total
        except Exception as e:
            if dist.world_size() <= 1:
                raise
            self.stop(f"{rank_name()}: the weight push of {agent.name} to its vLLM engine failed "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
            raise

    def close(self) -> None:
        """Stop every engine."""
        for engine in self.engines.values():
            engine.close()
        self.engines.clear()
