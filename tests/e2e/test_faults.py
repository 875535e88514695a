"""Runs that go wrong (issue #33): steps that keep being skipped stop the run with a checkpoint
(``train.run.max_consecutive_skips``); an environment that raises on one item names it and stops, or scores it 0 and
goes on (``env.on_error``). docs/faults.md describes each for users; the sandbox pool's death is in
test_faults_sandbox.py, kill -9 and damaged checkpoints in test_faults_kill.py."""
import math
from pathlib import Path

import pytest

import comarl
from comarl.cli import main
from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.envs.base import EnvState, FunctionEnv
from comarl.envs.error_policy import EnvItemError, ErrorPolicyEnv, error_policy_of, with_error_policy
from comarl.experiment import build_env
from comarl.sandbox import SandboxError
from comarl.training.skips import RunStopped

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "configs/demo/writing.yaml")
SMALL = {"hidden_size": 32, "num_layers": 1}


def _trainer(env, items, out=None, **run):
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=4, model_kwargs=SMALL) for _ in range(2)]
    cfg = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=1, max_steps=len(items), shuffle=False, progress_bar=False,
                                                  report_to=["jsonl"] if out else [],
                                                  output_dir=str(out) if out else None, **run))
    return comarl.Trainer(agents, env, items, cfg)


def _env(reward):
    return FunctionEnv([lambda it: "a " + it["x"], lambda it: "b " + it["x"]], lambda r, it: reward(it))


# ---------------------------------------------------------------- train.run.max_consecutive_skips

def test_a_run_whose_steps_are_all_skipped_stops_with_a_checkpoint(tmp_path):
    """A NaN reward: no step can update. Before issue #33 the run went on to max_steps, learning nothing."""
    items = [{"x": str(i)} for i in range(8)]
    t = _trainer(_env(lambda it: float("nan")), items, tmp_path, max_consecutive_skips=3)
    with pytest.warns(RuntimeWarning, match="non-finite"), pytest.raises(RunStopped) as e:
        t.train()
    msg = str(e.value)
    assert t.state.step == 3 and "\n" not in msg
    assert "3 steps in a row took no update (steps 1-3: 6 non-finite losses or gradients" in msg
    assert "weights are those of step 0" in msg and f"saved in {tmp_path / 'checkpoint-3'}" in msg
    assert "TrainConfig(run=RunConfig(max_consecutive_skips=3))" in msg  # built in Python: its argument
    comarl.runs.checkpoint.verify_checkpoint(tmp_path / "checkpoint-3")
    assert t.history[-1]["count/nonfinite_skips"] == 6


def test_a_step_that_updates_ends_the_streak():
    """Items in order (no shuffle, one per step): ok, nan, nan, ok, nan, nan, nan, ok: a limit of 3 stops at step 7."""
    items = [{"x": x} for x in ("ok", "nan", "nan", "ok", "nan", "nan", "nan", "ok")]
    t = _trainer(_env(lambda it: 1.0 if it["x"] == "ok" else float("nan")), items, max_consecutive_skips=3)
    with pytest.warns(RuntimeWarning), pytest.raises(RunStopped, match=r"steps 5-7: 6 non-finite .* step 4; no "
                                                                       r"checkpoint was written"):
        t.train()
    assert t.state.step == 7


def test_zero_never_stops():
    items = [{"x": str(i)} for i in range(4)]
    t = _trainer(_env(lambda it: float("nan")), items, max_consecutive_skips=0)
    with pytest.warns(RuntimeWarning):
        t.train()
    assert t.state.step == 4 and t.history[-1]["count/nonfinite_skips"] == 8


