"""configs/paper/{tldr,arxiv}.yaml: the reference values, and 2 training steps on CPU with tiny models."""
from pathlib import Path

import pytest

from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.experiment import build_trainer

ROOT = Path(__file__).resolve().parents[3]
LOCAL = {"tldr": ("tests/data/writing/tldr_sample.jsonl", "test"),
         "arxiv": ("tests/data/writing/arxiv_sample.jsonl", "val")}
CPU = ["agents.*.model=tiny", "agents.*.device=cpu", "agents.*.dtype=float32", "agents.*.max_new_tokens=16",
       "train.run.max_steps=2", "train.run.progress_bar=false", "train.run.report_to=[jsonl]"]


@pytest.mark.parametrize("name", ["tldr", "arxiv"])
def test_paper_config_matches_the_reference(name):
    cfg = load_config(ROOT / f"configs/paper/{name}.yaml")
    assert len(cfg.agents) == 2
    for a in cfg.agents:
        assert (a.model, a.dtype, a.temperature, a.top_p, a.lr, a.max_new_tokens) == (
            "Qwen/Qwen3-1.7B", "bfloat16", 0.7, 0.9, 5e-6, 256)
    t = cfg.train
    assert (t.rollout.num_generations, t.run.epochs, t.rollout.num_turns, t.rollout.discount, t.run.batch_size,
            t.rollout.joint_mode) == (4, 2, 1, 1.0, 1, "aligned")
    assert t.loss.scale_advantages and t.rollout.early_stop_sibling_mean == -0.2
    assert cfg.env.args == {"preset": "paper"} and (cfg.env.reward_scale, cfg.env.reward_shift) == (1.0, 0.0)
    assert cfg.data.train.split == "train[:1100]" and cfg.data.eval.split == f"{LOCAL[name][1]}[:1100]"


@pytest.mark.parametrize("name", ["tldr", "arxiv"])
def test_paper_config_trains_two_steps_on_cpu(name, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    src, eval_split = LOCAL[name]
    data = [f"data.train.source={src}", f"data.eval.source={src}"]
    # the local sample is one small file read as either split: the paper's slices would overlap -> refused
    with pytest.raises(ConfigError, match="overlaps data.train"):
        build_trainer(load_config(ROOT / f"configs/paper/{name}.yaml", CPU + data))
    cfg = load_config(ROOT / f"configs/paper/{name}.yaml", CPU + data + [
        "data.train.split=train[:4]", f"data.eval.split={eval_split}[4:8]", f"train.run.output_dir={tmp_path}"])
    trainer = build_trainer(cfg)
    hist = trainer.train()
    assert len(hist) == 2 and hist[0]["count/completions"] == 8  # 1 item x K=4 x 2 agents
    assert all(0.0 <= h["reward/mean"] <= 3.0 for h in hist)
