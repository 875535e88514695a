"""The rollout of a :class:`~comarl.envs.program.ProgramEnv`: K concurrent runs of the program per item, every
call captured token by token, each call credited with its run's return.

::

    items [B] --(K runs each, concurrently; run (g, k) talks to its own episode URL)--> calls, outcomes
    outcomes --env.step_batch (env.on_error, reward processing)--> rewards R [B*K, N]
    agent i's samples: its calls, run by run (g, k) and in call order within a run; returns [B, K] = R[:, i];
    run_index [S] = g*K + k of each sample

A run is one joint action and the K runs of an item form its group (``G = B`` groups of K). The update reads
``AgentSamples.run_index`` and gives each sample its run's advantage (``advantages.token_advantages``): an agent
called several times in a run has each of those calls in the loss with the run's advantage (each call's tokens
weighted as any sample's under ``train.loss.loss_normalization``, so a run that calls an agent more often puts
more tokens of it in the loss); an agent not called in a run contributes nothing from it, while the run's return
still counts in the item's baseline. A call whose client disconnected before it was answered is not recorded (the
run never used it) and is counted. A generator failure (the machine, not the program) stops the step.
"""
from __future__ import annotations

import asyncio
import threading
import time
import warnings
from dataclasses import replace
from typing import Any, Sequence

import torch

from ..core.types import AgentSamples, Rollout
from ..envs.base import EvalRecord
from ..envs.error_policy import describe_item
from ..envs.program import OUTCOME, ProgramEnv, RunOutcome

WARN_FIRST = 10
_warned = {"no_call": 0}


def check_settings(s) -> None:
    """What a program rollout cannot follow (the config checks refuse these first, ``check_program_run``)."""
    if s.num_turns != 1 or s.joint_mode != "aligned" or s.greedy_baseline:
        raise ValueError(f"a ProgramEnv rollout runs one episode per run, K per item: num_turns 1, joint_mode "
                         f"aligned and no greedy baseline (got num_turns={s.num_turns}, joint_mode={s.joint_mode}, "
                         f"greedy_baseline={s.greedy_baseline})")
    if s.lockstep is not None:
        raise ValueError("a ProgramEnv rollout cannot gather sharded agents one at a time (train.hardware.fsdp_gather: "
                         "agent); use fsdp_gather: team")


