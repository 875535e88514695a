"""Both presets of every coding and writing benchmark behave as recorded before presets became records.

Issue #28, item 5 moved the ``paper`` preset's code out of the environment classes into preset records.
This test pins what the environments did before that move, bit for bit: for each case below (a benchmark,
a preset, a team size and mode, a feedback mode and a number of turns, a few items and a fixed set of
responses), the first prompts, and per turn the sandbox jobs, each transition's reward, ``done``, metrics
and next state (prompts, info, history).

The fixture ``tests/fixtures/presets_regression.json`` was recorded with the code before the change (commit
000420f: the environment classes with their ``_paper_*`` methods, after one fix: preset paper with feedback
``diagnosis`` used to raise on turn 1). The ``default`` cases were recorded again for issue #37 (hidden tests,
each agent's code in its own program, ClassEval's pinned methods and silent assertions); the ``paper`` cases
replayed unchanged against the old recording before that, so the paper preset is still what 000420f did::

    PYTHONPATH=$PWD python tests/envs/coding/test_presets_regression.py --record

Recording runs every job in the real sandbox and stores the reports it gave. The test replays those reports
through a fake runner that first checks each job is one that was recorded (so the job the environment
builds is unchanged: program, tests, setup, exposed name, packages), which keeps it fast (no sandbox) and
deterministic; the sandbox itself is tested elsewhere. Texts (prompts, jobs, states) are stored as digests
to keep the fixture small; ``--record --full PATH`` also writes them in full, for diffing two versions.
Numbers (rewards, metrics) are stored as they are and compared with ``==``.

The ``expert_edits`` mode gets a fake expert whose edits name a digest of what it was asked, so the
requests are checked too.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from comarl.envs.coding.classeval import ClassEvalEnv
from comarl.envs.coding.data import load_classeval_items, load_function_items
from comarl.envs.coding.function_env import FunctionCodingEnv
from comarl.envs.registry import get_env

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT.parent / "shared" / "data"
FIXTURE = ROOT / "tests" / "fixtures" / "presets_regression.json"


# ---------------------------------------------------------------- digests

def digest(obj: Any) -> str:
    """Short sha256 of ``obj`` as canonical JSON (tuples as lists)."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def job_record(job) -> dict[str, Any]:
    out = {"program": job.program, "tests": list(job.tests), "setup": job.setup,
           "entry_points": list(job.entry_points), "packages": list(job.packages)}
    if job.helper is not None:  # only where set, so the jobs of 000420f keep their digests
        out["helper"] = [job.helper.program, job.helper.name, job.helper.ablate]
    if job.pinned:
        out["pinned"] = [[p.class_name, p.attribute, p.first_line, p.last_line] for p in job.pinned]
    return out


def report_record(rep) -> dict[str, Any]:
    out = dataclasses.asdict(rep)
    out["duration_s"] = 0.0
    out["isolation"] = list(out["isolation"])
    return out


def report_from(record: dict[str, Any]):
    from comarl.sandbox import TestReport
    return TestReport(**{**record, "isolation": tuple(record["isolation"])})


# ---------------------------------------------------------------- fake components

class ReplayRunner:
    """The sandbox runner's contract (``run(jobs) -> reports``, ``close()``) with the recorded reports.

    A job that was not recorded is the regression this file exists to catch: it raises, naming the case.
    """

    def __init__(self, reports: dict[str, dict[str, Any]], case: str):
        self.reports, self.case = reports, case
        self.calls: list[list[str | None]] = []

    def run(self, jobs):
        keys = [None if j is None else digest(job_record(j)) for j in jobs]
        self.calls.append(keys)
        missing = [i for i, k in enumerate(keys) if k is not None and k not in self.reports]
        if missing:
            raise AssertionError(f"{self.case}: sandbox job(s) {missing} of this batch differ from the recorded ones")
        return [None if k is None else report_from(self.reports[k]) for k in keys]

    def close(self) -> None:
        pass


