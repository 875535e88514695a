"""Rollouts: joint actions, the multi-turn tree, team stages within a turn, credited returns.

The tree is generated breadth-first: at each turn, every live node of every
item sends its prompts through one ``generate`` call per agent. Each joint
action of a node is scored by one ``env.step_batch`` call for the whole turn,
and (multi-turn) continues as a child node with its own environment state.

Stages (``comarl/core/stages.py``): when the environment declares a team graph, a
turn runs its stages in order and the tree branches within the turn as it does
across turns. A branch stage opens a node for every joint action of the stage
before it (its agents write K samples each from prompts that hold the earlier
outputs of that branch); an aligned stage adds one sample per joint action to
the node it joins; a routed stage opens its node with the agents the router
chose. The environment scores a turn's leaves (the joint actions of its last
stage) in one ``env.step_batch``; the joint response holds every agent's text
on the branch ("" for an agent that did not act, routing). One ``generate``
call per agent and stage. The one-stage default is the tree as it always was.

Returns (per agent, so per-agent rewards work too)::

    G_j = r_j + d_j * V(child_j),   V(node) = mean_j G_j over the node's joint actions

with V = 0 when the branch ended, and ``d_j`` = gamma into the next turn, 1 into a
later stage of the same turn (whose edges carry no reward: r_j = 0). A branch ends when the environment says
done, at ``num_turns``, when its reward reaches ``early_stop_reward``, or --
for all joint actions of a node together -- when the mean reward of the node's
joint actions is above ``early_stop_sibling_mean`` (the reference's rule).
Rewards here are already processed (``env.reward_scale``/``reward_shift``,
``comarl/envs/reward_processing.py``). Credit: agent i's sample k gets the mean of
G_j[i] over the joint actions j that contain it. In ``aligned`` mode that is
exactly one joint action (j = k); in ``cross`` mode it is the K^(N-1) joint
actions of the Cartesian product that use sample k of agent i. Each agent's
group at a node holds its samples there, so an agent of a later stage is
compared with the other samples that read the same earlier outputs.

Greedy baseline (MAReMax, ``greedy_baseline``): every node also starts a
greedy continuation (the node's agents decode greedily, then the later stages
and turns, until it ends); its discounted return is the node's
``AgentSamples.baseline``. All chains alive at a stage share one greedy
``generate`` call per agent.

LoRA agents on one shared base with identical generation settings share one
``generate`` call (``batch_adapters``, on by default), sampled and greedy.

Structured generation: a prompt that declares a schema (``comarl/core/schema.py``)
is decoded under it (unless the agent's ``structured`` is false), and the
samples record which completion tokens were forced (``AgentSamples.forced``).

Environment calls (``env.step_batch``): :func:`_greedy_stage` (greedy chains at a turn's last stage) and
:func:`_score_leaves` (every leaf of a turn).
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch

from ..core.schema import schema_of
from ..core.stages import Stage, StageGraph, leaves_and_completions, stage_graph, stage_prompt
from ..core.types import AgentSamples, Rollout, RolloutTree
from ..envs.base import AgentRewards, EnvState, Environment, EvalRecord, Transition
from ..generation.team import generate_for_agents

if TYPE_CHECKING:
    from ..core.seams import Lockstep, TeamGenerator


def joint_actions(mode: str, k: int, n: int) -> torch.Tensor:
    """Joint actions as sample indices: [J, N] with J = K (aligned) or K^N (cross)."""
    if mode == "aligned":
        return torch.arange(k).unsqueeze(1).repeat(1, n)
    if mode == "cross":
        return torch.tensor(list(itertools.product(range(k), repeat=n)), dtype=torch.long).reshape(-1, n)
    raise ValueError(f"joint_mode must be 'aligned' or 'cross', got {mode!r}")


def credit_returns(joint_returns: torch.Tensor, joints: torch.Tensor, k: int) -> torch.Tensor:
    """Credit each agent's samples with the mean return of the joint actions containing them.

    Args:
        joint_returns: [J, N] return of each joint action for each agent.
        joints: [J, N] sample index of agent i in joint action j.
        k: samples per agent.
    Returns:
        [N, K]: ``out[i, k] = mean_{j: joints[j, i] == k} joint_returns[j, i]``.
    """
    n = joints.shape[1]
    out = torch.zeros(n, k, dtype=joint_returns.dtype)
    count = torch.zeros(n, k, dtype=joint_returns.dtype)
    for i in range(n):
        out[i].index_add_(0, joints[:, i], joint_returns[:, i])
        count[i].index_add_(0, joints[:, i], torch.ones_like(joint_returns[:, i]))
    return out / count.clamp(min=1)


def discounted_returns(rewards: torch.Tensor, child_values: torch.Tensor, gamma: float) -> torch.Tensor:
    """G = r + gamma * V(child) elementwise; ``child_values`` is 0 where the branch ended. Shapes [J, N]."""
    return rewards + gamma * child_values


def samples_per_item(mode: str, k: int, n: int, turns: int) -> int:
    """Completions generated for one item when no branch ends early: N*K*sum_t b^t, b = K or K^N."""
    branching = k if mode == "aligned" else k ** n
    return n * k * sum(branching ** t for t in range(turns))


def check_tree_size(mode: str, k: int, n: int, turns: int, limit: int, graph: StageGraph | None = None) -> None:
    """Refuse, before any generation, a tree larger than ``limit`` completions per item (and a team graph that
    does not hold together or has more leaves per turn than its ``max_leaves``)."""
    if graph is not None and not graph.is_single:
        graph.validate(n, mode)
        graph.check_leaves(mode, k)
        total = leaves_and_completions(graph, mode, k, turns)[1]
    else:
        total = samples_per_item(mode, k, n, turns)
    if total > limit:
        raise ValueError(
            f"train.rollout.max_samples_per_item: joint_mode={mode}, num_generations={k}, {n} agents, num_turns={turns}"
            f"{f', {len(graph.stages)} stages' if graph is not None and not graph.is_single else ''} "
            f"generates {total} completions per item (> limit {limit}); lower num_generations/num_turns, use "
            f"aligned mode, or raise train.rollout.max_samples_per_item")


def reward_vector(reward, n: int, where: str) -> torch.Tensor:
    """Team float -> [N] copies; AgentRewards -> its values (length checked)."""
    if isinstance(reward, AgentRewards):
        if len(reward.values) != n:
            raise ValueError(f"{where}: AgentRewards has {len(reward.values)} values for {n} agents")
        return torch.tensor(reward.values, dtype=torch.float64)
    try:
        return torch.full((n,), float(reward), dtype=torch.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: reward must be a float or AgentRewards, got {type(reward).__name__}") from None


@dataclass
class _Node:
    """Where some agents act together: a turn's first stage, or a later stage on one branch of it."""

    item: int
    state: EnvState
    turn: int
    stage: int = 0  # the stage that opened the node
    actors: list = field(default_factory=list)  # agents acting here (branch agents, then aligned ones)
    context: dict = field(default_factory=dict)  # agent -> text: earlier stages' outputs on this branch
    context_prompts: dict = field(default_factory=dict)  # agent -> the prompt it wrote them from
    prompts: dict = field(default_factory=dict)  # agent -> [its prompt] (branch) or [J] (aligned, per joint)
    texts: dict = field(default_factory=dict)  # agent -> its samples' texts here
    # joints, rewards and returns are filled in as the tree grows (sampling, env step, back-up), before any read
    joints: torch.Tensor = None  # type: ignore[assignment]  # [J, N], -1 where an agent does not act
    rewards: torch.Tensor = None  # type: ignore[assignment]  # [J, N]
    children: list = field(default_factory=list)  # [J] of _Node | None
    stage_children: bool = False  # the children are later stages of this turn (no reward, no discount)
    returns: torch.Tensor = None  # type: ignore[assignment]  # [J, N]
    greedy_return: torch.Tensor | None = None  # [N], return of the greedy continuation from this node
    truncated: list = field(default_factory=list)  # [J] bool: ended only by num_turns (see _truncated)
    next_prompts: dict = field(default_factory=dict)  # j -> [N] next prompts of a truncated branch
    leaf_metrics: list = field(default_factory=list)  # [J] the environment's metrics of each joint action it scored

    def joint_texts(self, j: int) -> dict:
        """Every acting agent's text in joint action j."""
        return {i: self.texts[i][int(self.joints[j, i])] for i in self.actors}

    def joint_prompt(self, i: int, j: int) -> str:
        p = self.prompts[i]
        return p[j] if len(p) > 1 else p[0]

    def branch(self, j: int) -> tuple[dict, dict]:
        """(texts, prompts) of every agent on the branch through joint action j, this turn."""
        texts = {**self.context, **self.joint_texts(j)}
        prompts = {**self.context_prompts, **{i: self.joint_prompt(i, j) for i in self.actors}}
        return texts, prompts