def collect_program_rollout(agents: Sequence, env, program: ProgramEnv, items: Sequence[dict], s) -> Rollout:
    """Run ``program`` K times per item against the gateway over ``s.team_generator``; ``env`` is the chain of
    wrappers around ``program`` that scores the runs (module docstring)."""
    check_settings(s)
    n, k, b = len(agents), s.num_generations, len(items)
    if program.num_agents != n:
        raise ValueError(f"the ProgramEnv expects {program.num_agents} agents, {n} were given")
    server = program.gateway(agents, s.team_generator, {"batch_size": s.prompts_per_generate,
                                                        "batch_adapters": s.batch_adapters,
                                                        "share_prefix": s.share_prefix})
    gateway, episodes = server.gateway, server.gateway.episodes
    calls_before, t0 = gateway.batcher.calls, time.perf_counter()
    eps = [[episodes.open((g, j)) for j in range(k)] for g in range(b)]
    try:
        outcomes = run_programs(program, items, eps, server.url, episodes)
    finally:
        for row in eps:
            for ep in row:
                episodes.close(ep)
                episodes.forget(ep)
    for g, row in enumerate(eps):
        for j, ep in enumerate(row):
            if ep.failure is not None:  # the machine, not the program: never scored 0
                raise RuntimeError(f"the gateway's generator failed during program run {j + 1} of {k} on item "
                                   f"{describe_item(items[g])}: {ep.failure}") from ep.failure
    base = [env.reset(item) for item in items]
    states = [replace(base[g], info={OUTCOME: outcomes[g][j]}) for g in range(b) for j in range(k)]
    responses = [tuple(_last_text(ep, i) for i in range(n)) for row in eps for ep in row]
    transitions = env.step_batch(states, responses)
    if len(transitions) != len(states):
        raise ValueError(f"env.step_batch returned {len(transitions)} transitions for {len(states)} program runs")
    from .returns import reward_vector

    rewards = torch.stack([reward_vector(tr.reward, n, f"program run {r % k + 1} of {k} on item "
                                         f"{describe_item(items[r // k])}")
                           for r, tr in enumerate(transitions)])  # [B*K, N]
    samples = [_agent_samples(i, eps, rewards[:, i].reshape(b, k)) for i in range(n)]
    no_call = [(g, j) for g in range(b) for j in range(k) if not eps[g][j].calls]
    for g, j in no_call:
        _warned["no_call"] += 1
        if _warned["no_call"] <= WARN_FIRST:
            warnings.warn(f"program run {j + 1} of {k} on item {describe_item(items[g])} called no agent: its reward "
                          f"counts in the item's baseline, it trains no agent", RuntimeWarning, stacklevel=2)
    metrics, counts = _metrics(agents, eps, rewards, transitions, samples, len(no_call))
    metrics["program/generate_calls"] = float(gateway.batcher.calls - calls_before)
    metrics["program/disconnects"] = float(sum(ep.disconnects for row in eps for ep in row))
    metrics["time/program_rollout_s"] = time.perf_counter() - t0
    examples = [{"item": g, "prompts": [_prompt_text(agents, eps[g][j], i) for i in range(n)],
                 "responses": list(responses[g * k + j]), "reward": float(rewards[g * k + j].mean())}
                for g in range(min(b, s.num_examples)) for j in range(min(2, k))]
    records = [EvalRecord(item=items[g], responses=responses[g * k:(g + 1) * k],
                          transitions=list(transitions[g * k:(g + 1) * k])) for g in range(b)] if s.keep_records else []
    return Rollout(agents=samples, metrics=metrics, examples=examples, num_completions=sum(len(x.completion_ids)
                                                                                          for x in samples),
                   records=records, tree=None, metric_counts=counts)


def _last_text(ep, i: int) -> str:
    texts = [c.text for c in ep.calls if c.agent == i]
    return texts[-1] if texts else ""


def _prompt_text(agents, ep, i: int) -> str:
    first = next((c for c in ep.calls if c.agent == i), None)
    return agents[i].tokenizer.decode(first.prompt_ids) if first is not None else ""


def _agent_samples(i: int, eps: list[list[Any]], returns: torch.Tensor) -> AgentSamples:
    """Agent i's calls over every run, run by run and in call order, with each one's run index."""
    k = returns.shape[1]
    calls, runs = [], []
    for g, row in enumerate(eps):
        for j, ep in enumerate(row):
            mine = sorted((c for c in ep.calls if c.agent == i), key=lambda c: c.seq)
            calls += mine
            runs += [g * k + j] * len(mine)
    engine = [c.logprobs for c in calls] if calls and all(c.logprobs is not None for c in calls) else None
    return AgentSamples(prompt_ids=[list(c.prompt_ids) for c in calls], completion_ids=[list(c.ids) for c in calls],
                        truncated=torch.tensor([c.truncated for c in calls], dtype=torch.bool),
                        texts=[c.text for c in calls], returns=returns.float(),
                        turns=torch.zeros(returns.shape[0], dtype=torch.long), engine_logprobs=engine,
                        run_index=torch.tensor(runs, dtype=torch.long))


def _metrics(agents, eps, rewards: torch.Tensor, transitions, samples: list[AgentSamples],
             no_call: int) -> tuple[dict[str, float], dict[str, float]]:
    runs = rewards.shape[0]
    metrics: dict[str, float] = {"reward/turn0": float(rewards.mean()), "return/mean": float(rewards.mean()),
                                 "tree/nodes": float(len(eps)), "program/no_call_runs": no_call / max(runs, 1)}
    counts: dict[str, float] = {"reward/turn0": float(runs)}
    sums: dict[str, list[float]] = {}
    for tr in transitions:
        for key, val in tr.metrics.items():
            sums.setdefault(f"env/{key}", []).append(float(val))
    for key, vals in sums.items():
        metrics[key], counts[key] = sum(vals) / len(vals), float(len(vals))
    for agent, st in zip(agents, samples):
        metrics[f"program/calls/{agent.name}"] = st.num_samples / max(runs, 1)
        if st.num_samples:
            metrics[f"{agent.name}/completion_len"] = sum(len(c) for c in st.completion_ids) / st.num_samples
            metrics[f"{agent.name}/truncated"] = float(st.truncated.float().mean())
    return metrics, counts


