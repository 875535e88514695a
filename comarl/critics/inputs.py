"""Which texts a critic reads, and which reward it learns: per agent (IAC) or one joint view (MAAC).

A critic has C *columns*: one value function per agent (independent), or one
central value function (C = 1). For each column, ``units`` lists the critic's
inputs for a rollout tree and maps every joint action (g, j) of the tree to
the input that values it:

    V(h):   one input per node (IAC: the agent's prompt; MAAC: the joint prompts)
    Q(h,a): IAC: one per sample (the agent's prompt + its response);
            MAAC: one per joint action (the joint prompts + every agent's response)

Team graphs (``comarl/core/stages.py``): an agent's prompt at a later stage holds the earlier outputs it reads,
so its critic reads them; the central critic reads every agent's prompt on the branch and, as responses,
the outputs written before the node (the prefix). An agent whose prompt differs per joint action (an
aligned stage) is valued per joint action. ``index`` is -1 where the column values nothing: a node where an
independent critic's agent does not act, and the joint actions past a node's width.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.types import RolloutTree
from .joint_input import JointInput


@dataclass
class Units:
    """A column's critic inputs for one tree: ``prompts[u]`` (+ ``responses[u]`` for Q); ``index [G, J]`` -> u
    (-1: not valued by this column)."""

    prompts: list[str]
    responses: list[str] | None
    index: torch.Tensor


def _staged_units(tree: RolloutTree, nodes, per_joint, text) -> Units:
    """Units over ``nodes``: one per node, or one per joint action where ``per_joint(g)``; ``text(g, j)`` is
    (prompt, response or None) of joint action j's input."""
    index = torch.full(tuple(tree.child.shape), -1, dtype=torch.long)
    prompts, responses = [], []
    for g in nodes:
        w = int(tree.width[g])
        for j in (range(w) if per_joint(g) else [0]):
            p, r = text(g, j)
            prompts.append(p)
            responses.append(r)
            if per_joint(g):
                index[g, j] = len(prompts) - 1
            else:
                index[g, :w] = len(prompts) - 1
    return Units(prompts, responses if any(r is not None for r in responses) else None, index)


class AgentInputs:
    """Independent critics: column i reads agent i's own prompt (and response) and learns agent i's reward
    (``AgentRewards`` give each agent its own)."""

    central = False

    def __init__(self, critic_type: str, num_agents: int):
        self.critic_type, self.columns = critic_type, num_agents

    def column(self, agent: int) -> int:
        return agent

    def rewards(self, tree: RolloutTree) -> torch.Tensor:
        """[G, J, N]."""
        return tree.rewards

    def units(self, tree: RolloutTree, texts: list[list[str]], c: int, ks: list[int]) -> Units:
        """``ks[i]``: agent i's samples per group."""
        g_count, j_count = tree.child.shape
        k = ks[c]
        if tree.staged:
            nodes = tree.agent_nodes(c).tolist()
            if self.critic_type == "v":
                return _staged_units(tree, nodes, lambda g: (g, c) in tree.joint_prompts,
                                     lambda g, j: (tree.prompt(g, j, c), None))
            return _staged_units(tree, nodes, lambda g: True,
                                 lambda g, j: (tree.prompt(g, j, c), texts[c][tree.sample(g, j, c, k)]))
        if self.critic_type == "v":
            index = torch.arange(g_count).unsqueeze(1).expand(g_count, j_count)
            return Units([p[c] for p in tree.prompts], None, index)
        index = torch.arange(g_count).unsqueeze(1) * k + tree.joints[:, :, c]
        return Units([p[c] for p in tree.prompts for _ in range(k)], list(texts[c]), index)

    def bootstrap(self, next_prompts: list[str], c: int) -> str:
        return next_prompts[c]


class JointInputs:
    """One central critic: it reads every agent's prompt (and, for Q, response) written by ``joint_input``,
    and learns the team reward (the mean over agents of an ``AgentRewards``)."""

    central = True
    columns = 1

    def __init__(self, critic_type: str, joint_input: JointInput):
        self.critic_type, self.joint_input = critic_type, joint_input

    def column(self, agent: int) -> int:
        return 0

    def rewards(self, tree: RolloutTree) -> torch.Tensor:
        """[G, J, 1]."""
        return tree.rewards.mean(-1, keepdim=True)

    def units(self, tree: RolloutTree, texts: list[list[str]], c: int, ks: list[int]) -> Units:
        """``ks[i]``: agent i's samples per group."""
        g_count, j_count = tree.child.shape
        if tree.staged:
            return self._staged(tree, texts, ks)
        if self.critic_type == "v":
            index = torch.arange(g_count).unsqueeze(1).expand(g_count, j_count)
            return Units([self.joint_input(p, None) for p in tree.prompts], None, index)
        k = ks[0]
        joints = tree.joints[0].tolist()
        prompts = [self.joint_input(tree.prompts[g], [texts[i][g * k + s] for i, s in enumerate(joint)])
                   for g in range(g_count) for joint in joints]
        return Units(prompts, None, torch.arange(g_count * j_count).reshape(g_count, j_count))

    def _staged(self, tree: RolloutTree, texts: list[list[str]], ks: list[int]) -> Units:
        """Every node of a team graph's tree: the prompts on the branch, and as responses the outputs written
        before the node (V) or also the node's joint action (Q)."""
        n = tree.joints.shape[2]

        def text(g: int, j: int):
            prompts = [tree.prompt(g, j, i) for i in range(n)]
            said = dict(tree.context[g])
            if self.critic_type == "q" or any((g, i) in tree.joint_prompts for i in range(n)):
                # the joint action's own texts: Q reads them; V reads an aligned stage's inputs per joint action
                mine = {i: texts[i][tree.sample(g, j, i, ks[i])] for i in range(n) if tree.joints[g, j, i] >= 0}
                if self.critic_type == "q":
                    said.update(mine)
                else:
                    said.update({i: t for i, t in mine.items() if (g, i) not in tree.joint_prompts})
            responses = [said.get(i, "") for i in range(n)] if said else None
            return self.joint_input(prompts, responses), None

        def per_joint(g):
            return self.critic_type == "q" or any((g, i) in tree.joint_prompts for i in range(n))

        return _staged_units(tree, range(tree.num_nodes), per_joint, text)

    def bootstrap(self, next_prompts: list[str], c: int) -> str:
        return self.joint_input(next_prompts, None)
