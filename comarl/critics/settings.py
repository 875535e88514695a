"""``train.critic``: the critic of the actor-critic algorithms (iac, maac); ignored by the others."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.config_io import ConfigError, aliased

CRITIC_TYPES = ("v", "q")


@aliased
@dataclass
class CriticSettings:
    """How the critic is built and trained. One docstring line per field."""

    model: Any = None
    """None: a value head on each agent's own model (iac); else a separate critic: hub id, local path, tiny."""
    critic_type: str = "v"
    """v: V(h) from the prompt(s); q: Q(h, a) from prompts and responses, baselined by the other samples' Q (K >= 2)."""
    lr: float = 1e-5
    """Learning rate of the critic (the value head, plus the separate critic model)."""
    weight_decay: float = 0.0
    """AdamW weight decay of the critic."""
    device: str | None = None
    """Device of a separate critic (None: iac: each agent's device; maac: the first agent's)."""
    dtype: str = "float32"
    """Weights dtype of a separate critic model."""
    head_hidden_dim: int = 0
    """0: a linear value head on the last hidden state; > 0: one tanh hidden layer of this width first."""
    gae_lambda: float = 0.95
    """lambda of GAE over the turns of each branch (0: one-step TD; 1: return minus value; docs/actor_critic.md)."""
    value_loss_coef: float = 0.5
    """Weight of the value loss (with a value head it is added to the agent's loss through the backbone)."""
    value_clip: float | None = None
    """Clip the critic's change per rollout to +-this around its rollout-time value (None: no clipping)."""
    normalize_advantages: bool = True
    """Whiten each agent's advantages over its batch (zero mean, unit std)."""
    bootstrap_truncated: bool = True
    """A branch cut by num_turns (the env would go on) bootstraps from V(next prompts) (v only; q warns, cut = end)."""
    joint_input: Any = None
    """maac: "module:function" (or a callable) writing the central critic's text; None: role-marker template."""
    max_length: int = 0
    """Keep only the last this many tokens of a critic input (0: no limit)."""

    MOVED_OUT: ClassVar[dict[str, str]] = {"entropy_coef": "train.loss.entropy_coef"}
    """Keywords that moved to another section (deprecated until comarl 0.2): ``TrainConfig`` places their values."""

    def validate(self, where: str = "train.critic", num_generations: int | None = None) -> None:
        """Check every field; with ``num_generations`` (K, given when an algorithm uses the critic) also that a Q
        critic can form its baseline: the mean Q of the node's joint actions that do not hold the sample. At
        K = 1 there are none, and ``Q(h, a)`` itself leaves only Q's own TD error (no learning signal)."""
        if self.critic_type not in CRITIC_TYPES:
            raise ConfigError(f"{where}.critic_type: must be v or q, got {self.critic_type!r}")
        if self.critic_type == "q" and num_generations is not None and num_generations < 2:
            raise ConfigError(f"{where}.critic_type: q needs train.rollout.num_generations >= 2 (a sample's baseline "
                              f"is the mean Q of the node's other samples; with K={num_generations} there are none, "
                              f"and Q(h, a) itself leaves Q's own TD error as the advantage); use critic_type: v")
        if not 0 <= self.gae_lambda <= 1:
            raise ConfigError(f"{where}.gae_lambda: must be in [0, 1], got {self.gae_lambda}")
        if self.lr <= 0:
            raise ConfigError(f"{where}.lr: must be > 0, got {self.lr}")
        if self.value_loss_coef < 0:
            raise ConfigError(f"{where}.value_loss_coef: must be >= 0, got {self.value_loss_coef}")
        if self.value_clip is not None and self.value_clip <= 0:
            raise ConfigError(f"{where}.value_clip: must be > 0 or null, got {self.value_clip}")
        for key in ("head_hidden_dim", "max_length"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{where}.{key}: must be >= 0, got {getattr(self, key)}")
