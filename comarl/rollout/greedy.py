"""MAReMax's greedy continuations (``greedy_baseline``): from every node, the agents decode greedily through the
later stages and turns until the branch ends; the discounted return is the node's baseline. All chains alive at a
stage share one greedy ``generate`` call per agent."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..core.stages import StageGraph, stage_prompt
from ..envs.base import EnvState, Environment
from .nodes import Node, join_generation, lockstep_scope, next_state, prompt_schemas, stage_actors, stage_inputs
from .returns import reward_vector
from .settings import RolloutSettings


@dataclass
class GreedyChain:
    """A greedy continuation from ``node``: greedy joint actions until the branch ends."""

    node: Node
    state: EnvState
    ret: torch.Tensor | float = 0.0  # [N] discounted return so far
    scale: float = 1.0  # gamma^(turns since node)
    context: dict = field(default_factory=dict)  # agent -> greedy (or, before the node, sampled) text this turn


def greedy_stage(agents: Sequence, env: Environment, graph: StageGraph, si: int, chains: list[GreedyChain],
                  turn: int, s: RolloutSettings) -> list[GreedyChain]:
    """Advance every greedy chain by one stage (one greedy ``generate`` per agent for all of them).

    At the turn's last stage the chains' joint actions are scored: adds ``gamma^d * r`` to each chain's
    return; a chain that ends (done, turn limit, ``early_stop_reward``) writes its return to
    ``node.greedy_return``. Returns the chains still running.
    """
    n = len(agents)
    if not chains:  # a sharded rank whose greedy chains ended: it still joins the others' gathers
        join_generation(agents, 1, s, greedy=True)
        return []
    stage = graph.stages[si]
    acting = [stage_actors(stage, c.context) for c in chains]
    mine = [[c for c, act in zip(chains, acting) if i in act] for i in range(n)]
    texts_in = [[stage_prompt(env, graph, c.state, i, stage_inputs(graph, i, c.context)) for c in mine[i]]
                for i in range(n)]
    prompts = [agent.encode_prompts(texts_in[i]) if texts_in[i] else [] for i, agent in enumerate(agents)]
    schemas = [prompt_schemas(agent, texts_in[i]) for i, agent in enumerate(agents)]
    comps = s.team_generator(agents, prompts, 1, greedy=True, batch_size=s.prompts_per_generate,
                             batch_adapters=s.batch_adapters, schemas=schemas, scope=lockstep_scope(s))
    texts = [c.texts for c in comps]
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
            c.state, c.scale = next_state(tr), c.scale * s.discount
            live.append(c)
    return live

