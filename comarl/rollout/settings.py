"""What a rollout needs to know besides the agents and the environment (``RolloutSettings``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..generation.team import generate_for_agents

if TYPE_CHECKING:
    from ..core.seams import Lockstep, TeamGenerator


@dataclass
class RolloutSettings:
    num_generations: int
    joint_mode: str = "aligned"
    num_turns: int = 1
    discount: float = 1.0
    early_stop_reward: float | None = None
    early_stop_sibling_mean: float | None = None
    greedy_baseline: bool = False
    prompts_per_generate: int = 0
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
                      prompts_per_generate=cfg.hardware.prompts_per_generate,
                      batch_adapters=cfg.hardware.batch_adapters, share_prefix=cfg.hardware.share_prefix)
        return cls(**{**fields, **changes})