@dataclass
class RolloutSettings:
    num_generations: int
    joint_mode: str = "aligned"
    num_turns: int = 1
    discount: float = 1.0
    early_stop_reward: float | None = None
    early_stop_sibling_mean: float | None = None
    greedy_baseline: bool = False
    generation_batch_size: int = 0
    num_examples: int = 2
    keep_records: bool = False
    batch_adapters: bool = True
    share_prefix: bool = True
    generator: "TeamGenerator | None" = None
    """The team generator (``seams.TeamGenerator``, ``generation/team.py``); None: Hugging Face ``generate``
    (``generate_for_agents``)."""
    successor_generations: int | None = None
    """Samples per node of a team graph's later branch stages (None: ``num_generations``); evaluation uses 1,
    so an item has ``num_generations`` leaves per turn as in aligned mode."""
    lockstep: "Lockstep | None" = None
    """Sharded models gathered one agent at a time (``train.hardware.fsdp_gather: agent``): a ``seams.Lockstep`` with
    ``scope(agents)`` (a context in which those agents' models are whole; every rank must enter the same
    scopes in the same order), ``any(flag)`` (whether ``flag`` is set on some rank) and ``max(n)``. None:
    the models are whole already (not sharded, or the whole team gathered around the rollout)."""

    @property
    def team_generator(self) -> "TeamGenerator":
        return self.generator if self.generator is not None else generate_for_agents

    @classmethod
    def from_train_config(cls, cfg, **changes) -> "RolloutSettings":
        """The rollout part of a ``TrainConfig``; ``changes`` override fields (evaluation: aligned, n samples)."""
        fields = dict(num_generations=cfg.rollout.num_generations, joint_mode=cfg.rollout.joint_mode,
                      num_turns=cfg.rollout.num_turns, discount=cfg.rollout.discount,
                      early_stop_reward=cfg.rollout.early_stop_reward,
                      early_stop_sibling_mean=cfg.rollout.early_stop_sibling_mean,
                      generation_batch_size=cfg.hardware.prompts_per_generate,
                      batch_adapters=cfg.hardware.batch_adapters, share_prefix=cfg.hardware.share_prefix)
        return cls(**{**fields, **changes})


