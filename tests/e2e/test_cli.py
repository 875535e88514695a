"""Config errors name the key; the CLI runs configs; help texts exist."""
import json
from pathlib import Path

import pytest

from comarl.cli import main
from comarl.config import load_config
from comarl.core.config_io import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _yaml(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("override, message", [
    (["train.rollout.num_generations=1"], "train.rollout.num_generations"),
    (["train.rollout.joint_mode=diagonal"], "train.rollout.joint_mode"),
    (["train.nonsense=3"], "train.nonsense"),
    (["train.run.batch_size=two"], "train.run.batch_size"),
    (["train.rollout.discount=1.5"], "train.rollout.discount"),
    (["agents.0.temperature=-1"], "agents.0.temperature"),
    (["agents.0.colour=red"], "agents.0.colour"),
    (["train.algorithm=ppo-ultra"], "train.algorithm"),
    (["train.loss.loss_normalization=median"], "train.loss.loss_normalization"),
    (["train.run.batch_size=4", "train.run.gradient_accumulation_steps=3"], "train.run.gradient_accumulation_steps"),
])
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(ROOT / "configs/demo/writing.yaml", override)


def test_no_agents_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="at least one agent"):
        load_config(_yaml(tmp_path, "agents: []\n"))


def test_overrides_fill_nested_keys_and_star():
    cfg = load_config(ROOT / "configs/demo/writing.yaml", ["agents.*.lr=0.5", "train.run.lr_scheduler=cosine",
                                                         "agents.1.temperature=0.7", "data.train.limit=3"])
    assert [a.lr for a in cfg.agents] == [0.5, 0.5]
    assert cfg.agents[1].temperature == 0.7 and cfg.train.run.lr_scheduler == "cosine"
    assert cfg.data.train.limit == 3


def test_cli_error_exit_code_and_message(capsys):
    rc = main(["train", str(ROOT / "configs/demo/writing.yaml"), "train.rollout.num_generations=1"])
    assert rc == 2
    assert "train.rollout.num_generations" in capsys.readouterr().err


def test_help_texts(capsys):
    for argv in (["--help"], ["train", "--help"], ["eval", "--help"], ["demo", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
    out = capsys.readouterr().out
    assert "comarl train CONFIG.yaml" in out and "--checkpoint" in out and "smollm2" in out
    flat = " ".join(out.split())  # argparse wraps help lines at the terminal width
    assert "the same seed repeats a tiny-model run" in flat and "--debug" in flat


def test_train_then_eval_from_the_cli(tmp_path, capsys):
    cfg = str(ROOT / "configs/demo/writing_2turn_cross.yaml")
    out = tmp_path / "run"
    assert main(["train", cfg, f"train.run.output_dir={out}", "train.run.max_steps=2",
                 "train.run.progress_bar=false"]) == 0
    assert (out / "final" / "agent1" / "config.json").exists()
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["step"] == 2 and "reward/turn1" in metrics[-1]
    assert (out / "tensorboard").exists()
    assert main(["eval", cfg, "--checkpoint", str(out / "final"), "data.eval.limit=2"]) == 0
    result = json.loads((out / "eval.json").read_text())  # into the run it evaluates
    assert "reward/mean" in result["metrics"] and len(result["records"]) == 2
    assert result["scored"]["data"]["split"] == "heldout" and result["scored"]["score"]["mean"] == pytest.approx(
        result["metrics"]["reward/turn0"])


def test_eval_checkpoint_puts_lora_adapters_back_on_the_base(tmp_path):
    import torch

    from comarl.cli import _agents_for_eval
    from comarl.experiment import build_trainer

    over = [f"train.run.output_dir={tmp_path}", "train.run.max_steps=1", "train.run.progress_bar=false",
            "agents.0.lora={r: 4, alpha: 8}", "agents.1.lora={r: 4, alpha: 8}", "agents.*.model_kwargs={seed: 0}"]
    cfg = load_config(ROOT / "configs/demo/writing.yaml", over)
    trainer = build_trainer(cfg)
    trainer.train()
    trained = [{n: p.detach().clone() for n, p in a.model.named_parameters()} for a in trainer.agents]
    assert (tmp_path / "checkpoint-1" / "agent0" / "adapter_config.json").exists()
    loaded = _agents_for_eval(load_config(ROOT / "configs/demo/writing.yaml", over), tmp_path / "checkpoint-1")
    for t, a in zip(trained, loaded):
        got = dict(a.model.named_parameters())
        assert t.keys() == got.keys() and all(torch.equal(t[k], got[k]) for k in t)
    assert main(["eval", str(ROOT / "configs/demo/writing.yaml"), "--checkpoint", str(tmp_path / "checkpoint-1"),
                 "--out", str(tmp_path / "e.json"), *over[1:]]) == 0
