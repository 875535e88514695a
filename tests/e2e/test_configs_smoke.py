"""Every *_smoke.yaml config trains for 2 steps on tiny models from a plain clone (the full configs must at least
load): the configs are copied into a folder with no ``../shared`` and no ``tests/`` beside it, so they can read
only what an install ships (``fixture:NAME``, ``comarl/data/fixtures``)."""
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from comarl.config import load_config
from comarl.data import FIXTURES
from comarl.experiment import build_trainer

ROOT = Path(__file__).resolve().parents[2]
SMOKE = sorted(ROOT.glob("configs/**/*_smoke.yaml"))
FULL = sorted(p for p in ROOT.glob("configs/**/*.yaml") if not p.name.endswith("_smoke.yaml"))


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A folder holding only the configs, as a user's clone would, and nothing of the project's tests or data."""
    folder = tmp_path_factory.mktemp("clone") / "comarl"
    shutil.copytree(ROOT / "configs", folder / "configs")
    assert not (folder.parent / "shared").exists() and not (folder / "tests").exists()
    return folder


@pytest.mark.parametrize("path", SMOKE, ids=[p.stem for p in SMOKE])
def test_smoke_config_trains_two_steps_from_a_plain_clone(path, clone, tmp_path, monkeypatch):
    monkeypatch.chdir(clone)
    cfg = load_config(path.relative_to(ROOT), [f"train.run.output_dir={tmp_path}", "train.run.max_steps=2",
                                               "train.run.progress_bar=false", "train.run.report_to=[jsonl]"])
    trainer = build_trainer(cfg)
    try:
        hist = trainer.train()
    finally:
        getattr(trainer.env, "close", lambda: None)()
    assert len(hist) == 2 and all(h["count/completions"] > 0 for h in hist)


def test_smoke_configs_read_only_shipped_data():
    """A smoke config's data is a shipped fixture (or the env's built-in items), never a path of this machine."""
    for path in SMOKE:
        cfg = load_config(path)
        sources = [s.source for s in (cfg.data.train, cfg.data.eval) if s is not None and s.source is not None]
        if cfg.env.reward_model is not None and cfg.env.reward_model.pairs:
            sources.append(cfg.env.reward_model.pairs)
        assert all(s.startswith("fixture:") for s in sources), (path.name, sources)


def test_the_wheel_ships_every_fixture(tmp_path):
    """``pip install`` puts comarl/data/fixtures into site-packages: [tool.setuptools.package-data] covers them."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"  # a copy, so the build leaves no build/ in the repository
    shutil.copytree(ROOT / "comarl", src / "comarl", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "wheel"), str(src)], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    [wheel] = (tmp_path / "wheel").glob("*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    files = [p for p in FIXTURES.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files
    missing = [p.relative_to(ROOT).as_posix() for p in files if p.relative_to(ROOT).as_posix() not in shipped]
    assert not missing, f"not in the wheel (add them to [tool.setuptools.package-data]): {missing}"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "comarl.data" in declared


@pytest.mark.parametrize("path", FULL, ids=[p.stem for p in FULL])
def test_full_configs_are_valid(path):
    cfg = load_config(path)
    assert cfg.agents and cfg.train.rollout.num_generations >= 2
