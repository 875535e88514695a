"""The rollout tree: ``collect_rollout`` grows it turn by turn and stage by stage, scores its leaves and backs
up the returns.

The modules beside this one hold its parts: ``returns.py`` (joint actions, credit, sizes), ``settings.py``,
``nodes.py`` (nodes, the sample store, when a branch ends), ``sampling.py`` (one stage of sampling),
``greedy.py`` (MAReMax's greedy chains) and ``record.py`` (samples, the ``RolloutTree`` and metrics).

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

Environment calls (``env.step_batch``): ``greedy.greedy_stage`` (greedy chains at a turn's last stage) and
:func:`score_leaves` (every leaf of a turn).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..core.stages import StageGraph, stage_graph
from ..core.types import Rollout
from ..envs.base import EvalRecord, Environment
from .greedy import GreedyChain, greedy_stage
from .nodes import Accumulator, Node, branch_ends, join_generation, next_state, stage_actors, truncated_at_limit
from .record import agent_samples, stage_metrics, tree_record
from .returns import discounted_returns, reward_vector, siblings_end
from .sampling import open_children, sample_stage
from .settings import RolloutSettings


def score_leaves(level: list[Node], items, graph: StageGraph, env: Environment, turn: int, s: RolloutSettings,
                  acc: Accumulator) -> list[Node]:
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
        node.children = [None if stop_all or branch_ends(tr, r, turn, s) else
                         Node(node.item, next_state(tr), turn + 1, actors=list(graph.stages[0].agents))
                         for tr, r in zip(trs, rewards)]
        next_level += [c for c in node.children if c is not None]
        node.truncated = [not stop_all and truncated_at_limit(tr, r, turn, s) for tr, r in zip(trs, rewards)]
        node.next_prompts = {j: list(next_state(tr).prompts) for j, tr in enumerate(trs) if node.truncated[j]}
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


def back_up_returns(groups: list[Node], n: int, gamma: float) -> None:
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
    acc = Accumulator(n)
    groups: list[Node] = []
    first = list(graph.stages[0].agents)
    level = [Node(b, env.reset(item), 0, actors=list(first)) for b, item in enumerate(items)]
    chains: list[GreedyChain] = []  # greedy continuations still running (greedy_baseline only)
    lockstep = s.lockstep  # sharded, one agent gathered at a time: every rank runs the same stages (join_rollout)
    last = len(graph.stages) - 1
    done = False
    for turn in range(s.num_turns):
        for si, stage in enumerate(graph.stages):
            if s.greedy_baseline:
                if not stage.aligned:
                    chains += [GreedyChain(node, node.state, context=dict(node.context)) for node in level]
                acc.num_completions += sum(len(stage_actors(stage, c.context)) for c in chains)
            if lockstep is not None and not lockstep.any(bool(level) or bool(chains)):
                done = True
                break
            if s.greedy_baseline:
                chains = greedy_stage(agents, env, graph, si, chains, turn, s) \
                    if chains or lockstep is not None else []
            if not level:
                join_generation(agents, k, s)
                if chains or lockstep is not None:
                    continue
                done = True
                break
            k_stage = k if si == 0 or s.successor_generations is None else s.successor_generations
            sample_stage(agents, env, graph, si, level, k_stage, s, acc)
            if not stage.aligned:
                groups += level
            if si == last:
                level = score_leaves(level, items, graph, env, turn, s, acc)
            elif not graph.stages[si + 1].aligned:
                level = open_children(level, graph, si + 1)
        if done:
            break
    back_up_returns(groups, n, s.discount)
    out = [agent_samples(i, acc, s.greedy_baseline) for i in range(n)]
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
        stage_metrics(graph, groups, agents, metrics, counts)
    return Rollout(agents=out, metrics=metrics, examples=acc.examples, num_completions=acc.num_completions,
                   records=acc.records, tree=tree_record(groups, acc), metric_counts=counts)

