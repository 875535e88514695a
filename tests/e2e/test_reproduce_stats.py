"""Grid v2's statistics, rescoring and verdicts (issue 45), worked by hand; and the page rendered from rows built
here (no model), so every number it prints is known."""
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from repro import analysis, render, render_coding, rescore, stats  # noqa: E402


# ---------------------------------------------------------------- Student's t
def test_t_distribution_by_closed_forms():
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    for t in (-1.3, 0.0, 0.5, 2.0):  # df 2: 1/2 + t / (2 sqrt(2 + t^2))
        assert stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)))
    assert stats.t_quantile(0.975, 2) == pytest.approx(2 * math.sqrt(2) * 0.95 / math.sqrt(4 * (1 - 0.95 ** 2)))
    assert stats.t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert stats.t_quantile(0.025, 2) == pytest.approx(-stats.t_quantile(0.975, 2))
    assert stats.betainc(1.0, 1.0, 0.3) == pytest.approx(0.3)  # uniform
    assert stats.betainc(2.0, 1.0, 0.5) == pytest.approx(0.25)  # x^2
    with pytest.raises(ValueError, match="q must be"):
        stats.t_quantile(1.0, 3)


# ---------------------------------------------------------------- the crossed model
def test_crossed_model_two_seeds_two_posts_by_hand():
    # seeds x posts [[1, 2], [3, 6]]: mean 3; seed means 1.5, 4.5 -> MS_S = 2 * (2.25 + 2.25) = 9; post means 2, 4
    # -> MS_P = 2 * (1 + 1) / 1 = 4; residuals +-0.5 -> MS_E = 1 on 1 df. Var = (9 + 4 - 1) / 4 = 3;
    # Satterthwaite df = 12^2 / (81 + 16 + 1) = 1.469
    c = stats.crossed_mean({(0, "a"): 1, (0, "b"): 2, (1, "a"): 3, (1, "b"): 6})
    assert (c.mean, c.se ** 2, c.seed_term) == (3.0, pytest.approx(3.0), True)
    assert c.df == pytest.approx(144 / 98)
    assert c.ms == {"seeds": 9.0, "posts": 4.0, "residual": 1.0}


def test_crossed_model_with_folds_by_hand():
    # folds {p1, p2}, {p3, p4}; seed 0: 1 3 2 2, seed 1: 3 5 2 6. Mean 3; seed means 2, 4 -> MS_S = 4 * 2 = 8;
    # post means 2 4 2 4, fold means 3 3 -> MS_P = 2 * 4 / (4 - 2) = 4; residuals d - cell - post + fold:
    # 0 0 1 -1 / 0 0 -1 1 -> MS_E = 4 / ((2 - 1)(4 - 2)) = 2. Var = (8 + 4 - 2) / 8 = 1.25;
    # df = 10^2 / (8^2 / 1 + 4^2 / 2 + 2^2 / 2) = 100 / 74
    vals = {"p1": (1, 3), "p2": (3, 5), "p3": (2, 2), "p4": (2, 6)}
    table = {(s, p): v[s] for p, v in vals.items() for s in (0, 1)}
    c = stats.crossed_mean(table, {"p1": 0, "p2": 0, "p3": 1, "p4": 1})
    assert c.mean == 3.0 and c.se ** 2 == pytest.approx(1.25) and c.df == pytest.approx(100 / 74)
    assert c.ms == {"seeds": 8.0, "posts": 4.0, "residual": 2.0}
    # one seed: over posts within folds only (seed 0: fold means 2, 2 -> MS_P = (1 + 1 + 0 + 0) / 2 = 1, var 1/4)
    one = stats.crossed_mean({k: v for k, v in table.items() if k[0] == 0}, {"p1": 0, "p2": 0, "p3": 1, "p4": 1})
    assert (one.mean, one.se, one.df, one.seed_term) == (2.0, 0.5, 2.0, False)


