"""Sampling one stage of a turn for every node of the tree's level (one batched ``generate`` per agent), opening
the nodes of a later branch stage, and what a sharded rank with no items runs meanwhile (``join_rollout``)."""
from __future__ import annotations

from typing import Sequence

import torch

from ..core.stages import StageGraph, stage_graph, stage_prompt
from ..envs.base import Environment
from .nodes import Accumulator, Node, join_generation, lockstep_scope, prompt_schemas, stage_actors, stage_inputs, \
    store_samples
from .returns import joint_actions
from .settings import RolloutSettings


def sample_stage(agents, env, graph: StageGraph, si: int, level: list[Node], k: int, s: RolloutSettings,
                  acc: Accumulator) -> None:
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
        texts_in = [[stage_prompt(env, graph, node.state, i, stage_inputs(graph, i, node.branch(j)[0]))
                     for node, j in work[i]] for i in range(n)]
        for node in level:
            node.actors = node.actors + list(stage.agents)
        per_prompt = 1
    else:
        work = [[(node, 0) for node in level if i in node.actors] for i in range(n)]
        texts_in = [[stage_prompt(env, graph, node.state, i, stage_inputs(graph, i, node.context))
                     for node, _ in work[i]] for i in range(n)]
        per_prompt = k
    prompt_ids = [agent.encode_prompts(texts_in[i]) if texts_in[i] else [] for i, agent in enumerate(agents)]
    schemas = [prompt_schemas(agent, texts_in[i]) for i, agent in enumerate(agents)]
    comps = s.team_generator(agents, prompt_ids, per_prompt, batch_size=s.prompts_per_generate,
                             batch_adapters=s.batch_adapters, share_prefix=s.share_prefix, schemas=schemas,
                             scope=lockstep_scope(s))
    for i, (store, p_ids, comp) in enumerate(zip(acc.samples, prompt_ids, comps)):
        if not work[i]:
            continue
        acc.num_completions += len(comp.ids)
        store_samples(store, p_ids, comp, per_prompt)
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


def open_children(level: list[Node], graph: StageGraph, si: int) -> list[Node]:
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
            child = Node(node.item, node.state, node.turn, si, list(stage_actors(stage, texts)), texts, prompts)
            node.children.append(child)
            out.append(child)
    return out


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
                join_generation(agents, 1, s, greedy=True)
            join_generation(agents, s.num_generations, s)

