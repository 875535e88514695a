"""An environment that raises on one item: stop and name it (``raise``), or score it 0 and go on (``zero``).

``with_error_policy(env, on_error)`` wraps any environment (composition: the wrapper holds it as ``.env``).
``experiment.build_env`` applies ``env.on_error`` around the environment it builds, inside the reward processing,
so a zeroed item is a *raw* reward of 0 (``env.reward_scale``/``reward_shift`` then apply as to any reward). A
``Trainer`` given an environment without a policy wraps it with ``raise``, so the Python API stops the same way.

``step_batch`` first runs on the whole batch, so a batch without a failure costs nothing extra; when it raises,
each joint action is stepped on its own to find the one(s) that fail:

- ``raise``: :class:`EnvItemError` (a one-line error from the CLI) naming the joint action's position in the
  batch, its turn, the item (``train_dataset[17]`` once the trainer has told the wrapper its datasets, and the
  item's id or first fields) and the error.
- ``zero``: that joint action scores 0 and ends its branch (no metrics), a warning names it, and it is counted
  (:attr:`ErrorPolicyEnv.errors`; the trainer logs ``count/env_errors``). The other joint actions keep the
  transitions they got when stepped on their own.

Always stopped, whatever the policy: an error in ``reset`` (an item without prompts cannot be scored; the trainer
builds every item's prompts once before training, so these show at the start), and a
:class:`~comarl.sandbox.SandboxError` (the code sandbox failed twice on one job: the machine, not the model, so
scoring it 0 would teach the policy something false).
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

from ..core.config_io import UserError
from ..sandbox import SandboxError
from .base import EnvState, Environment, Transition, rollout_modules

POLICIES = ("raise", "zero")
ID_KEYS = ("task_id", "id", "question_id", "problem_id", "name", "idx")
WARN_FIRST, WARN_EVERY = 10, 100  # zero: warn the first errors each, then every 100th


class EnvItemError(UserError):
    """The environment raised on one item (``env.on_error: raise``), or the sandbox failed under it."""

    kind = "environment error"


def describe_item(item: Mapping[str, Any], limit: int = 120) -> str:
    """An item's id field (``task_id='HumanEval/3'``), else its repr cut at ``limit`` characters."""
    for key in ID_KEYS:
        if key in item and isinstance(item[key], (str, int)):
            return f"{key}={item[key]!r}"
    text = repr(dict(item))
    return text if len(text) <= limit else text[:limit] + "...}"


def _error_text(e: BaseException, limit: int = 400) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


class ErrorPolicyEnv:
    """``env`` with ``on_error`` applied to its ``step_batch`` and ``reset`` (see the module docstring).

    Args:
        env: any environment.
        on_error: ``raise`` or ``zero``.

    Attributes:
        errors: joint actions scored 0 so far (``zero``).
    """

    def __init__(self, env: Environment, on_error: str = "raise"):
        if on_error not in POLICIES:
            raise ValueError(f"env.on_error: must be raise or zero, got {on_error!r}")
        self.env, self.on_error = env, on_error
        self.errors = 0
        self._names: dict[int, str] = {}  # id(item) -> "train_dataset[17]"

    def __getattr__(self, name: str):
        # everything else (max_turns, summarize, render_table, close, an env's own attributes) is the env's:
        # the trainer wraps every environment, so the wrapper must not hide what callers read from it
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    def rollout_modules(self) -> list:
        return rollout_modules(self.env)

    def name_items(self, items: Sequence[Mapping[str, Any]], what: str) -> None:
        """Let messages name an item by its index in ``items`` (``what[i]``); items are matched by identity."""
        for i, item in enumerate(items):
            self._names.setdefault(id(item), f"{what}[{i}]")

    def item_text(self, item: Mapping[str, Any]) -> str:
        where = self._names.get(id(item))
        return f"{where} ({describe_item(item)})" if where else f"item {describe_item(item)}"

    # ------------------------------------------------------------- the environment
    def reset(self, item) -> EnvState:
        try:
            return self.env.reset(item)
        except SandboxError as e:
            raise EnvItemError(f"env.reset: the code sandbox failed on {self.item_text(item)}: {_error_text(e)}") from e
        except Exception as e:
            raise EnvItemError(f"env.reset raised on {self.item_text(item)}: {_error_text(e)}") from e

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        try:
            return self.env.step_batch(states, responses)
        except SandboxError as e:
            raise self._sandbox_failed(e, len(states)) from e
        except Exception as e:
            if len(states) == 1:  # nothing to narrow down
                return [self._failed(states[0], 0, 1, e)]
        return [self._one(s, r, j, len(states)) for j, (s, r) in enumerate(zip(states, responses))]

    def _one(self, state: EnvState, response: Sequence[str], j: int, n: int) -> Transition:
        try:
            out = self.env.step_batch([state], [response])
        except SandboxError as e:
            raise self._sandbox_failed(e, n) from e
        except Exception as e:
            return self._failed(state, j, n, e)
        if len(out) != 1:
            raise ValueError(f"env.step_batch returned {len(out)} transitions for 1 joint action")
        return out[0]

    def _failed(self, state: EnvState, j: int, n: int, e: Exception) -> Transition:
        where = f"joint action {j} of {n} (turn {state.turn}) on {self.item_text(state.item)}"
        if self.on_error == "raise":
            raise EnvItemError(f"env.step_batch raised on {where}: {_error_text(e)}; fix the environment or "
                               f"reward function, or score such items 0 and go on with env.on_error=zero (Python: "
                               f"comarl.with_error_policy(env, \"zero\"))") from e
        self.errors += 1
        if self.errors <= WARN_FIRST or self.errors % WARN_EVERY == 0:
            later = f"; from here on every {WARN_EVERY}th is shown" if self.errors == WARN_FIRST else ""
            warnings.warn(f"env.on_error=zero: {where} raised {_error_text(e, 200)}; scored 0 (env errors so far: "
                          f"{self.errors}{later})", RuntimeWarning, stacklevel=2)
        return Transition(0.0, True)

    def _sandbox_failed(self, e: SandboxError, n: int) -> EnvItemError:
        return EnvItemError(f"the code sandbox failed while scoring a batch of {n} joint actions (this is the "
                            f"machine, not the model, so it is never scored 0): {_error_text(e, 600)}")


def with_error_policy(env: Environment, on_error: str = "raise") -> ErrorPolicyEnv:
    """``env`` under ``on_error`` (``raise`` | ``zero``); an :class:`ErrorPolicyEnv` given again gets the new
    policy on the same environment."""
    if isinstance(env, ErrorPolicyEnv):
        return ErrorPolicyEnv(env.env, on_error)
    return ErrorPolicyEnv(env, on_error)


def error_policy_of(env: Any, depth: int = 16) -> ErrorPolicyEnv | None:
    """The :class:`ErrorPolicyEnv` in ``env``'s chain of wrappers (each holds the one inside as ``.env``), or None."""
    for _ in range(depth):
        if isinstance(env, ErrorPolicyEnv):
            return env
        env = env.__dict__.get("env") if hasattr(env, "__dict__") else None
        if env is None:
            return None
    return None


__all__ = ["EnvItemError", "ErrorPolicyEnv", "POLICIES", "describe_item", "error_policy_of", "with_error_policy"]
