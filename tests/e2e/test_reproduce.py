"""benchmarks/reproduce.py (issue 31): the grid end to end on the tiny model, its resume, and its pieces.

The end-to-end test runs every TL;DR condition for two seeds, 2 optimiser steps each, on the random tiny model
with small settings (2 held-out posts, 1 item x K=2 per step, 4 new tokens), then checks the results rows and the
rendered page, and that a second invocation runs nothing.
"""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import reproduce  # noqa: E402
from repro import grid, render, results, score, tasks  # noqa: E402

SMALL = ["--model", "tiny", "--steps", "2", "--eval-every", "1", "--max-new-tokens", "4", "--heldout-limit", "2",
         "--heldout-samples", "1", "--batch-size", "1", "--num-generations", "2", "--in-process"]


def _run(tmp_path, *extra):
    out = tmp_path / "out"
    args = ["run", "--results", str(out / "results.jsonl"), "--doc", str(out / "docs" / "results.md"),
            "--plots", str(out / "plots"), *SMALL, *extra]
    return reproduce.main(args), out


def test_grid_end_to_end_on_the_tiny_model(tmp_path, capsys):
    rc, out = _run(tmp_path, "--tasks", "tldr", "--seeds", "0,1")
    assert rc == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    expected = {s.key for s in grid.GridPlan(tasks=("tldr",), seeds=(0, 1)).runs()}
    assert {r["key"] for r in rows} == expected and len(rows) == len(expected) == 14  # 9 conditions + 5 seed-1 rows
    for r in rows:
        h = r["heldout"]["reward"]
        assert len(h["per_item"]) == 2 and r["heldout_items"] == 2 and r["heldout"]["samples"] == 1
        assert h["mean"] == pytest.approx(sum(h["per_item"]) / 2)
        assert r["wall_s"] > 0 and r["peak_rss_mb"] > 0 and len(r["load_start"]) == len(r["load_end"]) == 3
        cond = grid.CONDITIONS[r["condition"]]
        assert r["num_agents"] == cond.num_agents and r["trained"] == cond.trained
        if cond.trained:  # 2 steps x 1 item x K=2; before, one eval per step, after
            assert r["steps"] == 2 and r["train_samples"] == 4
            assert r["completions"] == 4 * cond.num_agents and r["samples_per_s"] > 0
            assert [p["samples"] for p in r["curve"]] == [0, 2, 4, 4]
            assert r["curve"][0]["score"] == r["before"] and r["curve"][-1]["score"] == r["heldout"]
            twin = f"tldr/{'single' if cond.num_agents == 1 else 'parallel'}/seed{r['seed']}"  # measured once
            assert r["before"]["from"] == twin
            assert r["before"]["reward"] == next(t for t in rows if t["key"] == twin)["heldout"]["reward"]
            assert "reward/mean" in r["curve"][1]["metrics"]
        else:
            assert r["before"] is None and r["steps"] == 0 and r["train_samples"] == 0
    single = next(r for r in rows if r["key"] == "tldr/single/seed0")
    assert single["max_new_tokens"] == 8  # the single TL;DR writer writes both parts: twice the tokens
    assert "marker_found" in single["heldout"] and "reward_marker_only" in single["heldout"]

    page = (out / "docs" / "results.md").read_text()
    for cond in grid.CONDITIONS.values():
        assert f"| {cond.label} |" in page
    for key in expected:
        assert f"| {key} |" in page
    assert "## TL;DR grid v1 (issue 31)" in page and "| `---` written |" in page
    assert "![tldr: held-out score against training samples](../plots/tldr_heldout.png)" in page
    assert (out / "plots" / "tldr_heldout.png").stat().st_size > 1000
    assert "grid v1's (`benchmarks/results/results.jsonl`: 14 runs)" in page and "Grid v2" not in page
    assert "Why every row here samples with `hf`" in page  # said only when no row sampled with vLLM

    # a second invocation finds every run done and runs nothing; render alone rebuilds the same page
    capsys.readouterr()
    rc, _ = _run(tmp_path, "--tasks", "tldr", "--seeds", "0,1")
    assert rc == 0 and "14 already in" in capsys.readouterr().out
    assert len((out / "results.jsonl").read_text().splitlines()) == 14
    (out / "docs" / "results.md").unlink()
    assert reproduce.main(["render", "--results", str(out / "results.jsonl"), "--doc", str(out / "docs" / "results.md"),
                           "--plots", str(out / "plots")]) == 0
    assert (out / "docs" / "results.md").read_text() == page


