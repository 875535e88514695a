"""Every *_smoke.yaml config trains for 2 steps on tiny models (the paper configs must at least load)."""
from pathlib import Path

import pytest

from comarl.config import load_config
from comarl.experiment import build_trainer

ROOT = Path(__file__).resolve().parents[2]
SMOKE = sorted(ROOT.glob("configs/**/*_smoke.yaml"))
FULL = sorted(p for p in ROOT.glob("configs/**/*.yaml") if not p.name.endswith("_smoke.yaml"))


@pytest.mark.parametrize("path", SMOKE, ids=[p.stem for p in SMOKE])
def test_smoke_config_trains_two_steps(path, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_config(path, [f"train.output_dir={tmp_path}", "train.max_steps=2", "train.progress_bar=false",
                             "train.report_to=[jsonl]"])
    if "../shared/data" in (cfg.data.train.source or "") and not (ROOT / cfg.data.train.source).exists():
        pytest.skip("shared benchmark data not present")
    trainer = build_trainer(cfg)
    try:
        hist = trainer.train()
    finally:
        getattr(trainer.env, "close", lambda: None)()
    assert len(hist) == 2 and all(h["count/completions"] > 0 for h in hist)


@pytest.mark.parametrize("path", FULL, ids=[p.stem for p in FULL])
def test_full_configs_are_valid(path):
    cfg = load_config(path)
    assert cfg.agents and cfg.train.num_generations >= 2
