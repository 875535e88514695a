"""The demo's pieces by hand: its config matches configs/demo/writing.yaml, the score of evaluation records,
and the hints about load and threads."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from comarl.config import ExperimentConfig, load_config
from comarl.core.config_io import from_dict, to_dict
from comarl.demo import demo_config, demo_items, speed_hints
from comarl.experiment import load_items
from comarl.runs.heldout import records_score
from comarl.envs.base import AgentRewards

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_config_file_is_what_comarl_demo_trains():
    in_file = to_dict(load_config(ROOT / "configs/demo/writing.yaml"))
    demo = to_dict(from_dict(ExperimentConfig, demo_config("tiny", "writing", 0, "runs/demo_config", 0)))
    assert in_file == demo


def test_the_smollm2_demo_config_scores_greedily():
    cfg = from_dict(ExperimentConfig, demo_config("smollm2", "writing", 0, None, 0))
    cfg.validate()  # no model is loaded
    assert cfg.train.run.eval_num_generations == 1 and cfg.train.run.max_steps == 10
    assert cfg.env.args == {"short_max": 24, "long_max": 80} and [a.temperature for a in cfg.agents] == [0.9, 0.9]


@pytest.mark.parametrize("task", ["writing", "tldr"])
def test_the_demo_configs_eval_set_is_the_demos_held_out_posts(task):
    cfg = from_dict(ExperimentConfig, demo_config("tiny", task, 2, None, 0))
    train, heldout = demo_items(task)
    assert load_items(cfg, "train") == train and load_items(cfg, "eval") == heldout


def test_records_score_by_hand():
    # item a: team rewards 0.2, 0.4 -> 0.3; item b: per-agent rewards (0.5, 0.7) and (0.1, 0.1) -> 0.6, 0.1 -> 0.35
    # mean 0.325; sample std of (0.3, 0.35) = 0.05 / sqrt(2); s.e. = that / sqrt(2) = 0.025
    a, b = {"text": "a"}, {"text": "b"}
    rec = [SimpleNamespace(item=b, transitions=[SimpleNamespace(reward=AgentRewards((0.5, 0.7))),
                                                SimpleNamespace(reward=AgentRewards((0.1, 0.1)))]),
           SimpleNamespace(item=a, transitions=[SimpleNamespace(reward=0.2), SimpleNamespace(reward=0.4)])]
    s = records_score(rec, [a, b])
    assert s.per_item == pytest.approx((0.3, 0.35)) and s.samples == 2 and not s.greedy
    assert s.mean == pytest.approx(0.325) and s.stderr == pytest.approx(0.025)
    assert s.describe("items") == "0.325 ± 0.025 (mean ± s.e. over 2 items, 2 samples each)"
    with pytest.raises(ValueError, match=r"items \[1\] have no scored sample"):
        records_score(rec[1:], [a, b])


@pytest.mark.parametrize("load, cores, threads, expected", [
    (0.1, 2, 2, []),                                   # idle: nothing to say
    (None, 2, 2, []),                                  # load unknown, threads fit
    (1.2, 2, 1, ["busy"]),                             # load >= half the cores, one thread
    (1.0, 2, 2, ["busy", "threads"]),                  # 1.0 + 2 threads > 2 cores + 0.5: they take turns
    (0.3, 2, 4, ["threads"]),                          # more threads than cores
    (3.0, 16, 8, []),                                  # a big machine with room to spare
])
def test_speed_hints_by_hand(load, cores, threads, expected):
    hints = speed_hints(load, cores, threads)
    kinds = ["busy" if h.startswith("load average") else "threads" for h in hints]
    assert kinds == expected
    if "threads" in expected:
        assert "OMP_NUM_THREADS=1 comarl demo" in hints[-1]
    if "busy" in expected:
        assert f"load average {load:.1f} on {cores} cores" in hints[0]
