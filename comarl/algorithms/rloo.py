"""MARLOO: multi-agent REINFORCE with a leave-one-out baseline; with one agent, RLOO.

Agent i's sample k at a node gets ``A_k = R_k - mean_{j != k} R_j`` over the
agent's other K-1 samples of that node (K >= 2). That equals
``K/(K-1) * (R_k - mean_j R_j)``, i.e. MAGRPO's advantage times K/(K-1);
so with ``train.loss.scale_advantages`` on, MARLOO is MAGRPO-with-std up to that
constant factor (which Adam all but cancels), and the option is off by default.

Departures from RLOO (Kool et al., 2019; Ahmadian et al., 2024): RLOO samples
K full responses and uses the others' *sequence* rewards; here the K samples
are one node's samples in the rollout tree, the rewards are the tree's
credited returns (cross mode: mean over the joint actions containing the
sample), and the loss is the shared clipped-ratio loss (plain REINFORCE
gradient when ``num_iterations`` = 1).
"""
from __future__ import annotations

from ..objective.advantages import leave_one_out
from .base import Algorithm, Estimator, optionally_scaled, register_algorithm, register_estimator


def rloo_estimate(view):
    """[G, K] credited returns -> leave-one-out advantages."""
    return leave_one_out(view.returns)


LEAVE_ONE_OUT = register_estimator(Estimator("leave_one_out", optionally_scaled(rloo_estimate), min_generations=2,
                                             summary="leave-one-out baseline per agent and node"))
MARLOO = register_algorithm(Algorithm.with_estimator("marloo", LEAVE_ONE_OUT), aliases=("rloo",))