def test_a_killed_run_loses_only_itself(tmp_path):
    path = tmp_path / "r.jsonl"
    results.append_row(path, {"key": "tldr/single/seed0", "v": 1})
    with open(path, "a") as f:
        f.write('{"key": "tldr/parallel/seed0", "v"')  # the machine stopped inside the write
    assert results.done_keys(path) == {"tldr/single/seed0"}
    results.append_row(path, {"key": "tldr/parallel/seed0", "v": 2})  # the rerun starts a line of its own
    assert results.done_keys(path) == {"tldr/single/seed0", "tldr/parallel/seed0"}
    path.write_text('{"key": "a", "v": 1}\n{"key": "a", "v": 2}\n')
    assert results.read_rows(path) == [{"key": "a", "v": 2}]  # a rerun of a key replaces the earlier row


def test_grid_order_and_seeds():
    runs = grid.GridPlan().runs()
    keys = [r.key for r in runs]
    assert len(keys) == len(set(keys)) == 9 + 5 * 2 + 5
    assert keys.index("tldr/madpo/seed0") < keys.index("tldr/single/seed1")  # a full first seed first
    assert {r.condition for r in runs if r.seed == 2} == set(grid.MANY_SEEDS)
    assert {r.condition for r in runs if r.task == "coophumaneval"} == set(grid.CODING_CONDITIONS)
    with pytest.raises(SystemExit, match="unknown condition"):
        grid.parse_list("magrpo,mappo", (), tuple(grid.CONDITIONS), "condition")


def test_split_two_by_marker_and_the_reference_fallback():
    assert tasks.split_two("a b\n---\nc d") == ("a b", "c d", True)
    # 20 characters, no marker: cut at int(20 / 3.5) = 5, moved to the space at index 8
    assert tasks.split_two("aa bb cc dd ee ff gg") == ("aa bb", "cc dd ee ff gg", False)
    assert tasks.split_two("") == ("", "", False)


def test_single_writer_env_scores_both_parts_with_the_paper_reward():
    from comarl.envs.registry import get_env

    pair = get_env("tldr").build(2, preset="paper")
    env = tasks.SingleWriterEnv(pair.score)
    item = {"text": "POST: my cat sleeps in the sink"}
    assert "my cat sleeps in the sink" in env.reset(item).prompts[0] and "---" in env.reset(item).prompts[0]
    y1 = "The cat naps in the sink every single afternoon now."
    y2 = ("However, although she has a soft bed and a blanket, the owner's cat still prefers the cold bathroom "
          "sink; therefore the owner wonders whether this unusual habit is normal for cats in general.")
    st = env.reset(item)
    [tr] = env.step_batch([st], [(f"{y1}\n---\n{y2}",)])
    assert tr.reward == pytest.approx(pair.score([y1, y2])[0]) and tr.reward > 1.5
    assert tr.metrics["marker_found"] == 1.0 and tr.metrics["reward_marker_only"] == tr.reward
    [cut] = env.step_batch([st], [(f"{y1} {y2}",)])  # no marker: the fallback cut still earns a reward...
    assert cut.metrics["marker_found"] == 0.0 and cut.reward > 0 and cut.metrics["reward_marker_only"] == 0.0


def test_tldr_split_is_disjoint_and_keeps_the_demo_heldout_posts():
    from comarl.demo import demo_items

    train, heldout = tasks.tldr_items()
    assert (len(train), len(heldout)) == (24, 12)
    assert not {t["prompt"] for t in train} & {h["prompt"] for h in heldout}
    assert [h["prompt"] for h in demo_items("tldr")[1]] == [h["prompt"] for h in heldout[:8]]
    with pytest.raises(AssertionError, match="1 held-out item"):
        tasks.split_check("x", [{"id": 1}, {"id": 2}], [{"id": 2}], "id")


