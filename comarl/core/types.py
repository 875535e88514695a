"""What flows from the rollout to the loss.

Notation: N agents, B items in a rollout batch, K samples per agent per node,
G groups (= tree nodes; one item at turn 1), S = G x K samples of one agent,
T completion tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AgentSamples:
    """Everything one agent generated in one rollout, group-major (sample s = g*K + k).

    Attributes:
        prompt_ids: [S] unpadded prompt ids (the agent's own tokenizer).
        completion_ids: [S] completion ids through the first EOS, no padding.
        truncated: [S] bool, no EOS before max_new_tokens.
        texts: [S] decoded completions.
        returns: [G, K] return credited to each sample (see rollout.credit_returns).
        turns: [G] 0-based turn of each group.
        baseline: [G] optional external baseline per group (greedy return for MAReMax), else None.

    Nothing downstream writes into it: the update reads it through an :class:`AgentView` and keeps the
    advantages it computes in its own output (``StepOutput.advantages``).
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    truncated: torch.Tensor
    texts: list[str]
    returns: torch.Tensor
    turns: torch.Tensor
    baseline: torch.Tensor | None = None
    forced: list[list[bool]] | None = None
    """[S] per completion token, True where a schema forced it (structured generation): out of the loss; else None."""
    engine_logprobs: list[list[float]] | None = None
    """[S] per completion token, the log-prob the generator sampled it with (a vLLM engine's, or the generation
    worker's weight copy under ``train.rollout.max_staleness``: the behaviour policy's), else None."""
    run_index: torch.Tensor | None = None
    """[S] program runs (``comarl/rollout/program.py``): the run ``g*K + k`` each sample (a call) belongs to;
    ``returns`` is then per run [G, K] and a run may hold any number of an agent's samples. None: sample s is
    run s (S = G*K), as in the rollout tree."""
    policy_version: torch.Tensor | None = None
    """[S] long, the policy version (training steps done) whose weights sampled each sample, when the generation
    worker sampled ahead (``train.rollout.max_staleness`` >= 1); None: the step's own weights (on-policy)."""

    @property
    def num_samples(self) -> int:
        return len(self.completion_ids)


@dataclass(frozen=True)
class AgentView:
    """What an advantage estimator reads of one agent's samples of one rollout chunk (``G`` nodes x ``K``
    samples, S = G*K, sample s = g*K + k); it writes nothing back.

    Attributes:
        returns: [G, K] credited returns (minus ``kl_beta`` x the sequence KL under ``kl_mode: reward``).
        turns: [G] 0-based turn of each node.
        lengths: [S] completion tokens of each sample in the loss (0: out of it, e.g. truncated under
            ``mask_truncated``); with structured generation the schema's forced tokens count as positions (they
            take an advantage like the others and weigh 0 in the loss).
        baseline: [G] the rollout's greedy return per node (MAReMax), else None.
        critic_advantages: [G, K] the critic's GAE advantages (IAC, MAAC), else None.
        run_index: [S] program runs: the run (``g*K + k``) of each sample, whose [G, K] estimate it takes
            (``advantages.token_advantages``); None: sample s is run s.
    """

    returns: torch.Tensor
    turns: torch.Tensor
    lengths: torch.Tensor
    baseline: torch.Tensor | None = None
    critic_advantages: torch.Tensor | None = None
    run_index: torch.Tensor | None = None

    @property
    def num_samples(self) -> int:
        return int(self.lengths.shape[0])


def joined_samples(samples: list[AgentSamples]) -> tuple[list, list, list | None]:
    """One agent's samples of several rollout chunks, concatenated: (prompt ids, completion ids, forced
    flags, or None when no chunk had a schema; a chunk without one counts as all sampled)."""
    prompts = [p for s in samples for p in s.prompt_ids]
    comps = [c for s in samples for c in s.completion_ids]
    forced = None if all(s.forced is None for s in samples) else \
        [f for s in samples for f in (s.forced or [[False] * len(c) for c in s.completion_ids])]
    return prompts, comps, forced


def joined_engine_logprobs(samples: list[AgentSamples]) -> list[list[float]] | None:
    """One agent's engine log-probs over several rollout chunks, concatenated ([S] lists); None unless every
    chunk has them."""
    if not samples:
        return None
    out: list[list[float]] = []
    for s in samples:
        if s.engine_logprobs is None:
            return None
        out.extend(s.engine_logprobs)
    return out


@dataclass
class Rollout:
    """One rollout batch: per-agent samples plus what the logger wants."""

    agents: list[AgentSamples]
    metrics: dict[str, float] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    """First-turn joint actions of the first items: prompts, responses, reward (for sample logs)."""
    num_completions: int = 0
    records: list = field(default_factory=list)
    """EvalRecords of the first turn (only when the rollout was asked to keep them)."""
    tree: "RolloutTree | None" = None
    """The tree's structure (what GAE and critics need)."""
    metric_counts: dict[str, float] = field(default_factory=dict)
    """How many observations each per-node metric of ``metrics`` averages (``reward/turn1``: nodes of turn 1),
    to combine rollouts and ranks by observations rather than by items."""


@dataclass
class RolloutTree:
    """Structure of one rollout tree, node-major in the same group order as :class:`AgentSamples`.

    A node is where some agents act together: every agent at every node in the one-stage default, the
    agents of one stage (and of the aligned stages that join it) in a team graph (``comarl/core/stages.py``).
    Node g has ``width[g]`` joint actions (K aligned, K^n cross over the n agents that branch there);
    tensors are padded to the widest node, J.

    Attributes:
        joints: [G, J, N] sample index (0..K-1, within agent i's group at node g) of agent i in joint action
            j; -1 where agent i does not act at node g and past ``width[g]``. A [J, N] tensor given to the
            constructor is every node's (the one-stage tree).
        rewards: [G, J, N] immediate reward of each joint action for each agent (team reward: N equal copies);
            0 on a joint action whose child is a later stage of the same turn.
        child: [G, J] group index of the node that joint action j leads to, -1 where the branch ended.
        truncated: [G, J] bool, the branch ended only because of ``num_turns`` (the env would go on): bootstrap.
        prompts: [G][N] each agent's prompt text at the node (an agent that does not act there: the
            environment's prompt of the turn; an aligned agent: its prompt of joint action 0, see
            ``joint_prompts``).
        next_prompts: (g, j) -> [N] next prompts of a truncated branch (what a critic bootstraps from).
        width: [G] joint actions of each node (default: J).
        groups: [G, N] the row of node g in agent i's :class:`AgentSamples`, -1 where i does not act at g
            (default: g).
        stage_child: [G, J] bool, the child is a later stage of the same turn: no reward yet, no discount
            (default: all False).
        turn: [G] 0-based turn of each node; stage: [G] the stage that opened it (default: 0).
        joint_prompts: (g, i) -> [J] agent i's prompt at each joint action of node g, for an agent whose
            prompt differs per joint action (an aligned stage reading that joint action's texts).
        context: [G] earlier agents' outputs on the node's branch in this turn (agent -> text), the prefix
            the node's agents read (default: empty).
        returns: [G, J, N] return of each joint action for each agent (``G_j`` of ``rollout.py``: its reward plus
            the discounted value of its child), for the sample log; None when not given.
        leaf_metrics: (g, j) -> the environment's metrics of the joint action it scored (``Transition.metrics``;
            only leaves that have some), for the sample log (``training/sample_records.py``).
    """

    joints: torch.Tensor
    rewards: torch.Tensor
    child: torch.Tensor
    truncated: torch.Tensor
    prompts: list[list[str]]
    next_prompts: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    # None at construction means the default, which __post_init__ fills in: after it these are never None, so
    # they are typed as what every reader sees (a dataclass cannot type an argument apart from its field).
    width: torch.Tensor = None  # type: ignore[assignment]
    groups: torch.Tensor = None  # type: ignore[assignment]
    stage_child: torch.Tensor = None  # type: ignore[assignment]
    turn: torch.Tensor = None  # type: ignore[assignment]
    stage: torch.Tensor = None  # type: ignore[assignment]
    joint_prompts: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    context: list[dict[int, str]] = None  # type: ignore[assignment]
    returns: torch.Tensor | None = None
    leaf_metrics: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)

    def __post_init__(self):
        g, j = self.child.shape
        if self.joints.dim() == 2:
            self.joints = self.joints.unsqueeze(0).expand(g, *self.joints.shape).clone()
        n = self.joints.shape[2]
        if self.width is None:
            self.width = torch.full((g,), j, dtype=torch.long)
        if self.groups is None:
            self.groups = torch.arange(g).unsqueeze(1).expand(g, n).clone()
        if self.stage_child is None:
            self.stage_child = torch.zeros(g, j, dtype=torch.bool)
        if self.turn is None:
            self.turn = torch.zeros(g, dtype=torch.long)
        if self.stage is None:
            self.stage = torch.zeros(g, dtype=torch.long)
        if self.context is None:
            self.context = [{} for _ in range(g)]

    @property
    def num_nodes(self) -> int:
        return int(self.child.shape[0])

    @property
    def staged(self) -> bool:
        """Some node is not every agent acting at full width (a team graph of several stages)."""
        return bool((self.groups < 0).any()) or bool(self.stage_child.any()) or bool(self.stage.any())

    def valid(self) -> torch.Tensor:
        """[G, J] bool: joint action j exists at node g (j < width[g])."""
        return torch.arange(self.child.shape[1]).unsqueeze(0) < self.width.unsqueeze(1)

    def acting(self) -> torch.Tensor:
        """[G, N] bool: agent i acts at node g."""
        return self.groups >= 0

    def roots(self) -> list[int]:
        """The nodes that start an item's tree (turn 0, first stage), in item order."""
        return [g for g in range(self.num_nodes) if int(self.turn[g]) == 0 and int(self.stage[g]) == 0]

    def agent_nodes(self, i: int) -> torch.Tensor:
        """The nodes where agent i acts, in the order of its groups ([G_i])."""
        nodes = torch.nonzero(self.groups[:, i] >= 0).flatten()
        return nodes[torch.argsort(self.groups[nodes, i])]

    def sample(self, g: int, j: int, i: int, k: int) -> int:
        """Agent i's sample index (in its :class:`AgentSamples`, K samples per group) in joint action j of
        node g, or -1 where agent i does not act there."""
        s = int(self.joints[g, j, i])
        return int(self.groups[g, i]) * k + s if s >= 0 else -1

    def prompt(self, g: int, j: int, i: int) -> str:
        """Agent i's prompt at joint action j of node g."""
        per_joint = self.joint_prompts.get((g, i))
        return per_joint[j] if per_joint is not None else self.prompts[g][i]

    def discounts(self, gamma: float) -> torch.Tensor:
        """[G, J] discount of each edge: 1 into a later stage of the same turn, ``gamma`` into the next turn."""
        return torch.where(self.stage_child, torch.ones((), dtype=torch.float64),
                           torch.full((), gamma, dtype=torch.float64))