def test_crossed_model_drops_a_component_estimated_below_zero():
    # seed means equal (MS_S = 0 < MS_E): Var = (0 + max(MS_P - MS_E, 0) + MS_E) / SP = MS_P / SP, df = df_P.
    # [[1, 3], [3, 1]]: post means 2, 2 -> MS_P = 0; residuals +-1 -> MS_E = 4; Var = 4 / 4 = 1, df = 1
    c = stats.crossed_mean({(0, "a"): 1, (0, "b"): 3, (1, "a"): 3, (1, "b"): 1})
    assert c.se == pytest.approx(1.0) and c.df == pytest.approx(1.0)


def test_crossed_model_refuses_an_incomplete_or_unbalanced_table():
    with pytest.raises(ValueError, match="1 \\(seed, post\\) cells missing"):
        stats.crossed_mean({(0, "a"): 1, (0, "b"): 2, (1, "a"): 3})
    with pytest.raises(ValueError, match="unequal size"):
        stats.crossed_mean({(0, "a"): 1, (0, "b"): 2, (0, "c"): 3}, {"a": 0, "b": 0, "c": 1})


# ---------------------------------------------------------------- tests, corrections, verdicts
def test_holm_by_hand():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert stats.holm([]) == []


def test_compare_pairs_by_post_and_seed():
    b = {(s, p): 10.0 * s + i for s in (0, 1) for i, p in enumerate("ab")}  # big seed and post effects...
    a = {k: v + d for (k, v), d in zip(sorted(b.items()), (1, 2, 3, 6))}  # ...cancel in the pairing
    c = stats.compare(a, b)
    assert (c.diff, c.se ** 2, c.cells, c.seeds) == (3.0, pytest.approx(3.0), 4, 2)
    q = stats.t_quantile(0.975, 144 / 98)
    assert (c.lo, c.hi) == (pytest.approx(3 - q * math.sqrt(3)), pytest.approx(3 + q * math.sqrt(3)))
    assert c.p == pytest.approx(1 - stats.t_cdf(3 / math.sqrt(3), 144 / 98))


def _cmp(diff, lo, hi):
    return stats.Comparison(diff, 0.1, 10, lo, hi, 0.0, 10, 2, True)


def test_verdict_needs_the_interval_the_minimum_and_holm():
    assert stats.verdict(_cmp(0.5, 0.3, 0.7), 0.01, 0.1) == "holds"
    assert stats.verdict(_cmp(0.05, 0.01, 0.09), 0.01, 0.1) == "not resolved (below the minimum 0.1)"
    assert stats.verdict(_cmp(0.5, -0.1, 1.1), 0.01, 0.1) == "not resolved (interval includes 0)"
    assert stats.verdict(_cmp(0.5, 0.3, 0.7), 0.2, 0.1) == "not resolved (Holm p 0.200)"
    assert stats.verdict(_cmp(-0.5, -0.7, -0.3), 1.0, 0.1) == "reversed"
    assert stats.verdict(_cmp(-0.05, -0.09, -0.01), 1.0, 0.1).startswith("not resolved (below")


def test_smallest_detectable_difference():
    # normal limit: (z_0.95 + z_0.8) * se = (1.6449 + 0.8416) * 0.1
    assert stats.smallest_detectable(0.1, math.inf) == pytest.approx(0.24865, abs=1e-4)
    assert render_coding.smallest_detectable_at(0.2, 16) == pytest.approx(
        (stats.t_quantile(0.95, 15) + stats.t_quantile(0.8, 15)) * 0.05)
    n = render_coding.problems_needed(0.2)  # the normal approximation says (2.4865 * 0.2 / 0.05)^2 = 98.9
    assert 99 <= n <= 101 and render_coding.smallest_detectable_at(0.2, n - 1) > 0.05


