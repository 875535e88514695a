"""The rest of docs/vllm.md's "runs" rows, each trained for 2 optimiser steps on a real engine: MAReMax (the
greedy baseline decodes through the engine) on a staged planner -> worker team, MAAC (a central critic
model on the trainer), MARLHF-iter (a reward-model round, then RL on its score), structured generation (a
``FunctionEnv`` whose prompts carry a schema), the centralised actor (``CentralizedEnv``), and the other
policy-gradient estimators (mareinforce with two agents on one model, marloo over two turns, maremax_groupmax),
``train.hardware.mixed_precision: bf16`` and the coding env's LLM expert (``expert_edits``).

Each test asserts that training happened (every agent's weights moved, every logged metric finite) and that the
engine followed it (``check_trained`` of test_vllm_training.py: each step's ``gen/logprob_gap_max`` and the
engine's greedy probes within ``TOL`` of HF on the trained weights, far from the initial ones; with a schema
the step's gap is left out, since the engine's slot log-probs are renormalised by design). One or two engines
per test (64 s for the file on 2 busy cores, the first test paying the import). Needs ``vllm`` (skipped otherwise).
"""
import json
import math

import pytest

import comarl
from comarl.critics import CriticSettings
from comarl.preference import IterativeSettings, PairSettings, PreferenceSettings
from comarl.preference.centralized import CentralizedEnv
from comarl.preference.marlhf import RewardModelSettings
from comarl.core.schema import Schema, Slot, with_schema
from comarl.core.stages import Stage, StageGraph
from test_vllm_training import (ENGINE, ITEMS, TOL, agent_configs, check_trained, initial_models, pytestmark,  # noqa: F401
                                run, scrambled, toy_env)


def recording(trainer) -> list[bool]:
    """The ``greedy`` flag of every call the trainer's engine generator gets from now on."""
    calls: list[bool] = []
    real = trainer.generator.generate_for_agents
    trainer.generator.generate_for_agents = lambda *a, **kw: calls.append(kw.get("greedy", False)) or real(*a, **kw)
    return calls


def finite(history) -> None:
    for h in history:
        bad = {k: v for k, v in h.items() if isinstance(v, float) and not math.isfinite(v)
               and not (k == "rm/accuracy" and h["rm/held_out_pairs"] == 0)}  # no held-out pair: nan by design
        assert not bad, bad


def moved(trainer, initial) -> None:
    for a, m in zip(trainer.agents, initial):
        before = dict(m.named_parameters())
        assert any(not p.detach().equal(before[n]) for n, p in a.model.named_parameters()), a.name


def train_and_check(trainer, step_gap: bool = True, learns: bool = True):
    """Train, then check it trained and the engine followed; ``step_gap=False`` leaves each step's
    ``gen/logprob_gap_max`` out of the check (still finite), for set-ups where it is not rounding by design;
    ``learns=False`` (every reward equal: nothing to learn) checks the step's gap only."""
    try:
        initial = initial_models(trainer)
        calls = recording(trainer)
        history = trainer.train()
        sampled = list(calls)  # the training's calls (check_trained's probes come after)
        finite(history)
        if not learns:
            assert all(h["gen/logprob_gap_max"] < TOL for h in history)
            return history, sampled
        moved(trainer, initial)
        check_trained(trainer, history if step_gap else [], initial)
        return history, sampled
    finally:
        trainer.close()


def test_maremax_on_a_staged_team_decodes_its_greedy_baseline_through_the_engine():
    """A planner -> worker graph (``env.stages``): each stage samples through the engine, and MAReMax's greedy
    baseline too."""
    env = toy_env()
    env.stages = StageGraph((Stage((0,)), Stage((1,))), names=("Planner", "Worker"))
    cfg = comarl.TrainConfig(algorithm="maremax", hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE),
                             rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[], seed=0))
    history, calls = train_and_check(comarl.Trainer(agent_configs(), env, ITEMS, cfg))
    assert history[0]["tree/leaves"] == 2 * 4  # 2 items x K^2 leaves: the worker branched on each plan
    assert calls.count(False) >= 4  # per step: the planner's stage and the worker's stage
    assert calls.count(True) >= 2  # the greedy baseline, each step


def test_maac_trains_its_actors_on_the_engine_with_a_central_critic_on_the_trainer():
    trainer = run("maac", critic=CriticSettings(model="tiny", lr=1e-3))
    critic = [p.detach().clone() for m in trainer.critic.modules() for p in m.parameters()]
    history, _ = train_and_check(trainer)
    assert all("gen/logprob_gap_max" in h for h in history)
    after = [p.detach() for m in trainer.critic.modules() for p in m.parameters()]
    assert any(not p.equal(c) for p, c in zip(after, critic))  # the central critic learned on the trainer


def test_marlhf_iter_samples_its_round_and_its_rl_steps_through_the_engine(tmp_path):
    cfg = comarl.TrainConfig(algorithm="marlhf_iter", hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE),
                             rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, progress_bar=False, report_to=[], seed=0,
                                                  output_dir=str(tmp_path)))
    rm = RewardModelSettings(model="tiny", epochs=1, batch_size=4, lr=1e-3, held_out=0.25)
    cfg.preference = PreferenceSettings(pairs=PairSettings(pairs_per_item=2),
                                        iterative=IterativeSettings(rounds=1, steps_per_round=2, reward_model=rm))
    history, calls = train_and_check(comarl.Trainer(agent_configs(), toy_env(), ITEMS, cfg))
    assert [h["round"] for h in history] == [0, 0] and all(h["rm/refit"] == 1.0 for h in history)
    assert (tmp_path / "round-0" / "pairs.jsonl").read_text().strip()
    assert len(calls) >= 3  # the round's pool, then each RL step's rollout


