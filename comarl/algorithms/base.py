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

Two registries (``core/registry.py``) name what a config picks: ``ALGORITHMS`` (``train.algorithm``) and
``ESTIMATORS`` (``train.estimator``: an advantage estimator that replaces a policy-gradient algorithm's own).
Both load a user's object from ``package.module:NAME`` with no edit to comarl (docs/algorithms.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..core.config_io import ConfigError
from ..core.registry import Registry
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
        from ..rollout import RolloutSettings

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

    @classmethod
    def with_estimator(cls, name: str, estimator: "Estimator", summary: str = "", **fields: Any) -> "Algorithm":
        """A policy-gradient record whose advantages are ``estimator``'s."""
        return cls(name, estimator.advantage, min_generations=estimator.min_generations,
                   greedy_baseline=estimator.greedy_baseline, summary=summary or estimator.summary, **fields)

    def step_algorithm(self, config) -> "Algorithm":
        """The record whose estimator, critic and update run each step (itself, or ``steps_with``'s), with
        ``train.estimator``'s advantages when that key names one."""
        inner = self.steps_with(config) if self.steps_with is not None else self
        name = getattr(config, "estimator", None)
        if not name:
            return inner
        if inner.advantage is None or inner.critic is not None or inner.update is not policy_gradient:
            raise ConfigError(f"train.estimator: {inner.name} takes no estimator-based policy-gradient step "
                              f"(its advantages come from {'a critic' if inner.critic else 'its own update'}); "
                              f"leave train.estimator unset")
        est = ESTIMATORS.get(name)
        return replace(inner, advantage=est.advantage, min_generations=est.min_generations,
                       greedy_baseline=est.greedy_baseline)

    def generations_needed(self, config) -> int:
        """The smallest K (``train.rollout.num_generations``) this algorithm and the one its steps run accept."""
        return max(self.min_generations, self.step_algorithm(config).min_generations)

    def needs_reference(self, config) -> bool:
        """Whether the run builds frozen references: the KL term, or an update that learns against one."""
        return config.loss.kl_beta > 0 or self.step_algorithm(config).reference(config) or self.reference(config)

    def check_config(self, config, agents: list) -> None:
        """Every check of this record (and of the one its steps run), before any model is built."""
        from .overlap import check_lag

        self.check(config, agents)
        check_lag(config, self)  # train.rollout.max_staleness: families sound with lag (algorithms/overlap.py)
        inner = self.step_algorithm(config)
        if config.loss.entropy_coef > 0 and inner.update is not policy_gradient:  # a term of the policy-gradient loss
            raise ConfigError(f"train.loss.entropy_coef: the entropy bonus is a term of the policy-gradient loss, "
                              f"and {config.algorithm} takes no policy-gradient step (leave it 0)")
        if inner is not self:
            inner.check(config, agents)


@dataclass(frozen=True)
class Estimator:
    """An advantage estimator and what it needs from the rollout.

    Attributes:
        advantage: ``advantage(view, loss) -> [G, K] or [S, T]`` (see the module docstring).
        min_generations: the smallest K it is defined for.
        greedy_baseline: the rollout also decodes one greedy joint response per node (its ``view.baseline``).
    """

    name: str
    advantage: Callable[..., torch.Tensor]
    min_generations: int = 1
    greedy_baseline: bool = False
    summary: str = ""


_BUILTIN_ALGORITHMS = {
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
_BUILTIN_ESTIMATORS = {
    "group_relative": "comarl.algorithms.magrpo",
    "no_baseline": "comarl.algorithms.reinforce",
    "leave_one_out": "comarl.algorithms.rloo",
    "greedy": "comarl.algorithms.remax",
    "group_max": "comarl.algorithms.remax",
    "token_group": "comarl.algorithms.token_baseline",
}


def _estimator_from_import(obj: Any, spec: str) -> Estimator:
    """An ``Estimator`` as it is, or a function ``estimate(view) -> [G, K] or [S, T]`` (``train.loss.
    scale_advantages`` applies to it as to every built-in estimator)."""
    if isinstance(obj, Estimator):
        return obj
    if not callable(obj):
        raise TypeError("is neither an Estimator nor a function estimate(view) -> advantages")
    return Estimator(spec, optionally_scaled(obj), summary=(obj.__doc__ or "").strip().split("\n")[0])


ALGORITHMS: Registry[Algorithm] = Registry("algorithm", "train.algorithm", _BUILTIN_ALGORITHMS, kind=Algorithm)
ESTIMATORS: Registry[Estimator] = Registry("estimator", "train.estimator", _BUILTIN_ESTIMATORS,
                                           from_import=_estimator_from_import)


def register_algorithm(alg: Algorithm, aliases: tuple[str, ...] = ()) -> Algorithm:
    """Register ``alg`` under its name and under ``aliases`` (e.g. the single-agent name: grpo for magrpo)."""
    return ALGORITHMS.register(alg.name, alg, aliases)


def register_estimator(est: Estimator) -> Estimator:
    return ESTIMATORS.register(est.name, est)


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
    """The record named ``name``: built in, registered, or ``package.module:RECORD``."""
    return ALGORITHMS.get(name)
