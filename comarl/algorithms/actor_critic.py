"""The advantage component shared by IAC and MAAC: the critic's GAE advantages (``comarl.critics``)."""
from __future__ import annotations


def critic_advantage(view, loss):
    """[G, K] advantages the critic computed in ``Critic.prepare`` (GAE, whitened if
    ``train.critic.normalize_advantages``)."""
    if view.critic_advantages is None:
        raise ValueError("an actor-critic algorithm needs the critic's advantages (AgentView.critic_advantages is "
                         "None); the update passes them when the algorithm names a critic")
    return view.critic_advantages


def check_actor_critic(config, agents) -> None:
    """The critic's settings (a Q critic needs K >= 2), and no KL in the reward: the critic's GAE is
    computed before the KL-in-reward would change the rewards."""
    from ..core.config_io import ConfigError

    config.critic.validate(num_generations=config.rollout.num_generations)
    if config.loss.kl_beta > 0 and config.loss.kl_mode == "reward":
        raise ConfigError(f"train.loss.kl_mode: {config.algorithm} takes the KL in the loss (kl_mode=loss); the "
                          f"critic's GAE is computed before the KL-in-reward would change the rewards")
