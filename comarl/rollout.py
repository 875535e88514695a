"""Rollouts: joint actions, the multi-turn tree, credited returns.

The tree is generated breadth-first: at each turn, every live node of every
item sends its prompts through one ``generate`` call per agent. Each joint
action of a node is scored by one ``env.step_batch`` call for the whole turn,
and (multi-turn) continues as a child node with its own environment state.

Returns (per agent, so per-agent rewards work too)::

    G_j = r_j + gamma * V(child_j),   V(node) = mean_j G_j over the node's joint actions

with V = 0 when the branch ended. A branch ends when the environment says
done, at ``num_turns``, when its reward reaches ``early_stop_reward``, or --
for all joint actions of a node together -- when the mean reward of the node's
joint actions is above ``early_stop_sibling_mean`` (the reference's rule).
Rewards here are already processed (``env.reward_scale``/``reward_shift``,
``comarl/envs/reward_processing.py``). Credit: agent i's sample k gets the mean of
G_j[i] over the joint actions j that contain it. In ``aligned`` mode that is
exactly one joint action (j = k); in ``cross`` mode it is the K^(N-1) joint
actions of the Cartesian product that use sample k of agent i.

Greedy baseline (MAReMax, ``greedy_baseline``): every node also starts a
greedy continuation (all agents decode greedily, then again from the greedy
branch's next state, until it ends); its discounted return is the node's
``AgentSamples.baseline``. All chains alive at a turn share one greedy
``generate`` call per agent.

LoRA agents on one shared base with identical generation settings share one
``generate`` call (``batch_adapters``, on by default), sampled and greedy.

Structured generation: a prompt that declares a schema (``comarl/schema.py``)
is decoded under it (unless the agent's ``structured`` is false), and the
samples record which completion tokens were forced (``AgentSamples.forced``).
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from .envs.base import AgentRewards, EnvState, Environment, EvalRecord
from .generation.team import generate_for_agents
from .schema import schema_of
from .types import AgentSamples, Rollout, RolloutTree


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


def check_tree_size(mode: str, k: int, n: int, turns: int, limit: int) -> None:
    """Refuse, before any generation, a tree larger than ``limit`` completions per item."""
    total = samples_per_item(mode, k, n, turns)
    if total > limit:
        raise ValueError(
            f"train.max_samples_per_item: joint_mode={mode}, num_generations={k}, {n} agents, num_turns={turns} "
            f"generates {total} completions per item (> limit {limit}); lower num_generations/num_turns, use "
            f"aligned mode, or raise train.max_samples_per_item")


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
    item: int
    state: EnvState
    turn: int
    joints: torch.Tensor | None = None  # [J, N]
    rewards: torch.Tensor | None = None  # [J, N]
    children: list = field(default_factory=list)  # [J] of _Node | None
    returns: torch.Tensor | None = None  # [J, N]
    greedy_return: torch.Tensor | None = None  # [N], return of the greedy continuation from this node
    truncated: list = field(default_factory=list)  # [J] bool: ended only by num_turns (see _truncated)
    next_prompts: dict = field(default_factory=dict)  # j -> [N] next prompts of a truncated branch


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
    generator: Any = None
    """The team generator (``generation/team.py`` contract); None: Hugging Face ``generate``
    (``generate_for_agents``)."""
    lockstep: Any = None
    """Sharded models gathered one agent at a time (``train.fsdp_gather: agent``): an object with
    ``scope(agents)`` (a context in which those agents' models are whole; every rank must enter the same
    scopes in the same order), ``any(flag)`` (whether ``flag`` is set on some rank) and ``max(n)``. None:
    the models are whole already (not sharded, or the whole team gathered around the rollout)."""

    @property
    def team_generator(self):
        return self.generator if self.generator is not None else generate_for_agents

    @classmethod
    def from_train_config(cls, cfg, **changes) -> "RolloutSettings":
        """The rollout part of a ``TrainConfig``; ``changes`` override fields (evaluation: aligned, n samples)."""
        fields = dict(num_generations=cfg.rollout.num_generations, joint_mode=cfg.rollout.joint_mode, num_turns=cfg.rollout.num_turns,
                      discount=cfg.rollout.discount, early_stop_reward=cfg.rollout.early_stop_reward,
                      early_stop_sibling_mean=cfg.rollout.early_stop_sibling_mean,
                      generation_batch_size=cfg.hardware.generation_batch_size, batch_adapters=cfg.hardware.batch_adapters,
                      share_prefix=cfg.hardware.share_prefix)
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


def _greedy_turn(agents: Sequence, env: Environment, chains: list[_GreedyChain], turn: int,
                 s: RolloutSettings) -> list[_GreedyChain]:
    """Advance every greedy chain by one turn (one greedy ``generate`` per agent for all of them).

    Adds ``gamma^d * r`` to each chain's return; a chain that ends (done, turn
    limit, ``early_stop_reward``) writes its return to ``node.greedy_return``.
    Returns the chains still running.
    """
    n = len(agents)
    if not chains:  # a sharded rank whose greedy chains ended: it still joins the others' gathers
        _join_generation(agents, 1, s, greedy=True)
        return []
    prompts = [agent.encode_prompts([c.state.prompts[i] for c in chains]) for i, agent in enumerate(agents)]
    schemas = [prompt_schemas(agent, [c.state.prompts[i] for c in chains]) for i, agent in enumerate(agents)]
    texts = [c.texts for c in s.team_generator(agents, prompts, 1, greedy=True, batch_size=s.generation_batch_size,
                                               batch_adapters=s.batch_adapters, schemas=schemas, scope=_scope(s))]
    joint = [tuple(texts[i][g] for i in range(n)) for g in range(len(chains))]
    trans = env.step_batch([c.state for c in chains], joint)
    if len(trans) != len(chains):
        raise ValueError(f"env.step_batch returned {len(trans)} transitions for {len(chains)} greedy joint actions")
    live = []
    for c, tr in zip(chains, trans):
        r = reward_vector(tr.reward, n, f"greedy turn {turn} of item {c.node.item}")
        c.ret = c.ret + c.scale * r
        stop = tr.done or tr.next_state is None or turn + 1 >= s.num_turns
        if not stop and s.early_stop_reward is not None and float(r.mean()) >= s.early_stop_reward:
            stop = True
        if stop:
            c.node.greedy_return = c.ret
        else:
            c.state, c.scale = tr.next_state, c.scale * s.discount
            live.append(c)
    return live


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
    """Per-agent sample lists (group-major) and what the logger wants, filled turn by turn."""

    n: int
    samples: list = field(default_factory=list)
    metric_sums: dict = field(default_factory=lambda: defaultdict(float))
    metric_counts: dict = field(default_factory=lambda: defaultdict(int))
    examples: list = field(default_factory=list)
    records: list = field(default_factory=list)
    num_completions: int = 0

    def __post_init__(self):
        self.samples = [dict(prompt_ids=[], completion_ids=[], truncated=[], texts=[], forced=[], structured=False)
                        for _ in range(self.n)]

    def add_metric(self, key: str, value: float, count: int = 1) -> None:
        self.metric_sums[key] += value * count
        self.metric_counts[key] += count


def _sample_level(agents, level: list[_Node], k: int, s: RolloutSettings, acc: _Accumulator) -> list[list[str]]:
    """One batched generate per agent for every node of this turn; stores the samples; returns texts per agent."""
    prompt_ids = [agent.encode_prompts([node.state.prompts[i] for node in level]) for i, agent in enumerate(agents)]
    schemas = [prompt_schemas(agent, [node.state.prompts[i] for node in level]) for i, agent in enumerate(agents)]
    comps = s.team_generator(agents, prompt_ids, k, batch_size=s.generation_batch_size,
                             batch_adapters=s.batch_adapters, share_prefix=s.share_prefix, schemas=schemas,
                             scope=_scope(s))
    for store, p_ids, comp in zip(acc.samples, prompt_ids, comps):
        acc.num_completions += len(comp.ids)
        store["prompt_ids"] += [p for p in p_ids for _ in range(k)]
        store["completion_ids"] += comp.ids
        store["truncated"] += comp.truncated
        store["texts"] += comp.texts
        store["forced"] += comp.forced if comp.forced is not None else [[False] * len(c) for c in comp.ids]
        store["structured"] |= comp.forced is not None
    return [c.texts for c in comps]


def _scope(s: RolloutSettings):
    return s.lockstep.scope if s.lockstep is not None else None


def _join_generation(agents: Sequence, k: int, s: RolloutSettings, greedy: bool = False) -> None:
    """Nothing to generate on this rank: enter the same per-agent scopes as the ranks that do
    (``s.lockstep``), so their gathers complete. A no-op without sharding."""
    if s.lockstep is not None:
        s.team_generator(agents, [[] for _ in agents], k, greedy=greedy, batch_adapters=s.batch_adapters,
                         scope=s.lockstep.scope)


def join_rollout(agents: Sequence, s: RolloutSettings) -> None:
    """What a sharded rank with no items runs while the others run :func:`collect_rollout` (``s.lockstep``):
    the same turn checks and per-agent gathers, generating nothing."""
    for _ in range(s.num_turns):
        if not s.lockstep.any(False):
            return
        if s.greedy_baseline:
            _join_generation(agents, 1, s, greedy=True)
        _join_generation(agents, s.num_generations, s)


def _score_level(level: list[_Node], items, texts: list[list[str]], joints: torch.Tensor, env: Environment,
                 turn: int, s: RolloutSettings, acc: _Accumulator) -> list[_Node]:
    """Step every joint action of every node in one ``env.step_batch``; returns the child nodes of the next turn."""
    n, k = len(texts), s.num_generations
    states, responses = [], []
    for g, node in enumerate(level):
        node.joints = joints
        for j in joints.tolist():
            states.append(node.state)
            responses.append(tuple(texts[i][g * k + j[i]] for i in range(n)))
    transitions = env.step_batch(states, responses)
    if len(transitions) != len(states):
        raise ValueError(f"env.step_batch returned {len(transitions)} transitions for {len(states)} joint actions")
    next_level, J = [], len(joints)
    for g, node in enumerate(level):
        trs = transitions[g * J:(g + 1) * J]
        rewards = [reward_vector(tr.reward, n, f"turn {turn} of item {node.item}") for tr in trs]
        node.rewards = torch.stack(rewards)
        stop_all = siblings_end(node.rewards, s.early_stop_sibling_mean)
        node.children = [None if stop_all or _ends(tr, r, turn, s) else _Node(node.item, tr.next_state, turn + 1)
                         for tr, r in zip(trs, rewards)]
        next_level += [c for c in node.children if c is not None]
        node.truncated = [not stop_all and _truncated(tr, r, turn, s) for tr, r in zip(trs, rewards)]
        node.next_prompts = {j: list(tr.next_state.prompts) for j, tr in enumerate(trs) if node.truncated[j]}
        for tr in trs:
            for key, val in tr.metrics.items():
                acc.add_metric(f"env/{key}", float(val))
        acc.add_metric(f"reward/turn{turn}", float(node.rewards.mean()), J)
        if turn == 0:
            if node.item < s.num_examples:
                acc.examples += [{"item": node.item, "prompts": list(node.state.prompts),
                                  "responses": list(responses[g * J + j]), "reward": float(rewards[j].mean())}
                                 for j in range(min(2, J))]
            if s.keep_records:
                acc.records.append(EvalRecord(item=items[node.item], responses=list(responses[g * J:(g + 1) * J]),
                                              transitions=list(trs)))
    return next_level


def _back_up_returns(groups: list[_Node], n: int, gamma: float) -> None:
    """G = r + gamma * V(child) bottom-up (children come after their parents in ``groups``)."""
    for node in reversed(groups):
        child_v = torch.stack([c.returns.mean(0) if c is not None else torch.zeros(n, dtype=torch.float64)
                               for c in node.children])
        node.returns = discounted_returns(node.rewards, child_v, gamma)


def collect_rollout(agents: Sequence, env: Environment, items: Sequence[dict], s: RolloutSettings) -> Rollout:
    """Generate the whole tree for ``items`` and return per-agent samples with credited returns.

    Groups (nodes) are listed turn by turn in generation order, so agent i's
    samples of group g are ``g*K .. g*K+K-1`` in its :class:`AgentSamples`.
    """
    n, k = len(agents), s.num_generations
    if env.num_agents != n:
        raise ValueError(f"environment expects {env.num_agents} agents, {n} were given")
    acc = _Accumulator(n)
    groups: list[_Node] = []
    level = [_Node(b, env.reset(item), 0) for b, item in enumerate(items)]
    joints = joint_actions(s.joint_mode, k, n)
    chains: list[_GreedyChain] = []  # greedy continuations still running (greedy_baseline only)
    lockstep = s.lockstep  # sharded, one agent gathered at a time: every rank runs the same turns (join_rollout)
    for turn in range(s.num_turns):
        if s.greedy_baseline:
            chains += [_GreedyChain(node, node.state) for node in level]
            acc.num_completions += n * len(chains)
        if lockstep is not None and not lockstep.any(bool(level) or bool(chains)):
            break
        if s.greedy_baseline:
            chains = _greedy_turn(agents, env, chains, turn, s) if chains or lockstep is not None else []
        if not level:
            _join_generation(agents, k, s)
            if chains or lockstep is not None:
                continue
            break
        texts = _sample_level(agents, level, k, s, acc)
        groups += level
        level = _score_level(level, items, texts, joints, env, turn, s, acc)
    _back_up_returns(groups, n, s.discount)
    out = []
    for i in range(n):
        st = acc.samples[i]
        credited = torch.stack([credit_returns(node.returns, node.joints, k)[i] for node in groups])
        baseline = torch.stack([node.greedy_return[i] for node in groups]).float() if s.greedy_baseline else None
        out.append(AgentSamples(prompt_ids=st["prompt_ids"], completion_ids=st["completion_ids"],
                                truncated=torch.tensor(st["truncated"], dtype=torch.bool), texts=st["texts"],
                                returns=credited.float(), turns=torch.tensor([nd.turn for nd in groups]),
                                baseline=baseline, forced=st["forced"] if st["structured"] else None))
    metrics = {key: acc.metric_sums[key] / acc.metric_counts[key] for key in acc.metric_sums}
    roots = [g for g in groups if g.turn == 0]
    metrics["return/mean"] = float(torch.stack([r.returns.mean() for r in roots]).mean())
    metrics["tree/nodes"] = float(len(groups))
    for i, agent in enumerate(agents):
        lens = torch.tensor([len(c) for c in out[i].completion_ids], dtype=torch.float)
        metrics[f"{agent.name}/completion_len"] = float(lens.mean())
        metrics[f"{agent.name}/truncated"] = float(out[i].truncated.float().mean())
    return Rollout(agents=out, metrics=metrics, examples=acc.examples, num_completions=acc.num_completions,
                   records=acc.records, tree=_tree(groups, joints),
                   metric_counts={key: float(c) for key, c in acc.metric_counts.items()})


def rollout_metrics(rollouts: Sequence[Rollout]) -> tuple[dict[str, float], dict[str, float]]:
    """The metrics of several rollouts (gradient-accumulation chunks, evaluation batches) as one dict, and the
    observation count behind each per-node metric (``reward/turn1``, ``env/*``): those are weighted by their
    observations, the others by each rollout's items (root nodes). Returns (means, counts); pass ``counts`` on
    as ``reduce_metrics(key_weights=...)`` so ranks combine the same way."""
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    counted: set[str] = set()
    for r in rollouts:
        items = float(sum(int(t) == 0 for t in r.agents[0].turns)) if r.agents else 0.0
        counted |= set(r.metric_counts)
        for k, v in r.metrics.items():
            w = r.metric_counts.get(k, items)
            sums[k] = sums.get(k, 0.0) + float(v) * w
            weights[k] = weights.get(k, 0.0) + w
    means = {k: sums[k] / weights[k] if weights[k] > 0 else float("nan") for k in sums}
    return means, {k: weights[k] for k in counted}


def _tree(groups: list[_Node], joints: torch.Tensor) -> RolloutTree:
    """The structure of the tree for critics and GAE (groups in sample order)."""
    index = {id(node): g for g, node in enumerate(groups)}
    child = torch.tensor([[index[id(c)] if c is not None else -1 for c in node.children] for node in groups],
                         dtype=torch.long).reshape(len(groups), len(joints))
    return RolloutTree(joints=joints, rewards=torch.stack([node.rewards for node in groups]) if groups else
                       torch.zeros(0, len(joints), joints.shape[1], dtype=torch.float64),
                       child=child, truncated=torch.tensor([node.truncated for node in groups],
                                                           dtype=torch.bool).reshape(len(groups), len(joints)),
                       prompts=[list(node.state.prompts) for node in groups],
                       next_prompts={(g, j): p for g, node in enumerate(groups) for j, p in node.next_prompts.items()})