# ----------------------------------------------------------------- running the programs
def run_programs(program: ProgramEnv, items: Sequence[dict], eps: list[list[Any]], url: str,
                 episodes) -> list[list[RunOutcome]]:
    """Every run concurrently (async programs as tasks, sync ones in daemon threads), each ended by its
    timeout; outcomes [B][K]. Each episode closes as its run ends (so the batcher stops waiting for it). The
    runs' clients share one HTTP connection pool (an ``openai`` client with its own pool costs ~30 ms to make)."""
    import httpx

    k = len(eps[0]) if eps else 0
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=max(1, 2 * len(eps) * k))
    sync_http = httpx.Client(limits=limits) if not program.is_async else None

    async def one(g: int, j: int, async_http) -> RunOutcome:
        ep, where = eps[g][j], f"run {j + 1} of {k} on item {describe_item(items[g])}"
        base = f"{url}/episodes/{ep.id}/v1"
        task = asyncio.ensure_future(_async_run(program, items[g], base, async_http) if program.is_async else
                                     _in_thread(_sync_run, program, items[g], base, sync_http))
        try:
            done, _ = await asyncio.wait({task}, timeout=program.timeout_s)
            if not done:
                task.cancel()
                return RunOutcome(where, error=TimeoutError(f"no return within {program.timeout_s:g} s "
                                                            f"(ProgramEnv timeout_s)"))
            return RunOutcome(where, value=task.result())
        except Exception as e:
            return RunOutcome(where, error=e)
        finally:
            episodes.close(ep)

    async def main() -> list[RunOutcome]:
        async with httpx.AsyncClient(limits=limits) as async_http:
            return await asyncio.gather(*[one(g, j, async_http) for g in range(len(eps)) for j in range(k)])

    try:
        flat = _run_loop(main)
    finally:
        if sync_http is not None:
            sync_http.close()
    return [flat[g * k:(g + 1) * k] for g in range(len(eps))]


def _client_kwargs(program: ProgramEnv, base: str, http) -> dict:
    return {"base_url": base, "api_key": "comarl-episode", "max_retries": 0, "timeout": program.timeout_s,
            "http_client": http}


async def _async_run(program: ProgramEnv, item: dict, base: str, http) -> Any:
    import openai

    return await program.program(item, openai.AsyncOpenAI(**_client_kwargs(program, base, http)))


def _sync_run(program: ProgramEnv, item: dict, base: str, http) -> Any:
    import inspect

    import openai

    out = program.program(item, openai.OpenAI(**_client_kwargs(program, base, http)))
    if inspect.isawaitable(out):
        if hasattr(out, "close"):
            out.close()
        raise TypeError("the program returned an awaitable: an async program (an object with an async __call__) "
                        "needs ProgramEnv(..., is_async=True)")
    return out


def _in_thread(fn, *args) -> asyncio.Future:
    """``fn(*args)`` in a daemon thread, as a future of this loop (a thread outliving its timeout is left to end)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def target() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as e:
            result, error = None, e

        def deliver() -> None:
            if not fut.done():
                fut.set_exception(error) if error is not None else fut.set_result(result)

        try:
            loop.call_soon_threadsafe(deliver)
        except RuntimeError:  # the rollout's loop has ended (this run timed out long ago)
            pass

    threading.Thread(target=target, name="comarl-program-run", daemon=True).start()
    return fut


def _run_loop(main) -> Any:
    """``asyncio.run(main())``, in a thread of its own when this thread already runs a loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = asyncio.run(main())
        except BaseException as e:
            box["err"] = e

    t = threading.Thread(target=target, name="comarl-program-loop")
    t.start()
    t.join()
    if "err" in box:
        raise box["err"]
    return box["out"]


__all__ = ["check_settings", "collect_program_rollout", "run_programs"]
