"""Teams in stages: which agents act in which stage of a turn, and whose outputs each one reads.

A :class:`StageGraph` is an ordered list of :class:`Stage`. In every turn the stages run in order; an
agent of stage s writes after the agents of stages 0..s-1 on the same branch and its prompt receives the
outputs of the earlier agents it *reads* (a DAG: an agent reads only earlier stages). The default graph,
one stage of all agents reading nobody, is the rollout as it always was.

How a stage samples (``comarl/rollout/tree.py`` builds the tree, docs/teams.md works an example):

- a **branch** stage (the first stage always is one) opens a new tree node for every joint action of the
  stage before it: each agent of the stage writes K samples from one prompt (K successors share their
  prompt, so the shared-prefix path encodes it once); its joint actions are aligned or cross as
  ``train.rollout.joint_mode`` says;
- an **aligned** stage writes one sample per joint action of the node it joins (sample j reads joint
  action j's texts), so its agents' K samples sit in that node's group next to the ones they read, as
  the agents of one stage sit together in ``joint_mode: aligned``;
- a **routed** stage (a branch stage with a :class:`Route`) lets a router agent's output choose which of
  the stage's agents act on that branch; the others write nothing there and get no gradient from it.

Credit (``rollout.py``): a node's value is the mean return of its joint actions, each the reward of its
leaf (the environment scores a turn once every stage has written) plus the discounted value of the next
turn; an agent's K samples at a node are its group, so a coder is compared with other codes of the same
plan and a planner with other plans.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .config_io import ConfigError

Inputs = Mapping[int, str]
"""What an agent reads: earlier agent index -> its output on this branch, in the order the stage lists."""


@dataclass(frozen=True)
class Route:
    """A conditional stage: ``choose(router's text)`` names the agents that act on that branch.

    Attributes:
        router: the agent whose output decides (an agent of an earlier stage).
        choose: ``text -> agent indices``; indices outside the stage are ignored.
        fallback: the agents that act when ``choose`` names none of the stage's agents (or the router did
            not write on this branch); never empty.
    """

    router: int
    choose: Callable[[str], Sequence[int]]
    fallback: tuple[int, ...]

    def chosen(self, stage_agents: Sequence[int], context: Inputs) -> tuple[int, ...]:
        """The stage's agents that act on a branch whose earlier outputs are ``context``."""
        text = context.get(self.router)
        picked = set(self.choose(text)) if text is not None else set()
        out = tuple(a for a in stage_agents if a in picked)
        return out or tuple(a for a in stage_agents if a in self.fallback)


def tag_route(router: int, options: Mapping[str, int], fallback: Sequence[int], tag: str = "route") -> Route:
    """A route parsed from ``<tag>name[, name...]</tag>`` in the router's text (case-insensitive; the last
    tag counts). ``options``: name -> agent index. ``tag_route(0, {"coder": 1, "writer": 2}, [1])``
    reads ``"... <route>writer</route>"`` as agent 2."""
    pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.IGNORECASE | re.DOTALL)
    lowered = {name.lower(): a for name, a in options.items()}

    def choose(text: str) -> list[int]:
        found = pattern.findall(text or "")
        if not found:
            return []
        return [lowered[w.strip().lower()] for w in re.split(r"[,\s]+", found[-1]) if w.strip().lower() in lowered]

    return Route(router, choose, tuple(fallback))


@dataclass(frozen=True)
class Stage:
    """Agents that act together in one stage of a turn.

    Attributes:
        agents: agent indices (parallel within the stage, as the agents of one stage always were).
        reads: agent -> the earlier agents whose outputs its prompt receives (in that order); an agent not
            listed reads every agent of every earlier stage. ``{}`` for every agent of the first stage.
        aligned: one sample per joint action of the node it joins (instead of K per joint action in a
            new node); see the module docstring.
        route: the router that picks which of ``agents`` act on each branch (None: all act).
    """

    agents: tuple[int, ...]
    reads: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    aligned: bool = False
    route: Route | None = None


