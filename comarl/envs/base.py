"""The environment protocol: what every task gives the rollout.

Environments are *functional*: ``reset`` turns a dataset item into an
:class:`EnvState`, and ``step_batch`` maps (state, joint response) pairs to
:class:`Transition` records holding the next state. No environment object
mutates itself during a rollout, which is what lets the multi-turn tree branch
(every joint action of turn t continues from its own copy of the state).

``step_batch`` receives *all* joint actions of one turn of one rollout batch at
once, so an environment whose reward is expensive (running code in a sandbox)
can score them in parallel. ``FunctionEnv`` builds an environment from plain
callables for users who only have a reward function.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from ..core.stages import StageGraph


@dataclass(frozen=True)
class AgentRewards:
    """Per-agent rewards, for environments that define them explicitly.

    A plain ``float`` reward is the team reward shared by every agent. An
    environment that wants agent ``i`` to receive ``values[i]`` returns this
    type; list lengths are never used to guess which is meant.
    """

    values: tuple[float, ...]


Reward = float | AgentRewards


def scalar_reward(reward: Reward, where: str) -> float:
    """``reward`` as the one team number; :class:`AgentRewards` has none, and is refused naming ``where``."""
    if isinstance(reward, AgentRewards):
        raise TypeError(f"{where}: per-agent rewards {reward.values} where one team reward was expected")
    return float(reward)


def mean_or_none(xs: Sequence[float]) -> float | None:
    """The mean of ``xs`` for an evaluation summary; None (shown as "-") when there is nothing to average."""
    return float(sum(xs) / len(xs)) if xs else None


@dataclass(frozen=True)
class EnvState:
    """What one branch of an episode looks like before a turn.

    Attributes:
        item: the dataset row this episode is about (never modified).
        prompts: one prompt string per agent for the coming turn, length N.
        turn: 0-based index of the coming turn.
        history: per agent, the (prompt, response) pairs of earlier turns;
            ``history[i][t] == (prompt_i_t, response_i_t)``.
        info: free-form environment data carried along the branch (e.g. test
            feedback); must be treated as immutable.
    """

    item: Mapping[str, Any]
    prompts: tuple[str, ...]
    turn: int = 0
    history: tuple[tuple[tuple[str, str], ...], ...] = ()
    info: Mapping[str, Any] = field(default_factory=dict)

    def advanced(self, responses: Sequence[str], next_prompts: Sequence[str],
                 info: Mapping[str, Any] | None = None) -> "EnvState":
        """The state of the next turn after ``responses`` were written."""
        hist = self.history or tuple(() for _ in self.prompts)
        new_hist = tuple(h + ((p, r),) for h, p, r in zip(hist, self.prompts, responses))
        return replace(self, prompts=tuple(next_prompts), turn=self.turn + 1, history=new_hist,
                       info=dict(info) if info is not None else self.info)


@dataclass(frozen=True)
class Transition:
    """The environment's answer to one joint action.

    Attributes:
        reward: team reward (float) or explicit :class:`AgentRewards`.
        done: True when this branch ends here.
        next_state: the state for the next turn; None when ``done``.
        metrics: optional named numbers (reward levels, pass rates...) that the
            trainer averages and logs.
    """

    reward: Reward
    done: bool
    next_state: EnvState | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """A cooperative task for ``num_agents`` agents.

    ``reset(item)`` gives the first-turn state; ``step_batch(states,
    responses)`` scores ``len(states)`` joint actions, where ``responses[j]`` is
    the tuple of N response strings (agent order) for ``states[j]``.
    ``max_turns`` bounds an episode; after that turn every branch is done.
    An environment that runs torch modules in ``step_batch`` (a reward model)
    lists them in an optional ``rollout_modules()``: a sharded trainer makes
    them whole for the rollout (see :func:`rollout_modules`).
    """

    @property
    def num_agents(self) -> int: ...  # read-only here: a plain attribute or a property (wrappers) both fit

    def reset(self, item: Mapping[str, Any]) -> EnvState: ...

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]: ...


def rollout_modules(env) -> list:
    """The torch modules ``env`` runs while scoring (its optional ``rollout_modules()``; wrappers forward it)."""
    return list(env.rollout_modules()) if hasattr(env, "rollout_modules") else []


Formatter = Callable[[Mapping[str, Any]], str]
RewardFn = Callable[[Sequence[str], Mapping[str, Any]], Reward]
TransitionFn = Callable[[EnvState, Sequence[str]], Sequence[str] | None]


class FunctionEnv:
    """An environment built from per-agent formatters and a reward function.

    Args:
        formatters: one callable per agent, ``item -> prompt``.
        reward_fn: ``(responses, item) -> float | AgentRewards`` where
            ``responses`` has one string per agent (agent order).
        transition_fn: optional ``(state, responses) -> next prompts | None``
            for multi-turn tasks; ``None`` ends the branch. ``state.history``
            and ``state.prompts`` give each agent's past.
        max_turns: turns per episode (1 = single-turn).
        stages: the team graph (``comarl.core.stages.StageGraph``, or a list of agent lists: one stage each, every
            agent reading all earlier stages); None: one stage of every agent (docs/teams.md).
        stage_formatters: agent -> ``(state, inputs) -> prompt`` for an agent of a later stage, ``inputs``
            being {earlier agent: its output on this branch}; an agent without one gets its formatter's
            prompt followed by one block per output it reads (``stages.default_stage_prompt``).
    """

    def __init__(self, formatters: Sequence[Formatter], reward_fn: RewardFn,
                 transition_fn: TransitionFn | None = None, max_turns: int = 1,
                 stages: "StageGraph | Sequence[Sequence[int]] | None" = None,
                 stage_formatters: Mapping[int, Callable[[EnvState, Mapping[int, str]], str]] | None = None):
        if not formatters:
            raise ValueError("FunctionEnv needs at least one formatter (one per agent)")
        if max_turns > 1 and transition_fn is None:
            raise ValueError(f"max_turns={max_turns} needs a transition_fn that builds the next prompts")
        self.formatters = list(formatters)
        self.num_agents = len(self.formatters)
        self.reward_fn = reward_fn
        self.transition_fn = transition_fn
        self.max_turns = max_turns
        from ..core.stages import Stage, StageGraph

        if stages is not None and not isinstance(stages, StageGraph):
            stages = StageGraph(tuple(Stage(tuple(agents)) for agents in stages))
        if stages is not None:
            stages.validate(self.num_agents)
        self.stages = stages
        self.stage_formatters = dict(stage_formatters or {})
        for agent in self.stage_formatters:
            if stages is None or agent not in range(self.num_agents) or stages.stage_of(agent) == 0:
                raise ValueError(f"stage_formatters: agent {agent} does not act in a later stage of the team graph")

    def stage_prompt(self, state: EnvState, agent: int, inputs: Mapping[int, str]) -> str:
        """Agent ``agent``'s prompt reading ``inputs`` (its stage formatter's, or the default blocks)."""
        from ..core.stages import default_stage_prompt

        if agent in self.stage_formatters:
            return self.stage_formatters[agent](state, inputs)
        return default_stage_prompt(state.prompts[agent], inputs, self.stages)

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        return EnvState(item=item, prompts=tuple(f(item) for f in self.formatters))

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        out = []
        for state, resp in zip(states, responses):
            if len(resp) != self.num_agents:
                raise ValueError(f"joint action has {len(resp)} responses, environment has {self.num_agents} agents")
            try:
                reward = self.reward_fn(list(resp), state.item)
                if not isinstance(reward, AgentRewards):
                    reward = float(reward)
            except Exception as e:
                item = repr(dict(state.item))
                raise RuntimeError(f"reward_fn failed at turn {state.turn} on item {item[:200]}"
                                   f"{'...' if len(item) > 200 else ''}: {type(e).__name__}: {e}") from e
            last = state.turn + 1 >= self.max_turns
            nxt = None if last or self.transition_fn is None else self.transition_fn(state, list(resp))
            if nxt is None:
                out.append(Transition(reward, True))
            else:
                out.append(Transition(reward, False, state.advanced(resp, nxt)))
        return out


@dataclass
class EvalRecord:
    """Everything ``comarl eval`` saw for one dataset item.

    Attributes:
        item: the dataset row.
        responses: n joint responses (each a tuple of N strings, agent order)
            sampled for this item at the first turn (aligned: the k-th sample of
            every agent together).
        transitions: the environment's answer to each of them, same order.
    """

    item: Mapping[str, Any]
    responses: list[tuple[str, ...]]
    transitions: list[Transition]