class RecordingRunner:
    """Runs jobs in the real sandbox (once per distinct job) and keeps the reports by job digest."""

    def __init__(self, real, reports: dict[str, dict[str, Any]], full_jobs: dict[str, Any] | None):
        self.real, self.reports, self.full_jobs = real, reports, full_jobs
        self.calls: list[list[str | None]] = []

    def run(self, jobs):
        keys = [None if j is None else digest(job_record(j)) for j in jobs]
        self.calls.append(keys)
        todo = {k: j for k, j in zip(keys, jobs) if k is not None and k not in self.reports}
        if todo:
            for k, rep in zip(todo, self.real.run(list(todo.values()))):
                self.reports[k] = report_record(rep)
                if self.full_jobs is not None:
                    self.full_jobs[k] = job_record(todo[k])
        return [None if k is None else report_from(self.reports[k]) for k in keys]

    def close(self) -> None:
        pass


def no_edits(prompts):
    """The injected expert helper of the ``expert_edits`` cases (``FakeExpert`` replaces its ``Expert`` anyway)."""
    return [""] * len(prompts)


class FakeExpert:
    """``Expert.edits``'s contract: (helper edits, main edits) per request; no edits for some requests."""

    def __init__(self):
        self.requests: list[dict[str, str]] = []

    def edits(self, requests):
        out = []
        for r in requests:
            self.requests.append(dict(r))
            d = digest(dict(r))
            out.append(("", "") if int(d, 16) % 3 == 0 else (f"helper edit {d[:8]}", f"main edit {d[8:16]}"))
        return out


# ---------------------------------------------------------------- items and responses

FUNCTION_DATA = {  # name -> (dataset, source under DATA, split, item indices)
    "humaneval": ("humaneval", "humaneval", None, (0, 38)),
    "mbpp_sanitized": ("mbpp", "mbpp/sanitized-mbpp.json", "test", (0, 29)),
    "mbpp_openmlrl": ("mbpp", "mbpp_openmlrl", None, (0, 29)),
    "coophumaneval": ("coophumaneval", "coophumaneval", None, (0, 1)),
}

# solutions for the items whose rows carry none (written here; MBPP's are the sanitized rows' code)
SOLUTIONS = {
    "x_or_y": "def x_or_y(n, x, y):\n    if n < 2:\n        return y\n    for k in range(2, int(n ** 0.5) + 1):\n"
              "        if n % k == 0:\n            return y\n    return x\n",
    "will_it_fly": "def will_it_fly(q, w):\n    return q == q[::-1] and sum(q) <= w\n",
}


def _arg_names(prompt: str, entry_point: str) -> list[str]:
    tree = ast.parse(prompt)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == entry_point)
    return [a.arg for a in fn.args.args]


def function_responses(item: dict[str, Any], reference: str) -> dict[str, tuple[str, str]]:
    """Named joint responses (helper text, main text); single mode reads the main text."""
    ep = item["entry_point"]
    names = _arg_names(item["prompt"], ep)
    args = ", ".join(names)
    aux_ref = reference.replace(f"def {ep}(", "def aux(")
    return {
        "reference": ("", reference),
        "wrapper": (aux_ref, f"def {ep}({args}):\n    return aux({args})\n"),
        "uses_helper": (aux_ref, f"def {ep}({args}):\n    result = aux({args})\n    if result is None:\n"
                                 f"        return None\n    return result\n"),
        # ``aux (x)``: one space, a one-character argument: the only form the paper's check sees
        "ignores_result": (aux_ref, f"def {ep}({args}):\n    x = None\n    try:\n        aux (x)\n"
                                    f"    except Exception:\n        pass\n    return aux({args})\n"),
        "missing_helper": ("The helper is left as an exercise.", f"def {ep}({args}):\n    return aux({args})\n"),
        "wrong": ("def aux(x):\n    return x\n", f"def {ep}(*args):\n    return None\n"),
        "empty": ("", ""),
        "syntax_error": ("def aux(:\n    return\n", f"def {ep}({args})\n    return 1\n"),
        "fenced_prose": (f"Here is the helper:\n```python\n{aux_ref}\n```\nIt works.",
                         f"Sure! Here it is.\n```python\n{reference}\nprint({ep})\n```\nHope this helps."),
        "no_return": ("def aux(x):\n    pass\n", f"def {ep}({args}):\n    print({args})\n"),
    }


