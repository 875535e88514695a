"""An algorithm is a record of the components that differ; the loop is shared.

A record names:

- ``advantage(view, loss) -> [G, K] or [S, T]``: the estimator that turns one agent's credited returns (an
  ``AgentView``: returns, lengths, baselines, the critic's advantages; read only) into advantages, per sample
  (``[G, K]``, the shape of the returns: broadcast over each sample's tokens) or per token (``[S, T]``);
  ``loss`` is ``train.loss`` (policy-gradient algorithms; ``min_generations`` is the smallest K it is
  defined for);
- ``greedy_baseline``: the rollout also decodes one greedy joint response per node (MAReMax);
- ``critic``: the critic the run builds, ``independent`` (IAC) or ``central`` (MAAC), or None;
- ``reference(config)``: whether the update needs each agent's frozen reference policy (DPO does, unless
  reference-free; any algorithm does when ``train.loss.kl_beta`` > 0);
- ``update(parts) -> Update``: what each step does (``comarl/updates/``; default: the policy gradient with
  this record's estimator and critic);
- ``source(parts) -> StepSource``: where each step's batch comes from (``comarl/sources.py``; default: prompt
  batches; the iterative preference algorithms name their rounds, ``madpo_offline`` a pairs file);
- ``steps_with(config) -> Algorithm``: for a record whose steps are another algorithm's (``marlhf_iter``
  runs ``train.preference.iterative.rl_algorithm`` on a reward model's score): that algorithm supplies the estimator,
  critic and update;
- ``check(config, agents)``: every check that can be made from the config (and the agents' configs), run
  when the config is loaded, before any model is built.

``Parts`` is what the factories receive. No string in the loop says which family runs.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..core.config_io import ConfigError
from ..objective.advantages import scale_by_group_std_any

if TYPE_CHECKING:
    from ..config import TrainConfig
    from ..core.seams import Lockstep, StepSource, TeamGenerator, Update


@dataclass
class Parts:
    """What an update or a source is built from.

    Attributes:
        config: the run's ``TrainConfig``.
        lockstep: the ranks' lockstep while sharded agents are gathered one at a time
            (``train.hardware.fsdp_gather: agent``), else None.
        env: the environment.
        items: the training items.
        algorithm: the record whose estimator, critic and greedy baseline the steps use (for ``marlhf_iter``
            its ``rl_algorithm``'s).
        critic: the critic built for ``algorithm.critic``, or None.
        generator: the team generator the rollouts use (``generation/team.py``); None: Hugging Face's.
    """

    config: "TrainConfig"
    lockstep: "Lockstep | None"
    env: Any
    items: list[dict]
    algorithm: "Algorithm"
    critic: Any = None
    generator: "TeamGenerator | None" = None

    def rollout_settings(self, **changes):
        """The rollout settings of the steps (the team's lockstep; the algorithm's greedy baseline)."""
        from ..rollout.tree import RolloutSettings

        return RolloutSettings.from_train_config(self.config, **{
            "greedy_baseline": self.algorithm.greedy_baseline, "lockstep": self.lockstep,
            "generator": self.generator, **changes})

    def prompt_batches(self):
        """Global batches of the training items (``sources.PromptBatches``)."""
        from ..compute import distributed as dist
        from ..sources import PromptBatches

        cfg = self.config
        return PromptBatches(self.items, self.env, cfg.run.batch_size * dist.world_size(), cfg.run.seed,
                             cfg.run.shuffle, cfg.run.epochs, cfg.run.max_steps)


def policy_gradient(parts: Parts) -> "Update":
    """The policy-gradient update with the algorithm's estimator (and critic, when it has one)."""
    from ..updates import PolicyGradient

    advantage = parts.algorithm.advantage
    if advantage is None:
        raise ValueError(f"algorithm {parts.algorithm.name}: a policy-gradient update needs an advantage estimator")
    cfg = parts.config
    return PolicyGradient(cfg.loss, cfg.hardware, cfg.run.gradient_accumulation_steps, advantage,
                          parts.rollout_settings(), parts.critic, entropy_coef=cfg.loss.entropy_coef,
                          algorithm=parts.algorithm.name)


def prompt_batches(parts: Parts) -> "StepSource":
    return parts.prompt_batches()


def no_check(config, agents) -> None:
    """Nothing beyond the config's own validation."""


def no_reference(config) -> bool:
    """The update itself needs no reference (the KL term adds one when ``train.loss.kl_beta`` > 0)."""
    return False


@dataclass(frozen=True)
class Algorithm:
    name: str
    advantage: Callable[..., torch.Tensor] | None = None
    min_generations: int = 1
    greedy_baseline: bool = False
    summary: str = ""
    critic: str | None = None
    update: Callable[[Parts], "Update"] = policy_gradient
    source: Callable[[Parts], "StepSource"] = prompt_batches
    steps_with: Callable[[Any], "Algorithm"] | None = None
    check: Callable[[Any, list], None] = field(default=no_check)
    reference: Callable[[Any], bool] = field(default=no_reference)

    def step_algorithm(self, config) -> "Algorithm":
        """The record whose estimator, critic and update run each step (itself, or ``steps_with``'s)."""
        return self.steps_with(config) if self.steps_with is not None else self

    def generations_needed(self, config) -> int:
        """The smallest K (``train.rollout.num_generations``) this algorithm and the one its steps run accept."""
        return max(self.min_generations, self.step_algorithm(config).min_generations)

    def needs_reference(self, config) -> bool:
        """Whether the run builds frozen references: the KL term, or an update that learns against one."""
        return config.loss.kl_beta > 0 or self.step_algorithm(config).reference(config) or self.reference(config)

    def check_config(self, config, agents: list) -> None:
        """Every check of this record (and of the one its steps run), before any model is built."""
        self.check(config, agents)
        inner = self.step_algorithm(config)
        if config.loss.entropy_coef > 0 and inner.update is not policy_gradient:  # a term of the policy-gradient loss
            raise ConfigError(f"train.loss.entropy_coef: the entropy bonus is a term of the policy-gradient loss, "
                              f"and {config.algorithm} takes no policy-gradient step (leave it 0)")
        if inner is not self:
            inner.check(config, agents)


_REGISTRY: dict[str, Algorithm] = {}
_BUILTIN_MODULES = {
    "magrpo": "comarl.algorithms.magrpo",
    "grpo": "comarl.algorithms.magrpo",
    "mareinforce": "comarl.algorithms.reinforce",
    "reinforce": "comarl.algorithms.reinforce",
    "marloo": "comarl.algorithms.rloo",
    "rloo": "comarl.algorithms.rloo",
    "maremax": "comarl.algorithms.remax",
    "remax": "comarl.algorithms.remax",
    "maremax_groupmax": "comarl.algorithms.remax",
    "magrpo_token": "comarl.algorithms.token_baseline",
    "grpo_token": "comarl.algorithms.token_baseline",
    "iac": "comarl.algorithms.iac",
    "maac": "comarl.algorithms.maac",
    "madpo": "comarl.algorithms.madpo",
    "madpo_iter": "comarl.algorithms.madpo",
    "madpo_offline": "comarl.algorithms.madpo",
    "marlhf_iter": "comarl.algorithms.marlhf",
}


def register_algorithm(alg: Algorithm, aliases: tuple[str, ...] = ()) -> Algorithm:
    """Register ``alg`` under its name and under ``aliases`` (e.g. the single-agent name: grpo for magrpo)."""
    for name in (alg.name, *aliases):
        _REGISTRY[name] = alg
    return alg


def optionally_scaled(estimator: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``advantage(view, loss)`` from ``estimator(view) -> [G, K] or [S, T]``: divided by the group std of the
    returns when ``loss.scale_advantages`` (``advantages.scale_by_group_std_any``), one switch for every
    estimator."""
    def advantage(view, loss):
        adv = estimator(view)
        return scale_by_group_std_any(adv, view.returns) if loss.scale_advantages else adv

    advantage.__doc__ = estimator.__doc__
    return advantage


def get_algorithm(name: str) -> Algorithm:
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
    if name not in _REGISTRY:
        raise ConfigError(f"train.algorithm: unknown algorithm {name!r}; known: "
                          f"{', '.join(sorted(set(_REGISTRY) | set(_BUILTIN_MODULES)))}")
    return _REGISTRY[name]
