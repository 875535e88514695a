"""MAREINFORCE: multi-agent REINFORCE without a baseline; with one agent, REINFORCE.

Each agent's advantage for a sample is its credited return, ``A = R``
(``train.loss.scale_advantages`` divides by the group std of the returns; it is off
by default). Departures from REINFORCE (Williams, 1992) as used for LLMs
(Ahmadian et al., 2024, "Back to Basics"): no value baseline and no moving
average baseline at all, so the variance is the highest of the family; the
update goes through the shared clipped-ratio loss, which is exactly the
REINFORCE gradient when ``num_iterations`` = 1 (the ratio is 1). Returns in
multi-turn rollouts are the tree's credited discounted returns (see
``comarl.rollout.tree``), not Monte-Carlo returns of a single trajectory.
"""
from __future__ import annotations

from ..objective.advantages import no_baseline
from .base import Algorithm, Estimator, optionally_scaled, register_algorithm, register_estimator


def reinforce_estimate(view):
    """[G, K] credited returns -> ``R``."""
    return no_baseline(view.returns)


NO_BASELINE = register_estimator(Estimator("no_baseline", optionally_scaled(reinforce_estimate), min_generations=1,
                                           summary="no baseline: advantage = credited return"))
MAREINFORCE = register_algorithm(Algorithm.with_estimator("mareinforce", NO_BASELINE), aliases=("reinforce",))
