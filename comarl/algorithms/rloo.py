"""MARLOO: multi-agent REINFORCE with a leave-one-out baseline; with one agent, RLOO.

Agent i's sample k at a node gets ``A_k = R_k - mean_{j != k} R_j`` over the
agent's other K-1 samples of that node (K >= 2). That equals
``K/(K-1) * (R_k - mean_j R_j)``, i.e. MAGRPO's advantage times K/(K-1);
so with ``train.scale_advantages`` on, MARLOO is MAGRPO-with-std up to that
constant factor (which Adam all but cancels), and the option is off by default.

Departures from RLOO (Kool et al., 2019; Ahmadian et al., 2024): RLOO samples
K full responses and uses the others' *sequence* rewards; here the K samples
are one node's samples in the rollout tree, the rewards are the tree's
credited returns (cross mode: mean over the joint actions containing the
sample), and the loss is the shared clipped-ratio loss (plain REINFORCE
gradient when ``num_iterations`` = 1).
"""
from __future__ import annotations

from ..advantages import leave_one_out, scale_by_group_std
from .base import Algorithm, register_algorithm


def rloo_advantage(samples, config):
    """[G, K] credited returns -> leave-one-out advantages (optionally / group std)."""
    adv = leave_one_out(samples.returns)
    return scale_by_group_std(adv, samples.returns) if config.scale_advantages else adv


MARLOO = register_algorithm(Algorithm("marloo", rloo_advantage, min_generations=2,
                                      summary="leave-one-out baseline per agent and node"))
RLOO = register_algorithm(Algorithm("rloo", rloo_advantage, min_generations=2,
                                    summary="MARLOO with a single agent"))
