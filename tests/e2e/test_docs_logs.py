"""docs/logs.md documents every metric key a run can log.

Three sources of keys are checked against the page's tables: the keys the source writes (read with ``ast`` by
docs/gen_metric_keys.py, itself checked on a small fake package), the environment metrics each shipped config's
environment gives a scored joint action (no model: canned responses), and the rows real runs write to
``metrics.jsonl`` (the demo config and an IAC, a MAAC, a MADPO and a staged smoke config, 2 steps each on tiny
models, with an evaluation at step 2).
"""
from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

from comarl.config import load_config

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "logs.md"


def _load():
    spec = importlib.util.spec_from_file_location("gen_metric_keys", ROOT / "docs" / "gen_metric_keys.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


keys = _load()
PATTERNS = keys.documented_patterns(PAGE.read_text(encoding="utf-8"))


def undocumented(names) -> list[str]:
    return sorted(k for k in set(names) if not keys.documented(k, PATTERNS))


# ---------------------------------------------------------------- the reader and the matcher


def test_the_scanner_reads_every_form_a_key_is_written_in(tmp_path):
    (tmp_path / "comarl" / "envs").mkdir(parents=True)
    (tmp_path / "comarl" / "update.py").write_text(textwrap.dedent('''
        def step(team, name, turn, metrics, out):
            metrics["tree/nodes"] = 1.0                     # a subscript, a slash
            metrics["epoch"] = 0                            # a subscript of a metrics name, no slash
            out[f"{name}/loss"] = 0.0                       # an f-string
            acc.add_metric(f"reward/turn{turn}", 1.0)
            out.update({"time/step_s": 1.0, "tokens_per_s": 2.0})  # a dict with a slashed key: all its keys
            key = f"route/{agents[a].name}"
            table = {"not_a_metric": 1, "path": "a/b"}      # no slash in a key, not a metrics name
            return {f"count/{k}": v for k, v in out.items()}
    '''))
    (tmp_path / "comarl" / "envs" / "task.py").write_text(textwrap.dedent('''
        def score(parts):
            metrics = {"pass_rate": 1.0, **{f"calls_agent{i}": 1.0 for i in range(2)}}
            metrics.update(helper_defined=1.0)
            return Transition(1.0, True, None, {**metrics, "env_reward": 0.5})
    '''))
    found = {(k.template, k.file) for k in keys.code_keys(tmp_path)}
    upd, env = "comarl/update.py", "comarl/envs/task.py"
    assert found == {("tree/nodes", upd), ("epoch", upd), ("<agent>/loss", upd), ("reward/turn<t>", upd),
                     ("time/step_s", upd), ("tokens_per_s", upd), ("route/<agent>", upd), ("count/<key>", upd),
                     ("env/pass_rate", env), ("env/calls_agent<i>", env), ("env/helper_defined", env),
                     ("env/env_reward", env)}


def test_the_page_tables_are_read_with_their_placeholders():
    page = textwrap.dedent("""
        | Key | Meaning |
        |---|---|
        | `<agent>/loss` | the loss, see `train.loss.clip_low` |
        | `env/r_main`, `env/r_coop` | parts |
        | `step` | the step |
        Text with `not/a_row` outside a table.
    """)
    assert keys.documented_patterns(page) == ["<agent>/loss", "env/r_main", "env/r_coop", "step"]


@pytest.mark.parametrize("key, expected", [
    ("agent0/loss", True), ("writer/clip_ratio/low_mean", True), ("eval/env/level3", True),
    ("eval/writer/truncated", True), ("stage1/spread", True), ("memory/peak_gb_cuda0", True),
    ("env/agent1/parse_fail", True), ("<agent>/clip_ratio/<key>_mean", True), ("count/<key>", True),
    ("agent0/losses", False), ("env/some_new_metric", False), ("eval/nothing", False)
])
def test_a_key_is_documented_by_its_row_or_pattern(key, expected):
    assert keys.documented(key, PATTERNS) is expected


# ---------------------------------------------------------------- the code's keys


def test_every_key_the_code_writes_is_on_the_page():
    found = keys.code_keys(ROOT)
    assert len(found) > 100  # the reader still finds the keys (a broken reader would pass the next line)
    missing = [f"{k.template} ({k.file}:{k.line})" for k in found if not keys.documented(k.template, PATTERNS)]
    assert not missing, f"metric keys the code writes that docs/logs.md does not document: {missing}"


def test_the_built_page_gets_the_generated_index():
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "site_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.with_metric_index(PAGE.read_text(encoding="utf-8"))
    assert keys.INDEX_MARKER not in page
    assert "| `<agent>/grad_norm` | `comarl/updates/dpo.py`, `comarl/updates/policy_gradient.py` |" in page


# ---------------------------------------------------------------- the environments' metrics

CONFIGS = sorted(p.relative_to(ROOT) for p in (ROOT / "configs").glob("**/*.yaml")
                 if p.name.endswith("_smoke.yaml") or p.parent.name == "demo")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_environment_metric_of_a_config_is_on_the_page(path, monkeypatch):
    """The environment of each config scores canned joint actions of its first items: every metric it gives
    (logged as ``env/<name>``) is documented. No model is built; a MARLHF config's reward model is left out
    (its own ``env/env_reward`` is checked with the code's keys)."""
    from comarl.experiment import build_env, load_items

    monkeypatch.chdir(ROOT)
    cfg = load_config(path)
    cfg.env.reward_model = None
    try:
        items = load_items(cfg, "train")[:2]
    except Exception as e:  # noqa: BLE001 - benchmark data this machine does not have
        pytest.skip(f"{path}: data not available ({e})")
    env = build_env(cfg)
    n = env.num_agents
    try:
        answers = [("",) * n, tuple(f"Answer {i}: the plan is to walk, then read a book." for i in range(n)),
                   ("def f(x):\n    return x\n",) * n]
        states = [env.reset(item) for item in items for _ in answers]
        transitions = env.step_batch(states, [a for _ in items for a in answers])
    finally:
        getattr(env, "close", lambda: None)()
    logged = {f"env/{name}" for tr in transitions for name in tr.metrics}
    assert not undocumented(logged), f"{path}: environment metrics docs/logs.md does not document"


# ---------------------------------------------------------------- real runs

RUNS = ["configs/demo/writing.yaml", "configs/ac/tldr_iac_smoke.yaml", "configs/ac/tldr_maac_smoke.yaml",
        "configs/preference/tldr_madpo_smoke.yaml", "configs/teams/tldr_editor_smoke.yaml"]


@pytest.mark.parametrize("path", RUNS, ids=[Path(p).stem for p in RUNS])
def test_every_key_a_run_logs_is_on_the_page(path, tmp_path, monkeypatch):
    from comarl.experiment import build_trainer

    monkeypatch.chdir(ROOT)
    cfg = load_config(path, [f"train.run.output_dir={tmp_path}", "train.run.max_steps=2", "train.run.eval_steps=2",
                             "train.run.batch_size=2", "train.rollout.num_generations=2",
                             "train.run.progress_bar=false", "train.run.report_to=[jsonl]"])
    trainer = build_trainer(cfg)
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    logged = {k for row in rows for k in row}
    assert len(rows) == 2 and "reward/mean" in logged
    assert any(k.startswith("eval/") for k in logged) == bool(trainer.eval_items)
    assert not undocumented(logged), f"{path} logs keys docs/logs.md does not document"