def _methods(solution: str, class_name: str) -> dict[str, str]:
    tree = ast.parse(solution)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    lines = solution.splitlines()
    out = {}
    for n in cls.body:
        if isinstance(n, ast.FunctionDef):
            start = min([d.lineno for d in n.decorator_list] + [n.lineno]) - 1
            out[n.name] = "\n".join(lines[start:n.end_lineno])
    return out


def classeval_responses(item: dict[str, Any], n: int) -> dict[str, tuple[str, ...]]:
    """Named joint responses of ``n`` agents for one ClassEval item."""
    name, methods = item["class_name"], list(item["methods"])
    src = _methods(item["solution_code"], name)
    in_class = lambda ms: f"class {name}:\n" + "\n\n".join(src[m] for m in ms) + "\n" if ms else ""  # noqa: E731
    bare = lambda ms: "\n\n".join(textwrap_dedent(src[m]) for m in ms)  # noqa: E731
    alternate = [methods[i::n] for i in range(n)]
    one_param = [m for m in methods if len(ast.parse(textwrap_dedent(src[m])).body[0].args.args) == 1]
    by_params = [one_param, [m for m in methods if m not in one_param]] + [[] for _ in range(max(0, n - 2))]
    if n == 1:
        by_params = [methods]
    wrong = [f"class {name}:\n" + "\n\n".join(f"    def {m}(self, *args):\n        return None" for m in ms)
             for ms in alternate]
    return {
        "reference_alternate": tuple(in_class(ms) for ms in alternate),
        "reference_by_params": tuple(bare(ms) for ms in by_params[:n]),
        "all_to_first": (item["solution_code"],) + ("",) * (n - 1),
        "everyone_all": (item["solution_code"],) * n,
        "wrong": tuple(wrong),
        "empty": ("",) * n,
        "syntax_error": (f"class {name}:\n    def {methods[0]}(self:\n        return 1\n",)
                        + tuple(in_class(ms) for ms in alternate[1:]),
        "prints": (item["solution_code"] + "\nprint('loaded')\n",) + tuple(in_class(ms) for ms in alternate[1:]),
        "fenced": tuple(f"Here are my methods.\n```python\n{in_class(ms)}```\nDone." for ms in alternate),
        "third_party_import": ("import requests\nimport numpy\n" + item["solution_code"],) + ("",) * (n - 1),
    }


def textwrap_dedent(text: str) -> str:
    import textwrap
    return textwrap.dedent(text)


_WORDS = ("the model learns a policy for each agent and the team reward ties them together however "
          "therefore cooperation matters because every agent writes one part for example the summary "
          "in addition results show that training improves quality moreover first second finally "
          "data method analysis experiment baseline evaluation transformer attention gradient").split()


_OTHER = ("river mountain forest valley ocean desert island village harbor castle bridge garden meadow "
          "winter summer autumn spring morning evening night thunder rain snow wind cloud stone").split()

_SYNTH = tuple(f"{a}{b}ion" for a in "bcdfgklmnprstvz" for b in "aeiou")  # 75 content words, no stop word


def words(n: int, offset: int = 0, step: int = 1, vocabulary: tuple[str, ...] | list[str] = _WORDS) -> str:
    """``n`` words from a fixed list, ending in a full stop (no randomness)."""
    return " ".join(vocabulary[(offset + i * step) % len(vocabulary)] for i in range(n)) + "."


WRITING_PARTS = {  # two-part joint texts
    "balanced": (words(12, 0), words(30, 5, 3)),
    "reversed": (words(30, 5, 3), words(12, 0)),
    "same": (words(20, 2), words(20, 2)),
    "empty_second": (words(12, 0), ""),
    "degenerate": ("ok " * 9, "ok " * 25),
    "too_short": (words(3), words(9, 7)),
    "long": (words(150, 1, 7), words(210, 3, 5)),
    "long_ratio": (words(140, 4, 11), words(250, 9, 13)),
    "too_long": (words(300, 2), words(600, 3)),
    "low_overlap": (words(12, 0), words(4, 3) + " " + words(26, 1, 3, _OTHER)),
    "low_overlap_long": (words(150, 1, 7), words(8, 2) + " " + words(200, 3, 5, _OTHER)),
    "disjoint": (words(14, 0, 5, _OTHER), words(36, 2, 7)),
    "tiny_overlap": (words(12, 0, 1, _SYNTH), words(40, 11, 1, _SYNTH)),  # one shared word of 51
    "high_overlap": (words(12, 0, 1, _SYNTH), words(12, 0, 1, _SYNTH) + " however " + words(8, 12, 1, _SYNTH)),
    "mid_overlap_long": (words(150, 1, 7), words(30, 2) + " " + words(200, 3, 5, _OTHER)),
}
WRITING_THIRD = words(180, 6, 17)
ARXIV_ITEMS = [{"text": words(60, 1, 3), "abstract": words(60, 1, 3)},
               {"text": words(90, 8, 5), "abstract": words(90, 8, 5)}]