# ---------------------------------------------------------------- rescoring
def test_summary_sentence_and_rouge_l_by_hand():
    assert rescore.summary_sentence("The cat naps. It sleeps.") == "The cat naps."
    echo = "SUBREDDIT: r/cats\nTITLE: My cat naps here\nPOST: She naps in the sink."  # labels dropped, short skipped
    assert rescore.summary_sentence(echo) == "My cat naps here"
    assert rescore.summary_sentence("Summary: Cat naps in sinks!\nMore") == "Cat naps in sinks!"
    assert rescore.summary_sentence("Cat naps\nin the sink") == "in the sink"  # 2 words are no sentence
    assert rescore.summary_sentence("A b --- c d e.") == ""  # nothing of 3 words before the marker
    assert rescore.summary_sentence("v1.5 is out. Yes") == "v1.5 is out."  # a point inside a word ends nothing
    assert rescore.rouge_l("the cat sat", "the cat sat on the mat") == pytest.approx(2 / 3)  # P 1, R 1/2
    assert rescore.rouge_l("", "x") == 0.0


def test_single_writer_scored_three_ways_and_a_team_needs_no_marker():
    turn = {"texts": ["Cat naps in the sink. More words follow here."], "tokens": [9], "capped": [False]}
    unmarked = {"turns": [turn], "reward": 2.5, "reward_marker_only": 0.0, "marker_found": 0.0}
    s = rescore.sample_scores(unmarked, "cat naps in the sink every day", 1)
    assert s["reward"] == 2.5 and s["marker"] == 0.0
    assert s["rouge"] == pytest.approx(2 * 5 / 7 * 1 / (5 / 7 + 1))  # LCS 5 of 5 candidate, 7 reference words
    team = {"turns": [{"texts": ["Cat naps in the sink.", "Long part."], "tokens": [6, 3], "capped": [False] * 2}],
            "reward": 1.2}
    assert rescore.sample_scores(team, "cat naps in the sink every day", 2)["marker"] == 1.2


def test_lengths_per_agent():
    def sample(tokens, capped):
        return {"turns": [{"texts": ["x", "y"], "tokens": tokens, "capped": capped}], "reward": 0.0}

    row = {"max_new_tokens": 48, "records": [{"id": "p", "samples": [sample([48, 10], [True, False]),
                                                                    sample([20, 48], [False, True])]}]}
    ln = rescore.lengths([row])
    assert ln == {"mean_tokens": [34.0, 29.0], "capped": [0.5, 0.5], "cap": 48, "n": 2}
    assert rescore.lengths([{"max_new_tokens": 4, "records": []}]) == {}


# ---------------------------------------------------------------- verdicts and the page from built rows
POSTS = [f"p{i}" for i in range(6)]  # fold i % 3


def _row(cond, seed, split, scores, agents, tokens=(10, 20), cap=48, marker=None):
    """A v2 row whose post scores are ``scores[post]`` (one sample each)."""
    ids = POSTS if split == "all" else [p for i, p in enumerate(POSTS) if i % 3 == int(split[4:])]
    recs = []
    for p in ids:
        s = {"turns": [{"texts": ["Cat naps." if agents == 1 else "Cat naps.", "More."][:agents],
                        "tokens": list(tokens[:agents]), "capped": [t == cap for t in tokens[:agents]]}],
             "reward": scores[p]}
        if agents == 1:
            s.update(marker_found=float(bool(marker)), reward_marker_only=scores[p] if marker else 0.0)
        recs.append({"id": p, "reference": "cat naps", "samples": [s]})
    trained = cond in ("grpo", "magrpo")
    per = [scores[p] for p in ids]
    head = {"reward": {"mean": sum(per) / len(per), "stderr": 0.1, "per_item": per}, "samples": 1}
    return {"key": f"tldr/{cond}/seed{seed}/{split}", "task": "tldr", "condition": cond, "seed": seed, "split": split,
            "num_agents": agents, "trained": trained, "headline": "reward", "max_new_tokens": cap, "model": "tiny",
            "temperature": 0.7, "top_p": 0.9, "heldout_ids": ids, "records": recs, "heldout": head,
            "before": {**head, "from": "x"} if trained else None, "steps": 10 if trained else 0, "lr": 2e-5,
            "curve": [{"samples": 0, "score": head}, {"samples": 160, "score": head}], "wall_s": 100.0,
            "s_per_step": 70.0 if trained else None, "peak_rss_mb": 1000.0, "load_start": [1.0, 1.0, 1.0],
            "load_end": [2.0, 2.0, 2.0], "threads": 1, "finished": "now", "train_samples": 160 if trained else 0}