def test_config_key_is_in_train_run_with_a_flat_alias():
    assert load_config(DEMO, ["train.run.max_consecutive_skips=5"]).train.run.max_consecutive_skips == 5
    assert load_config(DEMO, ["train.run.max_consecutive_skips=0"]).train.run.max_consecutive_skips == 0
    assert load_config(DEMO).train.run.max_consecutive_skips == 20
    with pytest.raises(ConfigError, match="train.run.max_consecutive_skips: must be >= 0, got -1"):
        load_config(DEMO, ["train.run.max_consecutive_skips=-1"])


def test_cli_prints_one_line_when_every_batch_is_empty(tmp_path, capsys):
    """One-token completions under mask_truncated: every completion is truncated, so no agent has a token in the
    loss (empty-batch skips); the CLI stops after 2 such steps with one line and status 2."""
    out = tmp_path / "run"
    with pytest.warns(RuntimeWarning, match="no completion in the loss"):
        code = main(["train", DEMO, f"train.run.output_dir={out}", "train.run.max_steps=6", "train.run.batch_size=2",
                     "train.rollout.num_generations=2", "train.loss.mask_truncated=true", "agents.*.max_new_tokens=1",
                     "train.run.max_consecutive_skips=2", "train.run.progress_bar=false",
                     "train.run.report_to=[jsonl]"])
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("comarl:")]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("comarl: run stopped: 2 steps in a row took no update (steps 1-2: 0 non-finite "
                             "losses or gradients, 4 empty batches")
    assert (out / "checkpoint-2").is_dir() and not (out / "final").exists()


# ---------------------------------------------------------------- env.on_error

class CountingEnv:
    """A FunctionEnv that counts its step_batch calls and raises on items whose x is "bad"."""

    def __init__(self):
        self.inner = _env(lambda it: 1 / 0 if it["x"] == "bad" else float(len(it["x"])))
        self.num_agents, self.calls = 2, 0

    def reset(self, item):
        return self.inner.reset(item)

    def step_batch(self, states, responses):
        self.calls += 1
        return self.inner.step_batch(states, responses)


def _batch(env, xs):
    states = [env.reset({"x": x}) for x in xs]
    return states, [("r", "s")] * len(states)


def test_a_good_batch_is_stepped_once():
    inner = CountingEnv()
    env = with_error_policy(inner, "raise")
    trs = env.step_batch(*_batch(env, ["a", "bb", "ccc"]))
    assert [t.reward for t in trs] == [1.0, 2.0, 3.0] and inner.calls == 1


def test_raise_names_the_item_its_index_and_the_error():
    inner = CountingEnv()
    env = with_error_policy(inner, "raise")
    items = [{"x": "a"}, {"x": "bad"}, {"x": "ccc"}]
    env.name_items(items, "train_dataset")
    states = [env.reset(it) for it in items]
    with pytest.raises(EnvItemError) as e:
        env.step_batch(states, [("r", "s")] * 3)
    msg = str(e.value)
    assert "\n" not in msg and e.value.kind == "environment error"
    assert msg.startswith("env.step_batch raised on joint action 1 of 3 (turn 0) on train_dataset[1] "
                          "({'x': 'bad'}): RuntimeError: reward_fn failed")
    assert "ZeroDivisionError" in msg and "env.on_error=zero" in msg
    assert inner.calls == 1 + 2  # the batch, then one by one up to the bad one


def test_zero_scores_the_bad_item_0_and_keeps_the_others():
    inner = CountingEnv()
    env = with_error_policy(inner, "zero")
    with pytest.warns(RuntimeWarning) as warned:
        trs = env.step_batch(*_batch(env, ["a", "bad", "ccc", "bad"]))
    said = [str(w.message) for w in warned]
    assert len(said) == 2 and said[0].startswith("env.on_error=zero: joint action 1 of 4 (turn 0) on item {'x': 'bad'} "
                                                 "raised RuntimeError: reward_fn failed")
    assert said[0].endswith("scored 0 (env errors so far: 1)") and "joint action 3 of 4" in said[1]
    assert [t.reward for t in trs] == [1.0, 0.0, 3.0, 0.0]
    assert trs[1].done and trs[1].next_state is None and env.errors == 2
    assert inner.calls == 1 + 4


