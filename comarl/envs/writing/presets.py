"""The writing presets: how a task's ``env.args`` become prompts and a reward (``WritingTask.presets``).

- :class:`DefaultPreset` (``default``, alias ``comarl``): any team size the task has roles for, or one agent
  writing every part split at ``marker``; prompts, the single-agent prompt, the marker and every number of
  the level reward (``reward.py``) may be set in ``env.args``.
- :class:`PaperPreset` (``paper``): the MAGRPO paper's two roles and its reward, number for number
  (``paper_reward.py``); only the two prompts may be replaced.

A preset is any object with ``build(task, num_agents, args) -> WritingEnv`` (``env.WritingPreset``); to add one,
write it here and list it in the tasks' ``presets`` (``tldr.py``, ``arxiv.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping, Sequence

from . import paper_reward as PR
from . import reward as R
from .env import WritingEnv, WritingTask


@dataclass(frozen=True)
class DefaultPreset:
    """comarl's preset.

    Attributes:
        prompts: agent count -> one template per agent (each with ``{text}``), for every key of ``task.roles``.
        single_prompt: the one-agent template (``{text}``, ``{marker}``); it writes the parts of ``roles[2]``.
        reward: the reward configuration ``env.args.reward`` overrides.
    """

    prompts: Mapping[int, tuple[str, ...]]
    single_prompt: str
    reward: R.RewardConfig

    def build(self, task: WritingTask, num_agents: int, args: Mapping[str, Any]) -> WritingEnv:
        marker = args.get("marker", "---")
        if not isinstance(marker, str) or not marker.strip():
            raise ValueError(f"env.args.marker: expected a non-blank string, got {marker!r}")
        single = args.get("single_prompt") or self.single_prompt
        if not isinstance(single, str) or "{text}" not in single:
            raise ValueError("env.args.single_prompt: the template must contain {text}")
        prompts = args.get("prompts")
        if prompts is None:
            prompts = self.prompts[num_agents] if num_agents > 1 else ()
        elif num_agents == 1:
            raise ValueError("env.args.prompts: one agent uses env.args.single_prompt, not a prompt list")
        else:
            if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) != num_agents:
                raise ValueError(f"env.args.prompts: expected a list of {num_agents} templates (one per agent), "
                                 f"got {prompts!r}")
            for i, p in enumerate(prompts):
                if not isinstance(p, str) or "{text}" not in p:
                    raise ValueError(f"env.args.prompts[{i}]: the template for agent {i + 1} must be a string "
                                     "containing {text}")
        cfg = R.reward_config(args.get("reward"), self.reward)
        return WritingEnv(task, num_agents, prompts, single, marker, cfg, score=partial(R.score_parts, cfg=cfg),
                          max_reward=R.max_reward(cfg))


@dataclass(frozen=True)
class PaperPreset:
    """The MAGRPO paper's preset: exactly 2 agents, the reference's roles and reward.

    Attributes:
        prompts: the two templates (the reference's roles, in our words); ``env.args.prompts`` may replace them.
        reward: the task's numbers of the paper's reward (``paper_reward.TLDR``, ``ARXIV``).
    """

    prompts: tuple[str, str]
    reward: PR.PaperRewardConfig

    def build(self, task: WritingTask, num_agents: int, args: Mapping[str, Any]) -> WritingEnv:
        if num_agents != 2:
            raise ValueError(f"env.args.preset: paper: {task.name} in the paper has exactly 2 agents, got {num_agents} "
                             f"(number of agents = len(agents)); use preset default for other team sizes")
        for key in ("reward", "single_prompt", "marker"):
            if key in args:
                raise ValueError(f"env.args.{key}: not used by preset paper (its reward is the reference's, fixed); "
                                 f"use preset default to change the reward")
        prompts = args.get("prompts")
        if prompts is None:
            prompts = self.prompts
        elif isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) != 2 or not all(
                isinstance(p, str) and "{text}" in p for p in prompts):
            raise ValueError(f"env.args.prompts: expected 2 templates containing {{text}}, got {prompts!r}")
        return WritingEnv(task, 2, prompts, "", "---", self.reward, score=partial(PR.score_parts, cfg=self.reward),
                          max_reward=PR.MAX_REWARD)