def test_team_score_draws_what_heldout_score_draws():
    """One turn, two agents in parallel: the grid's scorer gives comarl.runs.heldout's numbers exactly."""
    from comarl import AgentConfig, build_agents
    from comarl.envs.registry import get_env
    from comarl.runs.heldout import heldout_score

    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=6, model_kwargs={"seed": i}) for i in range(2)])
    env = get_env("demo_writing").build(2)
    items = get_env("demo_writing").load_items(None, "heldout", None)[:3]
    ours = score.team_score(agents, env, items, samples=2, seed=7, share_prefix=False)
    ref = heldout_score(agents, env, items, samples=2, greedy=False, seed=7)
    assert ours["reward"]["per_item"] == pytest.approx(list(ref.per_item))
    assert ours["reward"]["stderr"] == pytest.approx(ref.stderr)
    assert score.team_score(agents, env, items, seed=7, greedy=True)["samples"] == 1


def test_no_midpoint_note_names_trained_runs_with_only_two_curve_points():
    two = {"key": "t/magrpo/seed0", "trained": True, "curve": [{"samples": 0}, {"samples": 40}]}
    three = {"key": "t/grpo/seed0", "trained": True, "curve": [{"samples": 0}, {"samples": 24}, {"samples": 40}]}
    base = {"key": "t/single/seed0", "trained": False, "curve": [{"samples": 0}]}
    note = render._no_midpoint_note({"magrpo": [two], "grpo": [three], "single": [base]})
    assert note[-1].startswith("No evaluation during training in t/magrpo/seed0 (")
    assert render._no_midpoint_note({"grpo": [three], "single": [base]}) == []


@pytest.mark.slow
def test_coding_task_end_to_end_on_the_tiny_model(tmp_path):
    """CoopHumanEval, paper preset, 2 turns with level_feedback, through the sandbox: a baseline and MAGRPO."""
    rc, out = _run(tmp_path, "--tasks", "coophumaneval", "--seeds", "0", "--conditions", "pipeline,magrpo",
                   "--coding-train-limit", "2")
    assert rc == 0
    rows = {r["condition"]: r for r in results.read_rows(out / "results.jsonl")}
    assert set(rows) == {"pipeline", "magrpo"}
    for r in rows.values():
        assert r["headline"] == "pass_rate" and r["num_turns"] == 2 and len(r["heldout"]["pass_rate"]["per_item"]) == 2
    page = (out / "docs" / "results.md").read_text()
    assert "CoopHumanEval" in page and "code that compiles" in page


def test_before_is_reused_only_from_a_twin_measured_the_same_way():
    from types import SimpleNamespace

    from repro import run

    assert run.untrained_twin(grid.RunSpec("tldr", "magrpo_lora", 2)) == "tldr/parallel/seed2"
    assert run.untrained_twin(grid.RunSpec("tldr", "grpo", 0)) == "tldr/single/seed0"
    assert run.untrained_twin(grid.RunSpec("tldr", "pipeline", 0)) is None
    opts = run.RunOptions(model="tiny", heldout_samples=4)
    task = SimpleNamespace(temperature=0.7, top_p=0.9, heldout_items=[{}] * 12)
    cfgs = [SimpleNamespace(max_new_tokens=48)]
    twin = {"key": "tldr/parallel/seed0", "model": "tiny", "max_new_tokens": 48, "temperature": 0.7, "top_p": 0.9,
            "heldout_items": 12, "heldout": {"samples": 4, "reward": {"mean": 1.0}}}
    assert run.reusable_before(twin, opts, task, cfgs)["from"] == "tldr/parallel/seed0"
    for change in ({"max_new_tokens": 32}, {"model": "smollm2"}, {"heldout_items": 8},
                   {"heldout": {"samples": 2, "reward": {"mean": 1.0}}}):
        assert run.reusable_before({**twin, **change}, opts, task, cfgs) is None
    assert run.reusable_before(None, opts, task, cfgs) is None


def test_generator_choice_keeps_lora_on_hf_on_a_cpu():
    from repro import generators, run

    opts = run.RunOptions(generator="vllm")
    assert generators.generator_for(grid.CONDITIONS["magrpo"], opts) == ("vllm", None)
    assert generators.generator_for(grid.CONDITIONS["magrpo_lora"], opts) == ("hf", generators.LORA_ON_CPU)
    on_gpu = run.RunOptions(generator="vllm", device="cuda")
    assert generators.generator_for(grid.CONDITIONS["magrpo_lora"], on_gpu)[0] == "vllm"
    assert generators.generator_for(grid.CONDITIONS["magrpo_lora"], run.RunOptions())[0] == "hf"
    with pytest.raises(SystemExit, match="--generator"):
        generators.generator_for(grid.CONDITIONS["single"], run.RunOptions(generator="sglang"))