def prompt_schemas(agent, prompts: Sequence[str]) -> list | None:
    """The schema each prompt declares, for an agent that follows schemas (None: no prompt has one, or the
    agent's ``structured`` is false)."""
    if not getattr(getattr(agent, "config", None), "structured", True):
        return None
    schemas = [schema_of(p) for p in prompts]
    return schemas if any(sc is not None for sc in schemas) else None


@dataclass
class _GreedyChain:
    """A greedy continuation from ``node``: greedy joint actions until the branch ends."""

    node: _Node
    state: EnvState
    ret: torch.Tensor | float = 0.0  # [N] discounted return so far
    scale: float = 1.0  # gamma^(turns since node)
    context: dict = field(default_factory=dict)  # agent -> greedy (or, before the node, sampled) text this turn


def _stage_actors(stage: Stage, context: dict) -> tuple[int, ...]:
    """The stage's agents that act on a branch with these earlier outputs (a route chooses; else all)."""
    return stage.route.chosen(stage.agents, context) if stage.route is not None else stage.agents


def _inputs(graph: StageGraph, agent: int, context: dict) -> dict:
    """What ``agent`` reads on a branch: the outputs of the earlier agents it reads that wrote there."""
    return {a: context[a] for a in graph.reads_of(agent) if a in context} if not graph.is_single else {}


