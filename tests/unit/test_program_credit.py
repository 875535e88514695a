"""The credit rule of program runs as pure math: per-run estimates gathered by each call's run index, worked by
hand; the item groups that keep micro-batches whole; what counts as a run's reward."""
from __future__ import annotations

import math

import pytest
import torch

from comarl.objective.advantages import group_relative, token_advantages
from comarl.envs.base import AgentRewards
from comarl.envs.program import ProgramRunError, RunOutcome, run_reward
from comarl.core.types import AgentSamples
from comarl.updates.policy_gradient import group_sizes


def test_each_call_takes_its_runs_advantage():
    """One item, K = 3 runs with returns [3, 0, 0]: A = R - mean R = [2, -1, -1]. The agent was called twice in
    run 0 (2 and 1 tokens), never in run 1, once in run 2 (3 tokens)."""
    adv = group_relative(torch.tensor([[3.0, 0.0, 0.0]]))
    out = token_advantages(adv, torch.tensor([2, 1, 3]), 3, True, run_index=torch.tensor([0, 0, 2]))
    assert out.tolist() == [[2, 2, 0], [2, 0, 0], [-1, -1, -1]]


def test_run_index_with_two_items_and_its_refusals():
    adv = torch.tensor([[1.0, -1.0], [0.5, -0.5]])  # G = 2 items, K = 2 runs; run index g*K + k
    out = token_advantages(adv, torch.tensor([1, 1, 1]), 1, True, run_index=torch.tensor([1, 2, 2]))
    assert out.flatten().tolist() == [-1.0, 0.5, 0.5]
    with pytest.raises(ValueError, match="per-token estimate"):
        token_advantages(torch.zeros(3, 2), torch.tensor([1, 1, 1]), 2, False, run_index=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="run in 0..3"):
        token_advantages(adv, torch.tensor([1]), 1, True, run_index=torch.tensor([4]))


def test_group_sizes_are_the_calls_of_each_item():
    s = AgentSamples(prompt_ids=[[1]] * 5, completion_ids=[[1]] * 5, truncated=torch.zeros(5, dtype=torch.bool),
                     texts=[""] * 5, returns=torch.zeros(3, 2), turns=torch.zeros(3, dtype=torch.long),
                     run_index=torch.tensor([0, 1, 1, 4, 5]))
    assert group_sizes([s], 5) == [3, 0, 2]  # item 1 called the agent in neither of its runs


def test_a_runs_reward():
    assert run_reward(RunOutcome("run 1 of 2", value=3), 2) == 3.0
    assert run_reward(RunOutcome("r", value=AgentRewards((1, 2.5))), 2) == AgentRewards((1.0, 2.5))
    for bad in (True, "1", None, math.nan, AgentRewards((1.0,)), AgentRewards((1.0, math.inf))):
        with pytest.raises(ProgramRunError, match="run 1 of 2"):
            run_reward(RunOutcome("run 1 of 2", value=bad), 2)
    with pytest.raises(ProgramRunError, match="run 2 of 2 failed: KeyError") as e:
        run_reward(RunOutcome("run 2 of 2", error=KeyError("x")), 2)
    assert isinstance(e.value.__cause__, KeyError)