def test_the_twin_is_reused_only_from_the_same_generator_and_old_rows_are_hf():
    from types import SimpleNamespace

    from repro import run

    opts = run.RunOptions(model="tiny", heldout_samples=4)
    task = SimpleNamespace(temperature=0.7, top_p=0.9, heldout_items=[{}] * 12)
    cfgs = [SimpleNamespace(max_new_tokens=48)]
    old = {"key": "tldr/parallel/seed0", "model": "tiny", "max_new_tokens": 48, "temperature": 0.7, "top_p": 0.9,
           "heldout_items": 12, "heldout": {"samples": 4, "reward": {"mean": 1.0}}}  # written before --generator
    assert run.reusable_before(old, opts, task, cfgs, "hf")["from"] == old["key"]
    assert run.reusable_before(old, opts, task, cfgs, "vllm") is None
    assert run.reusable_before({**old, "generator": "vllm"}, opts, task, cfgs, "vllm")["from"] == old["key"]
    assert render.generator_of(old) == "hf" and render._gen_cell({"generator": "hf", "generator_note": "x"}).endswith(
        "(kept: LoRA on CPU)")


VLLM = pytest.mark.skipif(not __import__("importlib").util.find_spec("vllm"),
                          reason="vllm is not installed (run with the vLLM venv: pytest -m vllm)")


@pytest.mark.vllm
@VLLM
def test_grid_samples_with_vllm_on_the_tiny_model(tmp_path):
    """--generator vllm, TL;DR, a prompt-only team and a trained one (2 steps) on the tiny model with hidden size 128
    (a head size vLLM's CPU attention serves): both rows sampled by vLLM, the trained run's rollouts too."""
    rc, out = _run(tmp_path, "--tasks", "tldr", "--seeds", "0", "--conditions", "parallel,magrpo",
                   "--generator", "vllm", "--tiny-hidden-size", "128", "--vllm-kv-gib", "0.25")
    assert rc == 0
    rows = {r["condition"]: r for r in results.read_rows(out / "results.jsonl")}
    assert set(rows) == {"parallel", "magrpo"} and all(r["generator"] == "vllm" for r in rows.values())
    assert all("generator_note" not in r for r in rows.values())
    trained = rows["magrpo"]
    assert trained["steps"] == 2 and [p["samples"] for p in trained["curve"]] == [0, 2, 4, 4]
    assert trained["before"]["from"] == "tldr/parallel/seed0"  # the twin sampled with vllm too
    # the rollouts came from the engines: only engine samples carry the engine-vs-trainer log-prob gap (not at
    # rounding here: TL;DR samples with top-p < 1, and the engine reports the truncated distribution's log-probs)
    assert 0 <= trained["logprob_gap_max"] < 5
    for r in rows.values():
        assert len(r["heldout"]["reward"]["per_item"]) == 2
    page = (out / "docs" / "results.md").read_text()
    assert "`vllm` for 2 runs" in page and "| vllm | " in page and "Why every row here samples" not in page


# ---------------------------------------------------------------- grid v2 (issue 45): folds, records
V2 = ["--folds", "3", "--tasks", "tldr"]


