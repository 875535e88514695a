"""MAREINFORCE: multi-agent REINFORCE without a baseline; with one agent, REINFORCE.

Each agent's advantage for a sample is its credited return, ``A = R``
(``train.scale_advantages`` divides by the group std of the returns; it is off
by default). Departures from REINFORCE (Williams, 1992) as used for LLMs
(Ahmadian et al., 2024, "Back to Basics"): no value baseline and no moving
average baseline at all, so the variance is the highest of the family; the
update goes through the shared clipped-ratio loss, which is exactly the
REINFORCE gradient when ``num_iterations`` = 1 (the ratio is 1). Returns in
multi-turn rollouts are the tree's credited discounted returns (see
``comarl.rollout``), not Monte-Carlo returns of a single trajectory.
"""
from __future__ import annotations

from ..advantages import no_baseline, scale_by_group_std
from .base import Algorithm, register_algorithm


def reinforce_advantage(samples, config):
    """[G, K] credited returns -> ``R`` (optionally / group std)."""
    adv = no_baseline(samples.returns)
    return scale_by_group_std(adv, samples.returns) if config.scale_advantages else adv


MAREINFORCE = register_algorithm(Algorithm("mareinforce", reinforce_advantage, min_generations=1,
                                           summary="no baseline: advantage = credited return"))
REINFORCE = register_algorithm(Algorithm("reinforce", reinforce_advantage, min_generations=1,
                                         summary="MAREINFORCE with a single agent"))