def test_reset_errors_always_stop_and_sandbox_errors_are_never_zeroed():
    class Broken:
        num_agents = 1

        def reset(self, item):
            raise KeyError("prompt")

        def step_batch(self, states, responses):
            raise SandboxError("sandbox: job 3f2a... failed twice on a rebuilt slot")

    env = with_error_policy(Broken(), "zero")
    with pytest.raises(EnvItemError, match=r"env.reset raised on item \{'x': 1\}: KeyError: 'prompt'"):
        env.reset({"x": 1})
    state = EnvState(item={"x": 1}, prompts=("p",))
    with pytest.raises(EnvItemError, match="the code sandbox failed while scoring a batch of 2 joint actions .* "
                                           "never scored 0.*failed twice"):
        env.step_batch([state, state], [("a",), ("b",)])
    assert env.errors == 0


def test_wrapper_forwards_the_environments_attributes():
    inner = CountingEnv()
    inner.max_turns, inner.summarize = 3, lambda records: {"n": len(records)}
    env = with_error_policy(with_error_policy(inner, "raise"), "zero")
    assert env.env is inner and env.on_error == "zero"  # a second wrap replaces the policy
    assert env.max_turns == 3 and env.summarize([1, 2]) == {"n": 2} and not hasattr(env, "render_table")


def test_trainer_stops_naming_the_dataset_index():
    """Python API: a plain FunctionEnv gets the raise policy. Before issue #33: a bare RuntimeError out of the
    rollout, no index."""
    items = [{"x": "a"}, {"x": "b"}, {"x": "bad"}, {"x": "c"}]
    t = _trainer(CountingEnv(), items)
    assert isinstance(t.env, ErrorPolicyEnv) and t.error_policy.on_error == "raise"
    with pytest.raises(EnvItemError, match=r"joint action 0 of 2 \(turn 0\) on train_dataset\[2\] \(\{'x': 'bad'\}\)"):
        t.train()
    assert t.state.step == 2


def test_trainer_with_zero_goes_on_and_counts(tmp_path):
    items = [{"x": "a"}, {"x": "bad"}, {"x": "bad"}, {"x": "c"}]
    t = _trainer(with_error_policy(CountingEnv(), "zero"), items)
    with pytest.warns(RuntimeWarning, match="env.on_error=zero"):
        hist = t.train()
    assert [h["count/env_errors"] for h in hist] == [0, 2, 4, 4]  # K=2 joint actions per item
    assert hist[1]["reward/mean"] == 0.0 and hist[0]["reward/mean"] == 1.0


def test_config_on_error_wraps_the_built_env_inside_reward_processing():
    cfg = load_config(DEMO, ["env.on_error=zero", "env.reward_shift=1.0"])
    env = build_env(cfg)
    policy = error_policy_of(env)
    assert policy is not None and policy.on_error == "zero" and env.env is policy  # ProcessedRewardEnv outside
    assert error_policy_of(build_env(load_config(DEMO))).on_error == "raise"
    with pytest.raises(ConfigError, match="env.on_error: must be raise or zero, got 'skip'"):
        load_config(DEMO, ["env.on_error=skip"])


def test_zeroed_item_is_a_raw_zero_then_processed():
    """scale and shift apply to the zeroed item as to any reward (the policy sits inside the processing)."""
    from comarl.envs.reward_processing import with_reward_processing

    env = with_reward_processing(with_error_policy(CountingEnv(), "zero"), 2.0, -1.0)
    with pytest.warns(RuntimeWarning):
        trs = env.step_batch(*_batch(env, ["a", "bad"]))
    assert [t.reward for t in trs] == [1.0, -1.0] and trs[1].metrics["reward_raw"] == 0.0
    assert math.isclose(trs[0].metrics["reward_raw"], 1.0)
