"""What a finished tree hands on: each agent's samples with credited returns (``AgentSamples``), the structure for
critics, GAE and pairs (``RolloutTree``), and the rollout's metrics (per stage and routed agent; combined over
several rollouts)."""
from __future__ import annotations

from typing import Sequence

import torch

from ..core.stages import StageGraph
from ..core.types import AgentSamples, Rollout, RolloutTree
from .nodes import Accumulator, Node
from .returns import credit_returns


def agent_samples(i: int, acc: Accumulator, greedy_baseline: bool) -> AgentSamples:
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


def stage_metrics(graph: StageGraph, groups: list[Node], agents, metrics: dict, counts: dict) -> None:
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


def tree_record(groups: list[Node], acc: Accumulator) -> RolloutTree:
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