def again(state, responses):
    """The second turn's prompts: each agent's first answer, fed back."""
    return [f"Again after {r!r}:" for r in responses]


@pytest.mark.parametrize("algorithm, n, turns, shared", [
    ("mareinforce", 2, 1, True),  # two agents on one model object (share_weights_with): one engine
    ("marloo", 1, 2, False),  # two turns: the second turn's prompts are built from the engine's first answers
    ("maremax_groupmax", 1, 1, False),
])
def test_the_other_policy_gradient_estimators_train_on_the_engine(algorithm, n, turns, shared):
    agents = agent_configs(n)
    if shared:
        agents[1].share_weights_with = 0
    env = comarl.FunctionEnv(formatters=[lambda it, j=j: f"Name colour {j} ({it['n']}):" for j in range(n)],
                             reward_fn=scrambled, transition_fn=again if turns > 1 else None, max_turns=turns)
    cfg = comarl.TrainConfig(algorithm=algorithm, hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE),
                             rollout=comarl.RolloutConfig(num_generations=2, num_turns=turns),
                             run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[], seed=0))
    trainer = comarl.Trainer(agents, env, ITEMS, cfg)
    assert len(trainer.generator.engines) == 1
    # shared weights: agent 1's first pass comes after agent 0's optimiser step on the same model, so its
    # "old" log-probs are not those that sampled and the step's gap is that step's size (HF's path alike)
    history, calls = train_and_check(trainer, step_gap=not shared)
    assert all("gen/logprob_gap_max" in h for h in history)
    assert len(calls) == 2 * turns  # each turn of each step sampled through the engine


SCHEMA = Schema(('{"colour": "', Slot(3), ', "shade": "', Slot(2), '}'))


def test_structured_prompts_train_with_their_schema_on_the_engine():
    seen = []

    def reward(responses, item):
        seen.append(json.loads(responses[0]))  # every answer parses: the skeleton was forced
        return scrambled(responses, item)

    env = comarl.FunctionEnv(formatters=[lambda it: with_schema(f"Describe colour {it['n']}:", SCHEMA)],
                             reward_fn=reward)
    agents = agent_configs(1)
    agents[0].max_new_tokens = 32
    cfg = comarl.TrainConfig(algorithm="magrpo", hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE),
                             rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[], seed=0))
    # slot tokens are renormalised over the allowed ones by the engine (a gap by design); probes carry no schema
    train_and_check(comarl.Trainer(agents, env, ITEMS, cfg), step_gap=False)
    assert len(seen) == 2 * 2 * 2 and all(set(s) == {"colour", "shade"} for s in seen)


def halves(completion: str, n: int) -> list[str]:
    """A parser that never fails (a random model writes no tags): the completion cut into ``n`` pieces."""
    step = max(1, len(completion) // n)
    return [completion[i * step:(i + 1) * step] for i in range(n)]


def test_the_centralised_actor_is_one_agent_on_one_engine():
    env = CentralizedEnv(toy_env(2), parser=halves)
    cfg = comarl.TrainConfig(algorithm="magrpo", hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE),
                             rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[], seed=0))
    trainer = comarl.Trainer(agent_configs(1), env, ITEMS, cfg)
    assert len(trainer.generator.engines) == 1
    history, _ = train_and_check(trainer)
    assert all("gen/logprob_gap_max" in h for h in history)


def test_bf16_mixed_precision_trains_with_an_fp32_engine():
    """The trainer's forward runs under bf16 autocast, the engine in the model's fp32: the step's gap is bf16's
    rounding (measured 2e-3..3e-3 here: above fp32's 2e-4, so autocast is on), and the engine still serves the trained
    weights (the fp32 probes)."""
    cfg = comarl.TrainConfig(algorithm="magrpo",
                             hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE, mixed_precision="bf16"),
                             rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[], seed=0))
    history, _ = train_and_check(comarl.Trainer(agent_configs(1), toy_env(1), ITEMS, cfg), step_gap=False)
    assert all(TOL < h["gen/logprob_gap_max"] < 0.05 for h in history), [h["gen/logprob_gap_max"] for h in history]


def test_coding_with_an_llm_expert_trains_its_agents_on_the_engine(shared_data):
    """CoopHumanEval, paper preset, two turns with ``expert_edits``: the agents sample through the engine, the
    expert (its own tiny model, not trained) with HF. Random code passes no test, so every reward is equal and
    nothing is learned: this checks that the run goes through (both turns on the engine, the gap at rounding)."""
    from comarl.envs.coding.data import load_function_items
    from comarl.envs.coding.function_env import FunctionCodingEnv
    from comarl.generation.helper_settings import HelperSpec
    from comarl.generation.helpers import LocalHelper

    items = load_function_items("coophumaneval", str(shared_data / "coophumaneval"), "train[:2]", None)
    env = FunctionCodingEnv("coophumaneval", 2, preset="paper", max_turns=2, feedback="expert_edits",
                            expert=LocalHelper("expert", HelperSpec(model="tiny", max_new_tokens=4)), expert_retries=1,
                            workers=1)
    cfg = comarl.TrainConfig(algorithm="magrpo", hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE),
                             rollout=comarl.RolloutConfig(num_generations=2, num_turns=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[], seed=0))
    try:
        history, calls = train_and_check(comarl.Trainer(agent_configs(), env, items, cfg), learns=False)
    finally:
        env.close()
    assert len(history) == 2 and all(h["count/completions"] > 0 for h in history)
    assert len(calls) == 2 * 2  # both turns of both steps through the engine; the expert is not the generator's
