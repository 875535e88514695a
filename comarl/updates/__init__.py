"""Updates: what one training step does with its batch (``comarl/core/steps.py``).

An Update is a small object the algorithm record names (``comarl/algorithms/``)::

    step(team, batch, step) -> StepOutput      learn from the batch (collective under torchrun)
    checkpoint_parts(team, step) -> (modules, files) what a checkpoint must hold for it (a critic)
    restore(path, team)                        put that back from a checkpoint

``PolicyGradient`` (every on-policy estimator, and the actor-critics with a critic),
``OnlineDPO`` (MADPO) and ``PairDPO`` (DPO on pairs a source hands over). The Team
(``training/team.py``) is used through its public members: agents, references,
scalers, sharding, ``gathered(...)``, ``optimizer_step(i, bad, step)``, ``count``, ``lr``.
"""
from .dpo import OnlineDPO, PairDPO, dpo_step
from .policy_gradient import PolicyGradient

__all__ = ["OnlineDPO", "PairDPO", "PolicyGradient", "dpo_step"]