# ---------------------------------------------------------------- cases

def _function_cases() -> list[dict[str, Any]]:
    kinds = ["reference", "wrapper", "uses_helper", "ignores_result", "missing_helper", "wrong", "empty",
             "syntax_error", "fenced_prose", "no_return"]
    single_kinds = ["reference", "wrong", "empty", "syntax_error", "fenced_prose", "missing_helper"]
    specs = [  # (label, num_agents, args, turns, kinds)
        ("comarl_helper_1turn", 2, {}, 1, kinds),
        ("comarl_helper_3turn_diagnosis_all", 2, {"max_turns": 3, "feedback": "diagnosis", "history": "all"}, 3, kinds),
        ("comarl_helper_3turn_plain", 2, {"max_turns": 3, "feedback": "plain"}, 3, kinds),
        ("comarl_single_2turn_diagnosis", 1, {"max_turns": 2}, 2, single_kinds),
        ("paper_helper_1turn", 2, {"preset": "paper"}, 1, kinds),
        ("paper_single_1turn", 1, {"preset": "paper"}, 1, single_kinds),
        ("paper_single_2turn_level_feedback", 1, {"preset": "paper", "max_turns": 2, "feedback": "level_feedback"},
         2, single_kinds),
        ("paper_helper_3turn_level_feedback_slice2", 2,
         {"preset": "paper", "max_turns": 3, "feedback": "level_feedback", "sandbox_slice": 2}, 3, kinds),
    ]
    for mode in ("level_passed", "passed", "plain", "diagnosis"):
        specs.append((f"paper_helper_2turn_{mode}", 2, {"preset": "paper", "max_turns": 2, "feedback": mode}, 2, kinds))
    specs.append(("paper_helper_2turn_expert_edits", 2, {"preset": "paper", "max_turns": 2, "feedback": "expert_edits",
                                                         "expert": no_edits}, 2, kinds))
    specs.append(("paper_helper_2turn_level_feedback_slice_last", 2,
                  {"preset": "paper", "max_turns": 2, "feedback": "level_feedback", "sandbox_slice": -1}, 2, kinds))
    out = []
    for data in FUNCTION_DATA:
        for label, n, args, turns, ks in specs:
            out.append({"name": f"{data}/{label}", "kind": "function", "data": data, "num_agents": n, "args": args,
                        "turns": turns, "responses": ks})
    out.append({"name": "humaneval/comarl_helper_weights_prompts", "kind": "function", "data": "humaneval",
                "num_agents": 2, "turns": 2, "responses": kinds,
                "args": {"max_turns": 2, "rewards": {"tests": 2.0, "normalize": True},
                         "prompts": {"main": "Write {entry_point} ({helper} exists):\n{prompt}",
                                     "revise": "\nBefore: {previous}\nNotes: {feedback}\n"}}})
    out.append({"name": "coophumaneval/paper_helper_prompts_aux_name", "kind": "function", "data": "coophumaneval",
                "num_agents": 2, "turns": 2, "responses": kinds,
                "args": {"preset": "paper", "max_turns": 2, "feedback": "level_feedback",
                         "prompts": {"helper": "Helper {helper} for {entry_point}:\n{prompt}"}}})
    return out