def _greedy_stage(agents: Sequence, env: Environment, graph: StageGraph, si: int, chains: list[_GreedyChain],
                  turn: int, s: RolloutSettings) -> list[_GreedyChain]:
    """Advance every greedy chain by one stage (one greedy ``generate`` per agent for all of them).

    At the turn's last stage the chains' joint actions are scored: adds ``gamma^d * r`` to each chain's
    return; a chain that ends (done, turn limit, ``early_stop_reward``) writes its return to
    ``node.greedy_return``. Returns the chains still running.
    """
    n = len(agents)
    if not chains:  # a sharded rank whose greedy chains ended: it still joins the others' gathers
        _join_generation(agents, 1, s, greedy=True)
        return []
    stage = graph.stages[si]
    acting = [_stage_actors(stage, c.context) for c in chains]
    mine = [[c for c, act in zip(chains, acting) if i in act] for i in range(n)]
    texts_in = [[stage_prompt(env, graph, c.state, i, _inputs(graph, i, c.context)) for c in mine[i]]
                for i in range(n)]
    prompts = [agent.encode_prompts(texts_in[i]) if texts_in[i] else [] for i, agent in enumerate(agents)]
    schemas = [prompt_schemas(agent, texts_in[i]) for i, agent in enumerate(agents)]
    texts = [c.texts for c in s.team_generator(agents, prompts, 1, greedy=True, batch_size=s.generation_batch_size,
                                               batch_adapters=s.batch_adapters, schemas=schemas, scope=_scope(s))]
    for i in range(n):
        for c, t in zip(mine[i], texts[i]):
            c.context[i] = t
    if si < len(graph.stages) - 1:
        return chains
    joint = [tuple(c.context.get(i, "") for i in range(n)) for c in chains]
    trans = env.step_batch([c.state for c in chains], joint)
    if len(trans) != len(chains):
        raise ValueError(f"env.step_batch returned {len(trans)} transitions for {len(chains)} greedy joint actions")
    live = []
    for c, tr in zip(chains, trans):
        r = reward_vector(tr.reward, n, f"greedy turn {turn} of item {c.node.item}")
        c.ret = c.ret + c.scale * r
        c.context = {}
        stop = tr.done or tr.next_state is None or turn + 1 >= s.num_turns
        if not stop and s.early_stop_reward is not None and float(r.mean()) >= s.early_stop_reward:
            stop = True
        if stop:
            c.node.greedy_return = c.ret
        else:
            c.state, c.scale = _next_state(tr), c.scale * s.discount
            live.append(c)
    return live


def _next_state(tr: Transition) -> EnvState:
    """The state a branch goes on from; asked only of a branch that goes on (or is truncated), never of one
    whose env returned no next state."""
    if tr.next_state is None:
        raise RuntimeError("a branch without a next state was continued")  # unreachable: _ends/_truncated check
    return tr.next_state


def _truncated(tr, reward: torch.Tensor, turn: int, s: RolloutSettings) -> bool:
    """The branch ends at ``num_turns`` although the env would go on (no done, not ``early_stop_reward``)."""
    if tr.done or tr.next_state is None or turn + 1 < s.num_turns:
        return False
    return s.early_stop_reward is None or float(reward.mean()) < s.early_stop_reward


def _ends(tr, reward: torch.Tensor, turn: int, s: RolloutSettings) -> bool:
    """A branch ends when the env says so, at the last turn, or at ``early_stop_reward``."""
    if tr.done or tr.next_state is None or turn + 1 >= s.num_turns:
        return True
    return s.early_stop_reward is not None and float(reward.mean()) >= s.early_stop_reward


def siblings_end(rewards: torch.Tensor, threshold: float | None) -> bool:
    """The reference's early termination: all of a node's branches end when the mean
    reward of its joint actions (``rewards``: [J, N]) is strictly above ``threshold``.

    ``siblings_end(torch.tensor([[1.], [0.]]), 0.4) is True``; with threshold 0.5 it is False.
    """
    return threshold is not None and float(rewards.mean()) > threshold


@dataclass
class _Accumulator:
    """Per-agent sample lists (group-major) and what the logger wants, filled stage by stage."""

    n: int
    samples: list = field(default_factory=list)
    nodes: list = field(default_factory=list)  # per agent: the nodes of its groups, in order
    metric_sums: dict = field(default_factory=lambda: defaultdict(float))
    metric_counts: dict = field(default_factory=lambda: defaultdict(int))
    examples: list = field(default_factory=list)
    records: list = field(default_factory=list)
    num_completions: int = 0

    def __post_init__(self):
        self.samples = [dict(prompt_ids=[], completion_ids=[], truncated=[], texts=[], forced=[], structured=False,
                             engine_logprobs=[], from_engine=True) for _ in range(self.n)]
        self.nodes = [[] for _ in range(self.n)]

    def add_metric(self, key: str, value: float, count: int = 1) -> None:
        self.metric_sums[key] += value * count
        self.metric_counts[key] += count


def _store(store: dict, p_ids: list, comp, per_prompt: int) -> None:
    store["prompt_ids"] += [p for p in p_ids for _ in range(per_prompt)]
    store["completion_ids"] += comp.ids
    store["truncated"] += comp.truncated
    store["texts"] += comp.texts
    store["forced"] += comp.forced if comp.forced is not None else [[False] * len(c) for c in comp.ids]
    store["structured"] |= comp.forced is not None
    engine = getattr(comp, "logprobs", None)  # a vLLM engine's (EngineCompletions); HF gives none
    store["from_engine"] &= engine is not None
    store["engine_logprobs"] += engine if engine is not None else []


