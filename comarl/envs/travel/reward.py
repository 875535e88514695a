"""The shaped team reward, computed from the evaluator's verdict.

``reward = parse*P + grounding*G + constraints*C + budget*B + final*F
           - invented*I - overlap*O - lazy*L``, every term in [0, 1]:

- P: share of agents whose output parsed;
- G: share of filled plan values that exist in the reference information;
- C: share of checks passed, over the 8 commonsense checks and the hard checks
  that apply to the query (hard checks count as failed when the benchmark does
  not run them: incomplete plan or outside the sandbox);
- B: budget margin, 1 when the plan is complete and costs at most the budget,
  falling linearly to 0 at twice the budget; 0 for an incomplete plan;
- F: 1 when the plan passes every check (the benchmark's final pass);
- I: share of filled values that are invented (not in the reference);
- O: slots an agent wrote for another role, over the trip's slots (capped at 1);
- L: share of agents that filled none of their slots.

A fully valid plan with every role contributing scores ``P+G+C+B+F`` (the
maximum, 1.0 with the default weights).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from .evaluate import COMMONSENSE, Verdict


@dataclass(frozen=True)
class TravelRewardWeights:
    parse: float = 0.1
    """weight of the share of agents whose JSON parsed"""
    grounding: float = 0.2
    """weight of the share of filled values found in the reference information"""
    constraints: float = 0.4
    """weight of the share of commonsense + applicable hard checks passed"""
    budget: float = 0.1
    """weight of the budget margin (complete plans only)"""
    final: float = 0.2
    """bonus for passing every check"""
    invented: float = 0.2
    """penalty weight of the share of filled values not in the reference"""
    overlap: float = 0.1
    """penalty weight of slots written for another role"""
    lazy: float = 0.2
    """penalty weight of the share of agents that filled none of their slots"""

    @property
    def max_reward(self) -> float:
        return self.parse + self.grounding + self.constraints + self.budget + self.final


def reward_weights(args: Mapping[str, Any] | None) -> TravelRewardWeights:
    """Weights from ``env.args.reward`` (unknown keys and negative values are errors naming the key)."""
    args = dict(args or {})
    known = {f.name for f in fields(TravelRewardWeights)}
    unknown = set(args) - known
    if unknown:
        raise ValueError(f"env.args.reward: unknown key(s) {sorted(unknown)}; known: {', '.join(sorted(known))}")
    for k, v in args.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"env.args.reward.{k}: expected a non-negative number, got {v!r}")
    return TravelRewardWeights(**{k: float(v) for k, v in args.items()})


def constraint_share(v: Verdict, applicable_hard: Sequence[str]) -> float:
    """Passed checks / (8 + applicable hard checks)."""
    passed = sum(1 for k in COMMONSENSE if v.commonsense[k][0])
    if v.hard is not None:
        passed += sum(1 for k in applicable_hard if v.hard[k][0])
    return passed / (len(COMMONSENSE) + len(applicable_hard))


def budget_margin(v: Verdict, budget: float) -> float:
    if not v.commonsense["complete_information"][0]:
        return 0.0
    if v.cost <= budget:
        return 1.0
    return max(0.0, 1.0 - (v.cost - budget) / budget) if budget > 0 else 0.0


def team_reward(w: TravelRewardWeights, *, parsed: Sequence[bool], filled_values: int, invented_values: int,
                verdict: Verdict, applicable_hard: Sequence[str], budget: float, foreign_slots: int,
                total_slots: int, filled_per_agent: Sequence[int]) -> tuple[float, dict[str, float]]:
    """The reward and its terms (see the module docstring)."""
    n = len(parsed)
    terms = {
        "parse": sum(parsed) / n,
        "grounding": (filled_values - invented_values) / filled_values if filled_values else 0.0,
        "constraints": constraint_share(verdict, applicable_hard),
        "budget_margin": budget_margin(verdict, budget),
        "final": float(verdict.final_pass),
        "invented": invented_values / filled_values if filled_values else 0.0,
        "overlap": min(1.0, foreign_slots / total_slots) if total_slots else 0.0,
        "lazy": sum(1 for f in filled_per_agent if f == 0) / n,
    }
    value = (w.parse * terms["parse"] + w.grounding * terms["grounding"] + w.constraints * terms["constraints"]
             + w.budget * terms["budget_margin"] + w.final * terms["final"] - w.invented * terms["invented"]
             - w.overlap * terms["overlap"] - w.lazy * terms["lazy"])
    return value, terms


__all__ = ["TravelRewardWeights", "reward_weights", "team_reward"]