def _classeval_cases() -> list[dict[str, Any]]:
    kinds = ["reference_alternate", "reference_by_params", "all_to_first", "everyone_all", "wrong", "empty",
             "syntax_error", "prints", "fenced", "third_party_import"]
    specs = [
        ("comarl_2_alternate_1turn", 2, {}, 1),
        ("comarl_2_halves_3turn_diagnosis_all", 2, {"split": "halves", "max_turns": 3, "history": "all"}, 3),
        ("comarl_1_3turn_plain", 1, {"max_turns": 3, "feedback": "plain"}, 3),
        ("comarl_3_alternate_1turn_weights", 3, {"rewards": {"overlap": 1.0, "normalize": True}}, 1),
        ("paper_2_1turn", 2, {"preset": "paper"}, 1),
        ("paper_2_2turn_diagnosis", 2, {"preset": "paper", "max_turns": 2}, 2),
        ("paper_1_2turn_plain", 1, {"preset": "paper", "max_turns": 2, "feedback": "plain", "history": "all"}, 2),
        ("paper_3_1turn_prompts", 3,
         {"preset": "paper", "prompts": {"class": "{class_name}: {methods_list}\n{skeleton}"}}, 1),
    ]
    return [{"name": f"classeval/{label}", "kind": "classeval", "data": "classeval", "num_agents": n, "args": args,
             "turns": turns, "responses": kinds} for label, n, args, turns in specs]


def _writing_cases() -> list[dict[str, Any]]:
    two = list(WRITING_PARTS)
    return [
        {"name": "tldr/comarl_2", "kind": "writing", "data": "tldr", "num_agents": 2, "args": {}, "responses": two},
        {"name": "tldr/comarl_1_marker", "kind": "writing", "data": "tldr", "num_agents": 1, "args": {},
         "responses": two},
        {"name": "tldr/comarl_2_reward_prompts", "kind": "writing", "data": "tldr", "num_agents": 2,
         "args": {"prompts": ["A {text}", "B {text}"], "reward": {"min_words": 2, "weight_level2": 2.0}},
         "responses": two},
        {"name": "tldr/comarl_1_own_marker", "kind": "writing", "data": "tldr", "num_agents": 1,
         "args": {"marker": "###", "single_prompt": "Two parts split by {marker}: {text}"}, "responses": two},
        {"name": "tldr/paper_2", "kind": "writing", "data": "tldr", "num_agents": 2, "args": {"preset": "paper"},
         "responses": two},
        {"name": "tldr/paper_2_prompts", "kind": "writing", "data": "tldr", "num_agents": 2,
         "args": {"preset": "paper", "prompts": ["C {text}", "D {text}"]}, "responses": two},
        {"name": "arxiv/comarl_2", "kind": "writing", "data": "arxiv", "num_agents": 2, "args": {}, "responses": two},
        {"name": "arxiv/comarl_3", "kind": "writing", "data": "arxiv", "num_agents": 3, "args": {}, "responses": two},
        {"name": "arxiv/comarl_1_marker", "kind": "writing", "data": "arxiv", "num_agents": 1, "args": {},
         "responses": two},
        {"name": "arxiv/paper_2", "kind": "writing", "data": "arxiv", "num_agents": 2, "args": {"preset": "paper"},
         "responses": two},
    ]


CASES = _function_cases() + _classeval_cases() + _writing_cases()


# ---------------------------------------------------------------- running a case

def _items(case: dict[str, Any]) -> list[dict[str, Any]]:
    if case["kind"] == "function":
        dataset, source, split, idx = FUNCTION_DATA[case["data"]]
        rows = load_function_items(dataset, str(DATA / source), split, None)
        return [rows[i] for i in idx]
    if case["kind"] == "classeval":
        rows = load_classeval_items(str(DATA / "classeval"), None, None)
        return [rows[0], rows[30]]  # ClassEval_30 imports numpy (a package the job may import)
    if case["data"] == "tldr":
        from comarl.envs.writing.tldr import demo_items
        return demo_items()[:2]
    return [dict(i) for i in ARXIV_ITEMS]