def _sample_stage(agents, env, graph: StageGraph, si: int, level: list[_Node], k: int, s: RolloutSettings,
                  acc: _Accumulator) -> None:
    """One batched generate per agent for every node of this stage; stores the samples and each node's texts
    and joint actions.

    A branch stage: each acting agent writes ``k`` samples from its one prompt at each node (the K share the
    prompt, so ``share_prefix`` encodes it once), and the node's joint actions are ``joint_actions`` over its
    agents. An aligned stage: each agent writes one sample per joint action of each node, from a prompt
    holding that joint action's texts; joint action j holds its sample j.
    """
    n, stage = len(agents), graph.stages[si]
    if stage.aligned:
        work = [[(node, j) for node in level for j in range(len(node.joints))] if i in stage.agents else []
                for i in range(n)]
        texts_in = [[stage_prompt(env, graph, node.state, i, _inputs(graph, i, node.branch(j)[0]))
                     for node, j in work[i]] for i in range(n)]
        for node in level:
            node.actors = node.actors + list(stage.agents)
        per_prompt = 1
    else:
        work = [[(node, 0) for node in level if i in node.actors] for i in range(n)]
        texts_in = [[stage_prompt(env, graph, node.state, i, _inputs(graph, i, node.context)) for node, _ in work[i]]
                    for i in range(n)]
        per_prompt = k
    prompt_ids = [agent.encode_prompts(texts_in[i]) if texts_in[i] else [] for i, agent in enumerate(agents)]
    schemas = [prompt_schemas(agent, texts_in[i]) for i, agent in enumerate(agents)]
    comps = s.team_generator(agents, prompt_ids, per_prompt, batch_size=s.generation_batch_size,
                             batch_adapters=s.batch_adapters, share_prefix=s.share_prefix, schemas=schemas,
                             scope=_scope(s))
    for i, (store, p_ids, comp) in enumerate(zip(acc.samples, prompt_ids, comps)):
        if not work[i]:
            continue
        acc.num_completions += len(comp.ids)
        _store(store, p_ids, comp, per_prompt)
        if stage.aligned:
            start = 0
            for node in level:
                width = len(node.joints)
                node.texts[i] = comp.texts[start:start + width]
                node.prompts[i] = texts_in[i][start:start + width]
                node.joints[:, i] = torch.arange(width)
                acc.nodes[i].append(node)
                start += width
        else:
            for w, (node, _) in enumerate(work[i]):
                node.texts[i] = comp.texts[w * k:(w + 1) * k]
                node.prompts[i] = [texts_in[i][w]]
                acc.nodes[i].append(node)
    if not stage.aligned:
        for node in level:
            branch = joint_actions(s.joint_mode, k, len(node.actors))
            if len(node.actors) == n:  # every agent (the one-stage tree): the joint actions as they are
                node.joints = branch
            else:
                node.joints = torch.full((len(branch), n), -1, dtype=torch.long)
                node.joints[:, node.actors] = branch


def _scope(s: RolloutSettings):
    return s.lockstep.scope if s.lockstep is not None else None


def _join_generation(agents: Sequence, k: int, s: RolloutSettings, greedy: bool = False) -> None:
    """Nothing to generate on this rank: enter the same per-agent scopes as the ranks that do
    (``s.lockstep``), so their gathers complete. A no-op without sharding."""
    if s.lockstep is not None:
        s.team_generator(agents, [[] for _ in agents], k, greedy=greedy, batch_adapters=s.batch_adapters,
                         scope=s.lockstep.scope)


def join_rollout(agents: Sequence, s: RolloutSettings, env: Environment | None = None) -> None:
    """What a sharded rank with no items runs while the others run :func:`collect_rollout` (``s.lockstep``):
    the same checks and per-agent gathers for every stage of every turn, generating nothing. ``env``: the
    environment whose team graph the others follow (None: one stage)."""
    graph = stage_graph(env, len(agents)) if env is not None else StageGraph.single(len(agents))
    lockstep = s.lockstep
    if lockstep is None:
        raise ValueError("join_rollout: only a sharded rank in lockstep (RolloutSettings.lockstep) joins a rollout")
    for _ in range(s.num_turns):
        for _stage in graph.stages:
            if not lockstep.any(False):
                return
            if s.greedy_baseline:
                _join_generation(agents, 1, s, greedy=True)
            _join_generation(agents, s.num_generations, s)