@dataclass(frozen=True)
class StageGraph:
    """The stages of one turn, in order.

    Attributes:
        stages: the stages; every agent appears in exactly one.
        max_leaves: refuse a graph whose turn can have more leaves (joint actions the environment
            scores) per node of the first stage than this (K^stages grows fast).
        names: role names for the default prompt blocks (None: ``Agent 1``, ``Agent 2``...).
    """

    stages: tuple[Stage, ...]
    max_leaves: int = 256
    names: tuple[str, ...] | None = None

    @classmethod
    def single(cls, num_agents: int) -> "StageGraph":
        """The default: one stage of every agent, nobody reads anybody (today's rollout)."""
        return cls((Stage(tuple(range(num_agents))),))

    @property
    def is_single(self) -> bool:
        return len(self.stages) == 1

    @property
    def num_agents(self) -> int:
        return sum(len(s.agents) for s in self.stages)

    def stage_of(self, agent: int) -> int:
        for s, st in enumerate(self.stages):
            if agent in st.agents:
                return s
        raise ValueError(f"agent {agent} is in no stage")

    def reads_of(self, agent: int) -> tuple[int, ...]:
        """The earlier agents whose outputs ``agent``'s prompt receives."""
        s = self.stage_of(agent)
        st = self.stages[s]
        if agent in st.reads:
            return tuple(st.reads[agent])
        return tuple(a for earlier in self.stages[:s] for a in earlier.agents)

    def name(self, agent: int) -> str:
        return self.names[agent] if self.names is not None else f"Agent {agent + 1}"

    def validate(self, num_agents: int, joint_mode: str = "aligned") -> None:
        """Every agent in exactly one stage; reads and routers point at earlier stages. Errors name the stage."""
        if not self.stages:
            raise ConfigError("env.stages: at least one stage is required")
        seen: dict[int, int] = {}
        for s, st in enumerate(self.stages):
            where = f"env.stages[{s}]"
            if not st.agents:
                raise ConfigError(f"{where}: a stage needs at least one agent")
            for a in st.agents:
                if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a < num_agents:
                    raise ConfigError(f"{where}: agent {a!r} is not one of the {num_agents} agents "
                                      f"(0..{num_agents - 1})")
                if a in seen:
                    raise ConfigError(f"{where}: agent {a} already acts in stage {seen[a]}; an agent acts in one stage")
                seen[a] = s
            for a, reads in st.reads.items():
                if a not in st.agents:
                    raise ConfigError(f"{where}.reads: agent {a} does not act in this stage")
                for r in reads:
                    if r not in seen or seen[r] >= s:
                        raise ConfigError(f"{where}.reads: agent {a} reads agent {r}, which does not act in an "
                                          f"earlier stage (a stage reads only earlier stages)")
            if s == 0 and (st.aligned or st.route is not None):
                raise ConfigError(f"{where}: the first stage cannot be aligned or routed (nothing comes before it)")
            if st.aligned and st.route is not None:
                raise ConfigError(f"{where}: a routed stage opens a node per branch; it cannot be aligned")
            if st.route is not None:
                if st.route.router not in seen or seen[st.route.router] >= s:
                    raise ConfigError(f"{where}.route: the router (agent {st.route.router}) must act in an "
                                      f"earlier stage")
                if not st.route.fallback or any(a not in st.agents for a in st.route.fallback):
                    raise ConfigError(f"{where}.route.fallback: must name at least one agent of this stage, got "
                                      f"{list(st.route.fallback)}")
        missing = sorted(set(range(num_agents)) - set(seen))
        if missing:
            raise ConfigError(f"env.stages: agents {missing} act in no stage (every agent acts in exactly one)")
        if self.names is not None and len(self.names) != num_agents:
            raise ConfigError(f"env.stages: {len(self.names)} names for {num_agents} agents")
        if joint_mode not in ("aligned", "cross"):
            raise ConfigError(f"train.rollout.joint_mode must be 'aligned' or 'cross', got {joint_mode!r}")
        if self.max_leaves < 1:
            raise ConfigError(f"env.stages.max_leaves: must be >= 1, got {self.max_leaves}")

    # ------------------------------------------------------------------ sizes
    def turn_shape(self, mode: str, k: int) -> tuple[int, int]:
        """(leaves, completions) of one turn from one node of the first stage, every routed stage counted
        with all its agents (the most it can be): the upper bound the budgets check."""
        joints, completions = 1, 0
        for st in self.stages:
            n = len(st.agents)
            if st.aligned:
                completions += n * joints
                continue
            completions += n * k * joints
            joints *= k if mode == "aligned" else k ** n
        return joints, completions

    def check_leaves(self, mode: str, k: int) -> None:
        """Refuse a graph whose turn has more leaves than ``max_leaves``, naming the product that grew."""
        leaves, _ = self.turn_shape(mode, k)
        if leaves > self.max_leaves:
            branching = [st for st in self.stages if not st.aligned]
            raise ConfigError(
                f"env.stages: {len(branching)} branching stages with num_generations={k} ({mode}) give {leaves} "
                f"leaves per turn (K^stages; > max_leaves {self.max_leaves}); lower num_generations, make later "
                f"stages aligned (one sample per predecessor), or raise env.stages.max_leaves")