def test_grid_v2_holds_out_every_post_once_per_seed_and_keeps_every_sample(tmp_path):
    rc, out = _run(tmp_path, *V2, "--seeds", "0,1", "--conditions", "single,parallel,pipeline,grpo,magrpo,maac")
    assert rc == 0
    rows = {r["key"]: r for r in results.read_rows(out / "results.jsonl")}
    plan = grid.GridPlan(tasks=("tldr",), seeds=(0, 1), folds=3)
    assert set(rows) == {s.key for s in plan.runs()}
    assert len(rows) == 3 * 2 + 2 * 3 * 2 + 3  # prompt-only x 2 seeds, GRPO/MAGRPO x 3 folds x 2 seeds, MAAC seed 0
    assert "tldr/maac/seed0/fold2" in rows and "tldr/maac/seed1/fold0" not in rows
    for cond in ("grpo", "magrpo"):
        for seed in (0, 1):
            folds = [rows[f"tldr/{cond}/seed{seed}/fold{f}"] for f in range(3)]
            held = [i for r in folds for i in r["heldout_ids"]]
            twin = rows[f"tldr/{'single' if cond == 'grpo' else 'parallel'}/seed{seed}/all"]
            assert sorted(held) == sorted(twin["heldout_ids"]) and len(held) == len(set(held)) == 6
            for r in folds:
                assert not set(r["heldout_ids"]) & set(r["train_ids"]) and len(r["train_ids"]) == 24
                b = r["before"]  # the twin's scores on the fold's posts: the same settings, other draws
                assert b["from"] == twin["key"] and b["draws"] == "other"
                pos = [twin["heldout_ids"].index(i) for i in r["heldout_ids"]]
                assert b["reward"]["per_item"] == [twin["heldout"]["reward"]["per_item"][p] for p in pos]
    for r in rows.values():
        cap = r["max_new_tokens"]
        assert [rec["id"] for rec in r["records"]] == r["heldout_ids"]
        for rec, per in zip(r["records"], r["heldout"]["reward"]["per_item"]):
            assert rec["reference"] and len(rec["samples"]) == 1  # --heldout-samples 1
            assert per == pytest.approx(sum(s["reward"] for s in rec["samples"]) / len(rec["samples"]))
            for s in rec["samples"]:
                [turn] = s["turns"]
                assert len(turn["texts"]) == len(turn["tokens"]) == r["num_agents"]
                assert all(0 <= n <= cap and c == (n == cap) for n, c in zip(turn["tokens"], turn["capped"]))
                if r["num_agents"] == 1:
                    assert {"marker_found", "reward_marker_only"} <= set(s)


def test_grid_v2_runs_each_fold_in_a_child_process(tmp_path):
    out = tmp_path / "out"
    small = [a for a in SMALL if a != "--in-process"]
    rc = reproduce.main(["run", "--results", str(out / "r.jsonl"), "--doc", str(out / "results.md"), "--plots",
                         str(out / "plots"), *small, *V2, "--seeds", "0", "--conditions", "grpo"])
    rows = results.read_rows(out / "r.jsonl")
    assert rc == 0 and sorted(r["key"] for r in rows) == [f"tldr/grpo/seed0/fold{f}" for f in range(3)]
    assert all(r["rss_scope"] == "run" and r["split"] == r["key"].rsplit("/", 1)[1] for r in rows)
    assert all(r["before"].get("from") is None for r in rows)  # no twin in the file: measured in the run


def test_grid_v2_plan_refuses_what_it_does_not_run():
    with pytest.raises(SystemExit, match="TL;DR only"):
        grid.GridPlan(tasks=("tldr", "coophumaneval"), folds=3).runs()
    with pytest.raises(SystemExit, match="not in grid v2"):
        grid.GridPlan(tasks=("tldr",), conditions=("magrpo", "iac"), folds=3).runs()
    keys = [s.key for s in grid.GridPlan(tasks=("tldr",), folds=3).runs()]
    assert len(keys) == 9 + 18 + 3 and keys[:3] == ["tldr/single/seed0/all", "tldr/parallel/seed0/all",
                                                     "tldr/pipeline/seed0/all"]
    assert keys.index("tldr/pipeline/seed2/all") < keys.index("tldr/grpo/seed0/fold0")  # baselines first
    assert keys.index("tldr/magrpo/seed0/fold2") < keys.index("tldr/grpo/seed1/fold0")  # whole seeds next
    assert keys[-3:] == [f"tldr/maac/seed0/fold{f}" for f in range(3)]  # MAAC last
    with pytest.raises(SystemExit, match="--folds"):
        reproduce.main(["run", "--folds", "2", "--results", "/nonexistent/r.jsonl"])


def test_tldr_folds_are_disjoint_and_cover_every_post_once():
    posts = tasks.tldr_posts()
    assert len(posts) == 36 and len({p["post_id"] for p in posts}) == 36
    held = []
    for f in range(3):
        train, heldout = tasks.tldr_fold(f)
        assert (len(train), len(heldout)) == (24, 12)
        assert not {p["text"] for p in train} & {p["text"] for p in heldout}
        held += [p["post_id"] for p in heldout]
    assert sorted(held) == sorted(p["post_id"] for p in posts)
    assert tasks.tldr_fold(1)[1][0]["post_id"] == "demo-01" and tasks.tldr_fold(0)[1][-1]["post_id"] == "sample-09"
    assert tasks.word_runs("A b, c d", 3) == {("a", "b", "c"), ("b", "c", "d")} and tasks.word_runs("a b", 3) == set()
    with pytest.raises(ValueError, match="fold 3"):
        tasks.tldr_fold(3)