def _open_children(level: list[_Node], graph: StageGraph, si: int) -> list[_Node]:
    """The nodes of branch stage ``si``: one per joint action of every node of the stage before, holding that
    joint action's texts as its context and, for a routed stage, the agents its router chose."""
    stage, out = graph.stages[si], []
    for node in level:
        node.stage_children = True
        node.rewards = torch.zeros(len(node.joints), len(node.joints[0]), dtype=torch.float64)
        node.truncated = [False] * len(node.joints)
        node.children = []
        for j in range(len(node.joints)):
            texts, prompts = node.branch(j)
            child = _Node(node.item, node.state, node.turn, si, list(_stage_actors(stage, texts)), texts, prompts)
            node.children.append(child)
            out.append(child)
    return out


def _score_leaves(level: list[_Node], items, graph: StageGraph, env: Environment, turn: int, s: RolloutSettings,
                  acc: _Accumulator) -> list[_Node]:
    """Step every joint action of every node of a turn's last stage in one ``env.step_batch``; returns the
    first-stage nodes of the next turn."""
    n = len(level[0].joints[0]) if level else 0
    states, responses, prompts_seen = [], [], []
    for node in level:
        for j in range(len(node.joints)):
            texts, prompts = node.branch(j)
            states.append(node.state)
            responses.append(tuple(texts.get(i, "") for i in range(n)))
            prompts_seen.append([prompts.get(i, node.state.prompts[i]) for i in range(n)])
    transitions = env.step_batch(states, responses)
    if len(transitions) != len(states):
        raise ValueError(f"env.step_batch returned {len(transitions)} transitions for {len(states)} joint actions")
    next_level, start = [], 0
    records: dict[int, EvalRecord] = {}
    for node in level:
        J = len(node.joints)
        trs = transitions[start:start + J]
        node_responses, node_prompts = responses[start:start + J], prompts_seen[start:start + J]
        start += J
        rewards = [reward_vector(tr.reward, n, f"turn {turn} of item {node.item}") for tr in trs]
        node.rewards = torch.stack(rewards)
        stop_all = siblings_end(node.rewards, s.early_stop_sibling_mean)
        node.children = [None if stop_all or _ends(tr, r, turn, s) else
                         _Node(node.item, _next_state(tr), turn + 1, actors=list(graph.stages[0].agents))
                         for tr, r in zip(trs, rewards)]
        next_level += [c for c in node.children if c is not None]
        node.truncated = [not stop_all and _truncated(tr, r, turn, s) for tr, r in zip(trs, rewards)]
        node.next_prompts = {j: list(_next_state(tr).prompts) for j, tr in enumerate(trs) if node.truncated[j]}
        node.leaf_metrics = [tr.metrics for tr in trs]
        for tr in trs:
            for key, val in tr.metrics.items():
                acc.add_metric(f"env/{key}", float(val))
        acc.add_metric(f"reward/turn{turn}", float(node.rewards.mean()), J)
        if turn == 0:
            shown = sum(1 for e in acc.examples if e["item"] == node.item)
            if node.item < s.num_examples and shown < 2:
                acc.examples += [{"item": node.item, "prompts": list(node_prompts[j]),
                                  "responses": list(node_responses[j]), "reward": float(rewards[j].mean())}
                                 for j in range(min(2 - shown, J))]
            if s.keep_records:
                rec = records.setdefault(node.item, EvalRecord(item=items[node.item], responses=[], transitions=[]))
                rec.responses.extend(list(node_responses))
                rec.transitions.extend(list(trs))
    acc.records += list(records.values())
    return next_level


def _back_up_returns(groups: list[_Node], n: int, gamma: float) -> None:
    """G = r + d * V(child) bottom-up (children come after their parents in ``groups``); d = gamma into the
    next turn, 1 into a later stage of the same turn."""
    for node in reversed(groups):
        child_v = torch.stack([c.returns.mean(0) if c is not None else torch.zeros(n, dtype=torch.float64)
                               for c in node.children])
        node.returns = node.rewards + child_v if node.stage_children else \
            discounted_returns(node.rewards, child_v, gamma)