def _grid(seeds=(0, 1, 2), magrpo_folds=3):
    rows = []
    for s in seeds:
        base = {p: 0.5 + 0.1 * i + 0.05 * s for i, p in enumerate(POSTS)}
        rows.append(_row("parallel", s, "all", base, 2))
        rows.append(_row("single", s, "all", {p: v + 1.5 for p, v in base.items()}, 1, tokens=(40,), cap=96))
        for f in range(magrpo_folds if s == seeds[-1] else 3):
            up = {p: v + 1.0 + (0.02 if i % 2 else -0.02) for i, (p, v) in enumerate(base.items())}
            rows.append(_row("magrpo", s, f"fold{f}", up, 2, tokens=(30, 48)))
    return rows


def test_verdicts_pair_by_post_and_seed_with_holm_over_the_task():
    rows = _grid()
    tables = analysis.condition_tables(rows, set(POSTS))
    assert tables["magrpo"].seeds == [0, 1, 2] and len(tables["magrpo"].rows) == 9
    vs = analysis.verdicts(tables, analysis.fold_of_post(rows))
    by = {(v.better, v.worse, v.scoring): v for v in vs}
    assert len(vs) == 6  # magrpo vs parallel and vs single, three scorings each
    up = by[("magrpo", "parallel", "reward")]
    assert up.comparison.diff == pytest.approx(1.0) and up.word == "holds"
    assert by[("magrpo", "single", "reward")].word == "reversed"  # -0.5, the single writer's fallback score
    assert by[("magrpo", "single", "marker")].word == "holds"  # +1.0: no marker, the single writer scores 0
    assert by[("magrpo", "parallel", "rouge")].comparison.diff == 0.0  # the same summary sentence
    assert by[("magrpo", "parallel", "rouge")].word.startswith("not resolved")
    raw = [v.comparison.p for v in vs]
    assert [v.p_holm for v in vs] == pytest.approx(stats.holm(raw))  # one family: the task's six tests


def test_a_seed_counts_only_with_all_its_folds():
    tables = analysis.condition_tables(_grid(magrpo_folds=2), set(POSTS))
    assert tables["magrpo"].seeds == [0, 1] and tables["magrpo"].partial == {2: 2}
    one = analysis.verdicts(analysis.condition_tables(_grid(seeds=(0,)), set(POSTS)), {})
    assert one and all(v.p_holm is None and v.word.startswith("no verdict") for v in one)


def test_page_from_v2_rows_shows_verdicts_lengths_and_the_progress(tmp_path):
    rows = _grid(magrpo_folds=2)
    render.render(rows, tmp_path / "docs" / "results.md", tmp_path / "plots", v2_path="r2.jsonl")
    page = (tmp_path / "docs" / "results.md").read_text()
    assert "(`benchmarks/results/r2.jsonl`: 14 of 30 runs, in progress). Every" in page and "grid v1's" not in page
    assert "Runs done: 14 of 30; the grid is still running" in page
    assert "| A (the paper: A > B) | B | scoring |" in page and "s.e. of the crossed post x seed model" in page
    assert "| 2 agents, MAGRPO | 2 agents in parallel, prompt only | reward (fallback split) | " in page
    assert "2 agents, MAGRPO seed 2 (2 of 3 folds)" in page  # not yet counted, and said
    assert "Holm-corrected over this task's 6 tests" in page
    # the whole seeds 0 and 1 (their 6 runs), the partial seed named
    assert "| 2 agents, MAGRPO | 0, 1; seed 2: 2 of 3 folds, not counted | 6 | " in page
    assert "30.0 / 48.0 (48) | 0% / 100% |" in page  # tokens per agent and the share at the cap
    assert "agent 2 20 -> 48 tokens, 0% -> 100% at the cap" in page
    assert (tmp_path / "plots" / "tldr_v2_heldout.png").stat().st_size > 1000
