"""A user's multi-agent program as an environment: ``program(item, client) -> reward``.

The program is ordinary code against the ``openai`` client (or anything that takes a base URL: LangGraph, the
OpenAI Agents SDK): it calls agents by name (``model="writer"``), loops, calls tools, stops when it decides,
and returns the team's reward (a float, or :class:`~comarl.envs.base.AgentRewards` for one per agent). For each
item the trainer runs K programs concurrently, each with its own client whose base URL is a fresh episode of the
gateway (``comarl/gateway/``), so every call is captured token by token. The K runs of one item form the group.

Credit (``comarl/rollout/program.py``, docs/program.md): every completion agent i wrote in run (g, k) is one of
agent i's samples and gets its run's advantage, e.g. MAGRPO's ``R[g, k] - mean_k R[g, :]``; an agent called
several times in a run has all those calls in the loss; one not called in a run contributes no sample from it
(its run still counts in the item's baseline).

How scoring composes with the rest: the rollout hands each run's outcome (its reward, or the exception it raised
or its timeout) to ``env.step_batch`` through the usual wrappers, so ``env.on_error`` (raise, or score 0 and
count) names the item and the run, and ``env.reward_scale`` / ``reward_shift`` apply as to any environment.
"""
from __future__ import annotations

import inspect
import math
import numbers
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .base import AgentRewards, EnvState, Transition

OUTCOME = "comarl.program_outcome"
"""The key of ``EnvState.info`` under which the program rollout hands a run's :class:`RunOutcome` to step_batch."""


class ProgramRunError(RuntimeError):
    """A program run raised, timed out, or returned something that is not a reward."""


@dataclass(frozen=True)
class RunOutcome:
    """How one program run ended: its return value, or the error that ended it. ``where``: "run k of K"."""

    where: str
    value: Any = None
    error: BaseException | None = None


class ProgramEnv:
    """An environment whose episodes are runs of ``program(item, client)`` (module docstring; docs/program.md).

    Args:
        program: ``(item, client) -> float | AgentRewards``; ``client`` is an ``openai.OpenAI`` whose base URL is
            this run's episode (``client.base_url``), or an ``openai.AsyncOpenAI`` for an ``async def`` program.
        num_agents: the team's size (``model`` in a call names an agent: ``agents.<i>.name``).
        timeout_s: a run that has not returned by then is ended and scored by ``env.on_error`` (an async
            program is cancelled; a sync one's thread is left to finish on its own, its calls refused).
        batch_window_s: the longest a call waits for the other runs' calls before its batch is generated (the
            batch goes at once when every live run is waiting on a call).
        is_async: whether ``program`` is a coroutine function (None: ``inspect.iscoroutinefunction``).
        max_body_bytes: the largest request body the gateway takes.
        name: shown in the placeholder prompts of logs.

    The gateway starts at the first rollout and serves until :meth:`close` (the CLI closes the environment
    when training ends; a garbage-collected or exiting ProgramEnv closes it too).
    """

    max_turns = 1

    def __init__(self, program: Callable, num_agents: int, *, timeout_s: float = 300.0,
                 batch_window_s: float = 0.2, is_async: bool | None = None, max_body_bytes: int = 4 << 20,
                 name: str | None = None):
        if not callable(program):
            raise TypeError(f"ProgramEnv: program must be callable, got {type(program).__name__}")
        if not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"ProgramEnv: num_agents must be a positive integer, got {num_agents!r}")
        if timeout_s <= 0 or batch_window_s < 0:
            raise ValueError("ProgramEnv: timeout_s must be > 0 and batch_window_s >= 0")
        self.program, self.num_agents = program, num_agents
        self.timeout_s, self.batch_window_s = float(timeout_s), float(batch_window_s)
        self.max_body_bytes = max_body_bytes
        self.is_async = inspect.iscoroutinefunction(program) if is_async is None else bool(is_async)
        self.name = name or getattr(program, "__name__", "program")
        self._server: Any = None
        self._bound: tuple = ()
        self._finalizer = weakref.finalize(self, _stop, [None])

    # ------------------------------------------------------------- the environment protocol
    def reset(self, item: Mapping[str, Any]) -> EnvState:
        return EnvState(item=item, prompts=tuple(f"({self.name}: agent {i} is called by the program)"
                                                 for i in range(self.num_agents)))

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        """Each run's reward from its outcome (``EnvState.info[OUTCOME]``, set by the program rollout); a run that
        raised, timed out or returned no reward raises :class:`ProgramRunError` naming it (``env.on_error``)."""
        return [Transition(run_reward(_outcome(s), self.num_agents), True) for s in states]

    # ------------------------------------------------------------- the gateway
    def gateway(self, agents: Sequence, generator: Callable, generate_kwargs: dict):
        """The running gateway server for ``agents`` and ``generator`` (started, or restarted when they changed)."""
        from ..gateway import Episodes, Gateway, GatewayServer

        bound = (tuple(id(a) for a in agents), id(generator), tuple(sorted(generate_kwargs.items())))
        if self._server is not None and bound == self._bound:
            return self._server
        self.close()
        gw = Gateway(agents, generator, Episodes(), generate_kwargs, window_s=self.batch_window_s,
                     max_body_bytes=self.max_body_bytes, request_timeout_s=self.timeout_s + 5)
        self._server, self._bound = GatewayServer(gw).start(), bound
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _stop, [self._server])
        return self._server

    def close(self) -> None:
        """Stop the gateway and close its connections (idempotent)."""
        if self._server is not None:
            server, self._server = self._server, None
            server.stop()

    def __enter__(self) -> "ProgramEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _stop(holder: list) -> None:
    if holder and holder[0] is not None:
        holder[0].stop()


def _outcome(state: EnvState) -> RunOutcome:
    outcome = state.info.get(OUTCOME) if isinstance(state.info, Mapping) else None
    if not isinstance(outcome, RunOutcome):
        raise ProgramRunError("ProgramEnv scores program runs: its rollout runs the program and hands each run's "
                              "outcome here; it cannot score texts")
    return outcome


def run_reward(outcome: RunOutcome, n: int) -> float | AgentRewards:
    """The run's reward, checked: a finite real number or :class:`AgentRewards` of ``n`` finite values; an
    error that ended the run, or anything else, raises :class:`ProgramRunError` naming the run."""
    if outcome.error is not None:
        e = outcome.error
        raise ProgramRunError(f"program {outcome.where} failed: {type(e).__name__}: {e}") from e
    v = outcome.value
    if isinstance(v, AgentRewards):
        if len(v.values) != n or not all(isinstance(x, numbers.Real) and math.isfinite(x) for x in v.values):
            raise ProgramRunError(f"program {outcome.where} returned AgentRewards{v.values!r}: it needs {n} finite "
                                  f"numbers, one per agent")
        return AgentRewards(tuple(float(x) for x in v.values))
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        raise ProgramRunError(f"program {outcome.where} returned {v!r} ({type(v).__name__}): a program returns its "
                              f"run's reward, a finite number (or comarl.AgentRewards)")
    return float(v)


def program_env_of(env: Any, depth: int = 16) -> ProgramEnv | None:
    """The :class:`ProgramEnv` in ``env``'s chain of wrappers (each holds the one inside as ``.env``), or None."""
    for _ in range(depth):
        if isinstance(env, ProgramEnv):
            return env
        env = env.__dict__.get("env") if hasattr(env, "__dict__") else None
        if env is None:
            return None
    return None


__all__ = ["OUTCOME", "ProgramEnv", "ProgramRunError", "RunOutcome", "program_env_of", "run_reward"]
