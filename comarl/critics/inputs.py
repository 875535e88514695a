"""Which texts a critic reads, and which reward it learns: per agent (IAC) or one joint view (MAAC).

A critic has C *columns*: one value function per agent (independent), or one
central value function (C = 1). For each column, ``units`` lists the critic's
inputs for a rollout tree and maps every joint action (g, j) of the tree to
the input that values it:

    V(h):   one input per node (IAC: the agent's prompt; MAAC: the joint prompts)
    Q(h,a): IAC: one per sample (the agent's prompt + its response);
            MAAC: one per joint action (the joint prompts + every agent's response)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..types import RolloutTree
from .joint_input import JointInput


@dataclass
class Units:
    """A column's critic inputs for one tree: ``prompts[u]`` (+ ``responses[u]`` for Q); ``index [G, J]`` -> u."""

    prompts: list[str]
    responses: list[str] | None
    index: torch.Tensor


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

    def units(self, tree: RolloutTree, texts: list[list[str]], c: int, k: int) -> Units:
        g_count, j_count = tree.child.shape
        if self.critic_type == "v":
            index = torch.arange(g_count).unsqueeze(1).expand(g_count, j_count)
            return Units([p[c] for p in tree.prompts], None, index)
        index = torch.arange(g_count).unsqueeze(1) * k + tree.joints[:, c].unsqueeze(0)
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

    def units(self, tree: RolloutTree, texts: list[list[str]], c: int, k: int) -> Units:
        g_count, j_count = tree.child.shape
        if self.critic_type == "v":
            index = torch.arange(g_count).unsqueeze(1).expand(g_count, j_count)
            return Units([self.joint_input(p, None) for p in tree.prompts], None, index)
        joints = tree.joints.tolist()
        prompts = [self.joint_input(tree.prompts[g], [texts[i][g * k + s] for i, s in enumerate(joint)])
                   for g in range(g_count) for joint in joints]
        return Units(prompts, None, torch.arange(g_count * j_count).reshape(g_count, j_count))

    def bootstrap(self, next_prompts: list[str], c: int) -> str:
        return self.joint_input(next_prompts, None)
