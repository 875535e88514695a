"""The advantage component shared by IAC and MAAC: the critic's GAE advantages (``comarl.critics``)."""
from __future__ import annotations


def critic_advantage(samples, config):
    """[G, K] advantages the critic wrote in ``Critic.prepare`` (GAE, whitened if ``train.critic.normalize_advantages``)."""
    if samples.critic_advantages is None:
        raise ValueError(f"{config.algorithm} needs the critic's advantages (AgentSamples.critic_advantages is None); "
                         "the loop fills them when the algorithm names a critic")
    return samples.critic_advantages