def _responses(case: dict[str, Any], item: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    n = case["num_agents"]
    if case["kind"] == "function":
        if case["data"] == "mbpp_openmlrl":  # the sanitized row of the same task carries the code
            ref = _SANITIZED_REFS()[item["entry_point"]]
        else:
            ref = item["reference"] or SOLUTIONS[item["entry_point"]]
        return {k: (v if n == 2 else (v[1],)) for k, v in function_responses(item, ref).items()}
    if case["kind"] == "classeval":
        return classeval_responses(item, n)
    out = {}
    for k, (a, b) in WRITING_PARTS.items():
        if n == 1:
            out[k] = (f"{a}\n---\n{b}" if k != "same" else f"{a} {b}",)  # "same": no marker at all
        elif n == 3:
            out[k] = (a, b, WRITING_THIRD)
        else:
            out[k] = (a, b)
    return out


_REFS: dict[str, str] = {}


def _SANITIZED_REFS() -> dict[str, str]:
    if not _REFS:
        rows = load_function_items("mbpp", str(DATA / "mbpp" / "sanitized-mbpp.json"), "test", None)
        _REFS.update({r["entry_point"]: r["reference"] for r in rows})
    return _REFS


def _build(case: dict[str, Any]):
    n, args = case["num_agents"], dict(case["args"])
    if case["kind"] == "function":
        return FunctionCodingEnv(FUNCTION_DATA[case["data"]][0], n, **args)
    if case["kind"] == "classeval":
        return ClassEvalEnv(n, **args)
    return get_env(case["data"]).build(n, **args)


def _state_record(state) -> dict[str, Any]:
    return {"turn": state.turn, "prompts": [digest(p) for p in state.prompts],
            "info": digest(state.info), "history": digest(state.history)}


def _state_full(state) -> dict[str, Any]:
    return {"turn": state.turn, "prompts": list(state.prompts), "info": state.info, "history": state.history}


def run_case(case: dict[str, Any], runner_for, full: dict[str, Any] | None = None) -> dict[str, Any]:
    """The case's record: first prompts and, per turn, job digests and transitions.

    ``runner_for(case_name)`` gives the runner the environment uses (replayed or recording).
    """
    env = _build(case)
    out: dict[str, Any] = {"first_prompts": [], "turns": []}
    if case["kind"] != "writing":
        env.runner = runner_for(case["name"])
        if case["args"].get("feedback") == "expert_edits":
            env.expert = FakeExpert()
    else:
        out["max_reward"] = env.max_reward
    try:
        branches = []  # (label, state)
        for i, item in enumerate(_items(case)):
            state = env.reset(item)
            out["first_prompts"].append([digest(p) for p in state.prompts])
            if full is not None:
                full.setdefault("first_prompts", []).append(list(state.prompts))
            responses = _responses(case, item)
            branches += [((i, k), state, responses) for k in case["responses"]]
        kinds = case["responses"]
        for turn in range(case.get("turns", 1)):
            if not branches:
                break
            # turn t answers with the response kind t places after the first one (fixed, no randomness)
            joint = [resp[kinds[(kinds.index(k) + turn) % len(kinds)]] for (_, k), _, resp in branches]
            calls_before = len(env.runner.calls) if case["kind"] != "writing" else 0
            try:
                trs = env.step_batch([s for _, s, _ in branches], joint)
            except Exception as e:  # a case that fails is recorded as failing, with its message
                out["turns"].append({"error": f"{type(e).__name__}: {e}"})
                break
            rec = {"branches": [f"{i}:{k}" for (i, k), _, _ in branches], "transitions": []}
            nxt = []
            for (label, _, resp), t in zip(branches, trs):
                rec["transitions"].append({
                    "reward": float(t.reward), "done": t.done, "metrics": {k: float(v) for k, v in t.metrics.items()},
                    "next": None if t.next_state is None else _state_record(t.next_state)})
                if full is not None and t.next_state is not None:
                    full.setdefault("states", []).append(_state_full(t.next_state))
                if not t.done:
                    nxt.append((label, t.next_state, resp))
            if case["kind"] != "writing":
                rec["jobs"] = env.runner.calls[calls_before:]
                if isinstance(getattr(env, "expert", None), FakeExpert):
                    rec["expert_requests"] = digest(env.expert.requests)
            out["turns"].append(rec)
            branches = nxt
    finally:
        if hasattr(env, "close"):
            env.close()
    return out


def compact(record: dict[str, Any], table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``record`` with each transition, and inside it the metrics, replaced by a digest kept in ``table``
    (the same ones recur across cases, e.g. turn 1 under each feedback mode: the fixture stays small)."""
    for turn in record["turns"]:
        if "transitions" not in turn:
            continue
        keys = []
        for t in turn["transitions"]:
            table[digest(t["metrics"])] = t["metrics"]
            t = dict(t, metrics=digest(t["metrics"]))
            keys.append(digest(t))
            table[keys[-1]] = t
        turn["transitions"] = keys
    return record


# ---------------------------------------------------------------- the test

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data folder {DATA} is missing")


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_the_fixture_covers_every_case(recorded):
    assert sorted(recorded["cases"]) == sorted(c["name"] for c in CASES)


@needs_data
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_matches_the_recording(case, recorded):
    table: dict[str, dict[str, Any]] = {}
    got = compact(run_case(case, lambda name: ReplayRunner(recorded["reports"], name)), table)
    want = recorded["cases"][case["name"]]
    assert got["first_prompts"] == want["first_prompts"], "first prompts differ"
    assert got.get("max_reward") == want.get("max_reward")
    assert len(got["turns"]) == len(want["turns"]), "a different number of turns ran"
    for t, (g, w) in enumerate(zip(got["turns"], want["turns"])):
        assert g.get("error") == w.get("error"), f"turn {t + 1}: a different error"
        if "error" in w:
            continue
        assert g["branches"] == w["branches"], f"turn {t + 1}: different branches continued"
        assert g.get("jobs") == w.get("jobs"), f"turn {t + 1}: different sandbox jobs"
        assert g.get("expert_requests") == w.get("expert_requests"), f"turn {t + 1}: different expert requests"
        for b, gt, wt in zip(g["branches"], g["transitions"], w["transitions"]):
            g_t, w_t = table[gt], recorded["transitions"][wt]
            assert g_t == w_t and table[g_t["metrics"]] == recorded["transitions"][w_t["metrics"]], (
                f"turn {t + 1}, item:response {b}: now {g_t} {table[g_t['metrics']]}, recorded {w_t} "
                f"{recorded['transitions'].get(w_t['metrics'])}")


def test_the_replay_runner_refuses_a_job_it_has_not_seen():
    from comarl.sandbox import TestJob
    runner = ReplayRunner({}, "case")
    assert runner.run([None]) == [None]
    with pytest.raises(AssertionError, match="case: sandbox job"):
        runner.run([TestJob(program="def f(): pass", tests=("assert f() is None",), entry_points=("f",))])


# ---------------------------------------------------------------- recording

def record(full_path: str | None = None) -> None:
    """Write the fixture (and, with ``full_path``, every text in full) from the current code."""
    from comarl.envs.coding.runner import SandboxRunner
    real = SandboxRunner({"test_timeout_s": 10.0, "total_timeout_s": 60.0}, workers=2)
    reports: dict[str, dict[str, Any]] = {}
    full: dict[str, Any] | None = {} if full_path else None
    full_jobs: dict[str, Any] | None = {} if full_path else None
    cases: dict[str, Any] = {}
    transitions: dict[str, dict[str, Any]] = {}
    try:
        for case in CASES:
            sub = {} if full is not None else None
            cases[case["name"]] = compact(
                run_case(case, lambda name: RecordingRunner(real, reports, full_jobs), sub), transitions)
            if full is not None:
                full[case["name"]] = sub
            print(case["name"], file=sys.stderr)
    finally:
        real.close()
    timeouts = [k for k, r in reports.items() if r["timed_out"] or "Timeout" in r["errors"]]
    if timeouts:
        print(f"warning: {len(timeouts)} recorded job(s) timed out", file=sys.stderr)
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps({"cases": cases, "transitions": transitions, "reports": reports}, sort_keys=True,
                                  indent=0, separators=(",", ":")) + "\n")
    if full_path:
        Path(full_path).write_text(json.dumps({"cases": full, "jobs": full_jobs}, sort_keys=True, indent=1,
                                              default=list))


if __name__ == "__main__":
    if "--record" not in sys.argv:
        sys.exit("usage: PYTHONPATH=$PWD python tests/envs/coding/test_presets_regression.py --record [--full PATH]")
    record(sys.argv[sys.argv.index("--full") + 1] if "--full" in sys.argv else None)