def collect_rollout(agents: Sequence, env: Environment, items: Sequence[dict], s: RolloutSettings) -> Rollout:
    """Generate the whole tree for ``items`` and return per-agent samples with credited returns.

    Groups (nodes) are listed stage by stage and turn by turn in generation order; agent i's groups are the
    nodes where it acts, so its samples of its g-th group are ``g*K .. g*K+K-1`` in its :class:`AgentSamples`
    (``Rollout.tree.groups`` maps nodes to those rows).
    """
    from ..envs.program import program_env_of

    program = program_env_of(env)
    if program is not None:  # a user's program drives the calls (comarl/rollout/program.py)
        from .program import collect_program_rollout

        return collect_program_rollout(agents, env, program, items, s)
    n, k = len(agents), s.num_generations
    if env.num_agents != n:
        raise ValueError(f"environment expects {env.num_agents} agents, {n} were given")
    graph = stage_graph(env, n)
    acc = _Accumulator(n)
    groups: list[_Node] = []
    first = list(graph.stages[0].agents)
    level = [_Node(b, env.reset(item), 0, actors=list(first)) for b, item in enumerate(items)]
    chains: list[_GreedyChain] = []  # greedy continuations still running (greedy_baseline only)
    lockstep = s.lockstep  # sharded, one agent gathered at a time: every rank runs the same stages (join_rollout)
    last = len(graph.stages) - 1
    done = False
    for turn in range(s.num_turns):
        for si, stage in enumerate(graph.stages):
            if s.greedy_baseline:
                if not stage.aligned:
                    chains += [_GreedyChain(node, node.state, context=dict(node.context)) for node in level]
                acc.num_completions += sum(len(_stage_actors(stage, c.context)) for c in chains)
            if lockstep is not None and not lockstep.any(bool(level) or bool(chains)):
                done = True
                break
            if s.greedy_baseline:
                chains = _greedy_stage(agents, env, graph, si, chains, turn, s) \
                    if chains or lockstep is not None else []
            if not level:
                _join_generation(agents, k, s)
                if chains or lockstep is not None:
                    continue
                done = True
                break
            k_stage = k if si == 0 or s.successor_generations is None else s.successor_generations
            _sample_stage(agents, env, graph, si, level, k_stage, s, acc)
            if not stage.aligned:
                groups += level
            if si == last:
                level = _score_leaves(level, items, graph, env, turn, s, acc)
            elif not graph.stages[si + 1].aligned:
                level = _open_children(level, graph, si + 1)
        if done:
            break
    _back_up_returns(groups, n, s.discount)
    out = [_agent_samples(i, acc, s.greedy_baseline) for i in range(n)]
    metrics = {key: acc.metric_sums[key] / acc.metric_counts[key] for key in acc.metric_sums}
    roots = [g for g in groups if g.turn == 0 and g.stage == 0]
    metrics["return/mean"] = float(torch.stack([r.returns.mean() for r in roots]).mean())
    metrics["tree/nodes"] = float(len(groups))
    for i, agent in enumerate(agents):
        lens = torch.tensor([len(c) for c in out[i].completion_ids], dtype=torch.float)
        metrics[f"{agent.name}/completion_len"] = float(lens.mean())
        metrics[f"{agent.name}/truncated"] = float(out[i].truncated.float().mean())
    counts = {key: float(c) for key, c in acc.metric_counts.items()}
    if not graph.is_single:
        _stage_metrics(graph, groups, agents, metrics, counts)
    return Rollout(agents=out, metrics=metrics, examples=acc.examples, num_completions=acc.num_completions,
                   records=acc.records, tree=_tree(groups, acc), metric_counts=counts)


def _agent_samples(i: int, acc: _Accumulator, greedy_baseline: bool) -> AgentSamples:
    """Agent i's samples over the nodes where it acts, with each sample's credited return."""
    st, nodes = acc.samples[i], acc.nodes[i]
    sizes = {len(node.texts[i]) for node in nodes}
    if len(sizes) > 1:
        raise ValueError(f"agent {i} has groups of {sorted(sizes)} samples: an aligned stage after a routed or "
                         f"cross stage must see the same number of joint actions at every node (use "
                         f"joint_mode: aligned, or make the stage a branch stage)")
    credited = [credit_returns(node.returns[:, [i]], node.joints[:, [i]], len(node.texts[i]))[0] for node in nodes]
    baseline = torch.stack([node.greedy_return[i] for node in nodes]).float() if greedy_baseline and nodes else None
    return AgentSamples(prompt_ids=st["prompt_ids"], completion_ids=st["completion_ids"],
                        truncated=torch.tensor(st["truncated"], dtype=torch.bool), texts=st["texts"],
                        returns=torch.stack(credited).float() if credited else torch.zeros(0, 0),
                        turns=torch.tensor([nd.turn for nd in nodes], dtype=torch.long),
                        baseline=baseline, forced=st["forced"] if st["structured"] else None,
                        engine_logprobs=st["engine_logprobs"] if st["from_engine"] and nodes else None)