# ---------------------------------------------------------------------- prompts
def default_stage_prompt(prompt: str, inputs: Inputs, graph: StageGraph | None) -> str:
    """The agent's own prompt followed by one block per output it reads::

        <prompt>

        [Planner's output]
        <text>
    """
    if not inputs:
        return prompt
    if graph is None:
        raise ValueError("default_stage_prompt: outputs to read but no team graph to name their agents")
    blocks = [prompt] + [f"[{graph.name(a)}'s output]\n{text}" for a, text in inputs.items()]
    return "\n\n".join(blocks)


def env_attribute(env, attr: str):
    """``env.<attr>`` when ``env`` has it (None included: it declares none), else that of the environment it
    wraps (``env.env``: reward processing, a reward model and the like); None when no layer has it."""
    seen = 0
    while env is not None and seen < 16:
        if hasattr(env, attr):
            return getattr(env, attr)
        env, seen = getattr(env, "env", None), seen + 1
    return None


def stage_graph(env, num_agents: int) -> StageGraph:
    """The team graph an environment declares (its ``stages``, or that of the environment it wraps), else the
    one-stage default."""
    graph = env_attribute(env, "stages")
    return graph if graph is not None else StageGraph.single(num_agents)


def attach_stages(env, graph: StageGraph):
    """``env`` with ``graph`` as its team graph (YAML ``env.stages`` overrides what the environment declares)."""
    env.stages = graph
    return env


def stage_prompt(env, graph: StageGraph, state, agent: int, inputs: Inputs) -> str:
    """Agent ``agent``'s prompt on a branch whose earlier outputs it reads are ``inputs``.

    Reading nothing, it is the environment's prompt for the turn (``state.prompts[agent]``); otherwise the
    environment's ``stage_prompt(state, agent, inputs)`` when it has one (or wraps one), else
    :func:`default_stage_prompt`."""
    if not inputs:
        return state.prompts[agent]
    custom = env_attribute(env, "stage_prompt")
    if custom is not None:
        return custom(state, agent, inputs)
    return default_stage_prompt(state.prompts[agent], inputs, graph)


# ---------------------------------------------------------------------- YAML
def _agent_index(ref: Any, names: Sequence[str], where: str) -> int:
    if isinstance(ref, bool):
        raise ConfigError(f"{where}: expected an agent name or index, got {ref!r}")
    if isinstance(ref, int):
        if not 0 <= ref < len(names):
            raise ConfigError(f"{where}: agent index {ref} is out of range (0..{len(names) - 1})")
        return ref
    if isinstance(ref, str) and ref in names:
        return list(names).index(ref)
    raise ConfigError(f"{where}: unknown agent {ref!r}; the agents are {list(names)} (or their indices)")


