"""The Minecraft configs: the full ones carry the reference repository's settings; the smoke ones train on CPU.

The smoke configs read the package's own tasks (no shared data, no hub): each trains one step on tiny models and
is evaluated once, which writes the pictures of the evaluated builds.
"""
from pathlib import Path

import pytest

import comarl.envs.minecraft  # noqa: F401  (registers str_build and house_build)
from comarl.config import load_config
from comarl.experiment import build_env, build_trainer

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs" / "minecraft"
SMOKE = sorted(CONFIGS.glob("*_smoke.yaml"))
FULL = sorted(p for p in CONFIGS.glob("*.yaml") if p not in SMOKE)

# the reference's settings (OpenMLRL/LLM_Collab_Minecraft {str,house}_build/configs/*_config.yaml):
# agent lr, reward shift, external mode, epochs, early termination threshold, logging steps
REFERENCE = {
    "str_build_magrpo": (5.0e-6, -2.0, "position_feedback", 20, -0.1, 1),
    "str_build_iac": (2.5e-6, -2.0, "position_feedback", 150, -0.1, 20),
    "str_build_maac": (2.5e-6, -2.0, "position_feedback", 150, -0.1, 20),
    "house_build_magrpo": (1.0e-5, -1.0, "score_feedback", 20, -0.1, 5),
    "house_build_iac": (5.0e-6, -1.0, "score_feedback", 150, 0.0, 40),
    "house_build_maac": (5.0e-6, -1.0, "score_feedback", 150, 0.0, 40),
}


def test_every_algorithm_has_a_full_and_a_smoke_config():
    assert sorted(p.stem for p in FULL) == sorted(REFERENCE)
    assert sorted(p.stem for p in SMOKE) == sorted(f"{k}_smoke" for k in REFERENCE)


@pytest.mark.parametrize("path", FULL, ids=[p.stem for p in FULL])
def test_full_configs_have_the_reference_settings(path):
    cfg = load_config(path)
    lr, shift, mode, epochs, threshold, logging = REFERENCE[path.stem]
    assert [a.model for a in cfg.agents] == ["Qwen/Qwen3-4B-Instruct-2507"] * 2
    assert all((a.lr, a.temperature, a.top_p, a.max_new_tokens, a.dtype) == (lr, 0.6, 0.6, 512, "bfloat16")
               for a in cfg.agents)
    assert (cfg.env.reward_shift, cfg.env.reward_scale, cfg.env.args["mode"]) == (shift, 1.0, mode)
    assert cfg.env.args["preset"] == "paper" and cfg.env.args["original_prompt"] and cfg.env.args["previous_response"]
    t = cfg.train
    assert (t.rollout.num_turns, t.rollout.discount, t.run.epochs, t.run.batch_size) == (4, 0.9, epochs, 1)
    assert t.rollout.early_stop_sibling_mean == threshold
    assert t.run.logging_steps == logging and (cfg.data.train.split, cfg.data.eval.split) == ("train[:8]", "train[8:]")
    if t.algorithm != "magrpo":
        assert t.critic.model == "Qwen/Qwen3-4B-Instruct-2507" and t.critic.lr == lr and t.critic.value_loss_coef == 0.6
        assert t.critic.critic_type == "v" and t.critic.gae_lambda == 0.0
    env = build_env(cfg)  # the environment builds from the config's arguments (no model is loaded)
    assert env.num_agents == 2 and env.max_turns == 4


@pytest.mark.parametrize("path", SMOKE, ids=[p.stem for p in SMOKE])
def test_smoke_config_trains_and_evaluates_with_pictures(path, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_config(path, [f"train.run.output_dir={tmp_path}", "train.run.max_steps=1",
                             "train.run.progress_bar=false", "train.run.report_to=[jsonl]",
                             f"env.args.pictures={tmp_path / 'pictures'}"])
    assert cfg.data.train.source is None  # the package's own tasks
    trainer = build_trainer(cfg)
    hist = trainer.train()
    assert len(hist) == 1 and hist[0]["count/completions"] > 0 and "env/iou" in hist[0]
    summary = trainer.evaluate()["summary"]
    assert summary["samples"] >= 1 and set(summary["per_task"]) == {it["task_id"] for it in trainer.eval_items}
    pictures = [Path(p) for p in summary["pictures"]]
    assert pictures and all(p.read_bytes()[:4] == b"\x89PNG" for p in pictures)