def _stage_metrics(graph: StageGraph, groups: list[_Node], agents, metrics: dict, counts: dict) -> None:
    """Per stage: ``stage<s>/nodes``, ``stage<s>/spread`` (mean over the stage's nodes of two or more joint
    actions of max - min of their returns: how much that stage's choices move the return); per routed agent
    ``route/<name>`` (the share of the stage's branches it acts on); ``tree/leaves``."""
    for si, stage in enumerate(graph.stages):
        nodes = [g for g in groups if g.stage == si]
        if stage.aligned or not nodes:
            continue
        metrics[f"stage{si}/nodes"] = float(len(nodes))
        spread = [float((g.returns.mean(1).max() - g.returns.mean(1).min())) for g in nodes if len(g.joints) > 1]
        if spread:
            metrics[f"stage{si}/spread"] = sum(spread) / len(spread)
            counts[f"stage{si}/spread"] = float(len(spread))
        if stage.route is not None:
            for a in stage.agents:
                key = f"route/{agents[a].name}"
                metrics[key] = sum(a in g.actors for g in nodes) / len(nodes)
                counts[key] = float(len(nodes))
    metrics["tree/leaves"] = float(sum(len(g.joints) for g in groups if not g.stage_children))


def rollout_items(r: Rollout) -> int:
    """Items (root nodes) of a rollout."""
    if r.tree is not None:
        return len(r.tree.roots())
    return sum(int(t) == 0 for t in r.agents[0].turns) if r.agents else 0


def rollout_metrics(rollouts: Sequence[Rollout]) -> tuple[dict[str, float], dict[str, float]]:
    """The metrics of several rollouts (gradient-accumulation chunks, evaluation batches) as one dict, and the
    observation count behind each per-node metric (``reward/turn1``, ``env/*``): those are weighted by their
    observations, the others by each rollout's items (root nodes). Returns (means, counts); pass ``counts`` on
    as ``reduce_metrics(key_weights=...)`` so ranks combine the same way."""
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    counted: set[str] = set()
    for r in rollouts:
        items = float(rollout_items(r))
        counted |= set(r.metric_counts)
        for k, v in r.metrics.items():
            w = r.metric_counts.get(k, items)
            sums[k] = sums.get(k, 0.0) + float(v) * w
            weights[k] = weights.get(k, 0.0) + w
    means = {k: sums[k] / weights[k] if weights[k] > 0 else float("nan") for k in sums}
    return means, {k: weights[k] for k in counted}


def _tree(groups: list[_Node], acc: _Accumulator) -> RolloutTree:
    """The structure of the tree for critics, GAE and pairs (groups in sample order, padded to the widest node)."""
    index = {id(node): g for g, node in enumerate(groups)}
    G, n = len(groups), acc.n
    J = max((len(node.joints) for node in groups), default=0)
    joints = torch.full((G, J, n), -1, dtype=torch.long)
    rewards = torch.zeros(G, J, n, dtype=torch.float64)
    returns = torch.zeros(G, J, n, dtype=torch.float64)
    child = torch.full((G, J), -1, dtype=torch.long)
    truncated = torch.zeros(G, J, dtype=torch.bool)
    stage_child = torch.zeros(G, J, dtype=torch.bool)
    rows = torch.full((G, n), -1, dtype=torch.long)
    for i, nodes in enumerate(acc.nodes):
        for r, node in enumerate(nodes):
            rows[index[id(node)], i] = r
    joint_prompts, prompts = {}, []
    for g, node in enumerate(groups):
        w = len(node.joints)
        joints[g, :w] = node.joints
        rewards[g, :w] = node.rewards
        returns[g, :w] = node.returns
        child[g, :w] = torch.tensor([index[id(c)] if c is not None else -1 for c in node.children], dtype=torch.long)
        truncated[g, :w] = torch.tensor(node.truncated, dtype=torch.bool)
        stage_child[g, :w] = node.stage_children
        for i in node.actors:
            if len(node.prompts[i]) > 1:
                joint_prompts[(g, i)] = list(node.prompts[i])
        prompts.append([node.prompts[i][0] if i in node.prompts else
                        node.context_prompts.get(i, node.state.prompts[i]) for i in range(n)])
    return RolloutTree(joints=joints, rewards=rewards, child=child, truncated=truncated, prompts=prompts,
                       next_prompts={(g, j): p for g, node in enumerate(groups) for j, p in node.next_prompts.items()},
                       width=torch.tensor([len(node.joints) for node in groups], dtype=torch.long),
                       groups=rows, stage_child=stage_child,
                       turn=torch.tensor([node.turn for node in groups], dtype=torch.long),
                       stage=torch.tensor([node.stage for node in groups], dtype=torch.long),
                       joint_prompts=joint_prompts, context=[dict(node.context) for node in groups],
                       returns=returns, leaf_metrics={(g, j): dict(m) for g, node in enumerate(groups)
                                                      for j, m in enumerate(node.leaf_metrics) if m})