def _agent_list(value: Any, names: Sequence[str], where: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        value = [value]
    return tuple(_agent_index(v, names, f"{where}[{i}]") for i, v in enumerate(value))


STAGE_KEYS = ("agents", "reads", "aligned", "route")
ROUTE_KEYS = ("by", "tag", "options", "fallback")


def parse_stages(spec: Any, agent_names: Sequence[str]) -> StageGraph:
    """The graph of ``env.stages`` in a config: a list of stages, or ``{stages: [...], max_leaves: N}``.

    A stage is a list of agents or a mapping ``{agents, reads, aligned, route}``; agents are named by their
    ``agents.<i>.name`` (default ``agent<i>``) or index; ``reads`` maps an agent to the agents it reads;
    ``route: {by: router, tag: route, options: {name: agent}, fallback: [agents]}`` (options default to the
    stage's agents by name, fallback to the stage's first agent)."""
    names = list(agent_names)
    max_leaves = 256
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - {"stages", "max_leaves"})
        if unknown:
            raise ConfigError(f"env.stages: unknown keys {unknown}; a mapping has stages and max_leaves")
        max_leaves = spec.get("max_leaves", max_leaves)
        if isinstance(max_leaves, bool) or not isinstance(max_leaves, int):
            raise ConfigError(f"env.stages.max_leaves: expected an integer, got {max_leaves!r}")
        spec = spec.get("stages")
    if not isinstance(spec, (list, tuple)) or not spec:
        raise ConfigError(f"env.stages: expected a non-empty list of stages, got {spec!r}")
    stages = []
    for s, raw in enumerate(spec):
        where = f"env.stages[{s}]"
        if not isinstance(raw, Mapping):
            raw = {"agents": raw}
        unknown = sorted(set(raw) - set(STAGE_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown keys {unknown}; known: {', '.join(STAGE_KEYS)}")
        if "agents" not in raw:
            raise ConfigError(f"{where}: missing agents")
        agents = _agent_list(raw["agents"], names, f"{where}.agents")
        reads = {}
        for ref, read in (raw.get("reads") or {}).items():
            reads[_agent_index(ref, names, f"{where}.reads")] = _agent_list(read or [], names, f"{where}.reads.{ref}")
        aligned = raw.get("aligned", False)
        if not isinstance(aligned, bool):
            raise ConfigError(f"{where}.aligned: expected true or false, got {aligned!r}")
        route = None
        if raw.get("route") is not None:
            r = raw["route"]
            if not isinstance(r, Mapping) or "by" not in r:
                raise ConfigError(f"{where}.route: expected a mapping with by (the router agent), got {r!r}")
            unknown = sorted(set(r) - set(ROUTE_KEYS))
            if unknown:
                raise ConfigError(f"{where}.route: unknown keys {unknown}; known: {', '.join(ROUTE_KEYS)}")
            options = {str(k): _agent_index(v, names, f"{where}.route.options.{k}")
                       for k, v in (r.get("options") or {names[a]: a for a in agents}).items()}
            fallback = _agent_list(r.get("fallback", [agents[0]]), names, f"{where}.route.fallback")
            route = tag_route(_agent_index(r["by"], names, f"{where}.route.by"), options, fallback,
                              str(r.get("tag", "route")))
        stages.append(Stage(agents, reads, aligned, route))
    graph = StageGraph(tuple(stages), max_leaves, tuple(names))
    graph.validate(len(names))
    return graph


def leaves_and_completions(graph: StageGraph, mode: str, k: int, turns: int) -> tuple[int, int]:
    """(leaves of the last turn, completions) of one item's tree when no branch ends early:
    completions = C * sum_t L^t for a turn of L leaves and C completions per first-stage node."""
    leaves, per_turn = graph.turn_shape(mode, k)
    return leaves ** turns, per_turn * sum(leaves ** t for t in range(turns))


__all__ = ["Inputs", "Route", "Stage", "StageGraph", "attach_stages", "default_stage_prompt", "env_attribute",
           "leaves_and_completions", "parse_stages", "stage_graph", "stage_prompt", "tag_route"]
