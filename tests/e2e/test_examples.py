"""Every script in examples/ runs on a CPU with tiny models and prints what it shows.

Each runs in this process (``runpy``, as ``python examples/<name>.py`` would, from an empty folder) so the
imports are paid once; the line each prints is its result, checked here by a few words.
"""
from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PRINTS = {  # example -> words of the line it prints
    "01_two_agents": "step 3: reward", "02_multi_turn": "turn 2 reward", "03_per_agent_rewards": "|advantage|",
    "04_planner_and_coder": "leaves 8", "05_actor_critic": "explained variance",
    "06_preference_madpo": "step 2:", "07_lora_team": "adapter parameters trained",
    "08_evaluate_save_reload": "reloaded agent0", "09_custom_environment": "env/rhyme",
    "10_langgraph_program": "writer calls per run 2", "clean_magrpo": "step 3: reward",
}


def test_every_example_is_listed_here():
    assert sorted(p.stem for p in EXAMPLES) == sorted(PRINTS)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, tmp_path, monkeypatch):
    if "lora" in path.stem:
        pytest.importorskip("peft", reason="the lora extra is not installed")
    if "langgraph" in path.stem:
        pytest.importorskip("langgraph", reason="LangGraph is not installed (the dev extra has it)")
        pytest.importorskip("fastapi", reason="the gateway extra is not installed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [str(path)])  # as `python examples/<name>.py` has it (no arguments)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(path), run_name="__main__")
    assert PRINTS[path.stem] in out.getvalue(), out.getvalue()
    assert not list(tmp_path.iterdir())  # an example leaves nothing behind in the folder it runs from
