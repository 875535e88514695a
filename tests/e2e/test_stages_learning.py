"""A planner -> worker team learns a task the worker can solve only by reading the plan (issue #30).

Each item holds a secret colour, ``red`` or ``green``, that only the planner's prompt shows. The worker's prompt is the
same for every item; in the team graph it also holds the planner's output. The worker succeeds when the
parity of its first character names the secret (even: ``red``). A worker that cannot read the plan answers
every item from the same prompt, so over held-out items with as many of each secret it succeeds on exactly
half in expectation: 0.5 is its ceiling, whatever it learns.

Rewards are per agent (``AgentRewards``): the worker gets its success; the planner gets 1 when its own first
character names the secret (it states the secret) plus half the worker's success. Tiny random models do not
find a shared code from the worker's success alone in a test's budget (measured: both agents settle on a
constant answer, success 0.5); the planner's own term makes its plan informative early, and the worker must
still learn to read it.

Measured (80 steps of 6 items, K=4, lr 1e-2; held-out: 60 items x 8 samples at temperature 1, before -> after):
the worker branching (a node per plan): MAGRPO seeds 0, 1, 2: .49 -> 1.0, .49 -> 1.0, .49 -> .50; MARLOO
seeds 0, 1, 2: .49 -> 1.0, 1.0, 1.0; MAREINFORCE seed 0: 1.0. The worker aligned (one per plan): MAGRPO seeds
0, 1, 2: 1.0, 1.0, .50; MARLOO seeds 0, 1: 1.0, 1.0. MAGRPO with the worker unable to read the plan (one
stage, 40 steps): .49 -> .55 (sampling noise around its exact expectation, .5). At lr 3e-2 (30-40 steps) half
the seeds settled on a constant answer.
"""
import pytest

import comarl
from comarl.envs.base import AgentRewards, FunctionEnv
from comarl.runs.heldout import heldout_score
from comarl.core.stages import Stage, StageGraph

SECRETS = ("red", "green")
TRAIN = [{"n": i, "secret": SECRETS[i % 2]} for i in range(60)]
HELD_OUT = [{"n": 1000 + i, "secret": SECRETS[i % 2]} for i in range(60)]


def said(text: str):
    """The secret a completion names: the parity of its first non-space character."""
    t = text.strip()
    return SECRETS[ord(t[0]) % 2] if t else None


def team_env(reads_plan: bool, shaped: bool = True, aligned: bool = False):
    def reward(responses, item):
        ok = float(said(responses[1]) == item["secret"])
        if not shaped:
            return ok
        return AgentRewards((float(said(responses[0]) == item["secret"]) + 0.5 * ok, ok))

    return FunctionEnv([lambda it: f"Item {it['n']}. Tell the solver the secret colour: {it['secret']}",
                        lambda it: "Name the secret colour."], reward,
                       stages=StageGraph((Stage((0,)), Stage((1,), aligned=aligned))) if reads_plan else None)


def train_team(algorithm: str, reads_plan: bool = True, aligned: bool = False, steps: int = 80):
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=1, lr=1e-2, chat_template=False, model_kwargs={"seed": i})
              for i in range(2)]
    cfg = comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=4),
                             run=comarl.RunConfig(batch_size=6, max_steps=steps, progress_bar=False, report_to=[],
                                                  seed=0))
    return comarl.Trainer(agents, team_env(reads_plan, aligned=aligned), TRAIN, cfg)


def success(trainer, reads_plan: bool = True) -> float:
    """The worker's held-out success (8 samples per item at temperature 1, seeded)."""
    return heldout_score(trainer.agents, team_env(reads_plan, shaped=False), HELD_OUT, samples=8, greedy=False).mean


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, aligned", [("magrpo", False), ("marloo", True)],
                         ids=["magrpo_branch", "marloo_aligned"])
def test_worker_learns_to_read_the_plan(algorithm, aligned):
    """MAGRPO with the worker branching (K workers per plan, 4 x 4 leaves per item) and MARLOO with it aligned
    (one worker per plan, grouped at the item's node)."""
    t = train_team(algorithm, aligned=aligned)
    before = success(t)
    t.train()
    after = success(t)
    assert before < 0.55, before
    assert after >= 0.85, (before, after)  # a plan-blind worker's ceiling is 0.5


@pytest.mark.slow
def test_a_worker_that_cannot_read_the_plan_stays_at_its_ceiling():
    t = train_team("magrpo", reads_plan=False, steps=40)
    t.train()
    assert success(t, reads_plan=False) <= 0.6
