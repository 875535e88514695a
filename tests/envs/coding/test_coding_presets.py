"""Presets are records chosen in one place (issue #28, item 5): the tables, the alias, the turn contract, and no
preset test left in the environments."""
import ast
from pathlib import Path

import pytest

from comarl.envs.coding.classeval import ClassEvalEnv
from comarl.envs.coding.function_env import FunctionCodingEnv
from comarl.envs.coding.presets import CLASS_PRESETS, FUNCTION_PRESETS, choose, default, paper
from comarl.envs.coding.presets.records import FunctionPreset, FunctionSettings, Scored
from comarl.envs.coding.feedback import Outcome
from comarl.envs.coding.turns import step_batch
from comarl.envs.base import EnvState
from comarl.envs.writing import arxiv, tldr
from comarl.envs.writing.env import choose_preset
from comarl.envs.writing.presets import DefaultPreset, PaperPreset

ENVS = Path(__file__).resolve().parents[3] / "comarl" / "envs"
PRESET_NAMES = {"default", "comarl", "paper"}


def preset_tests(source: str, where: str = "<src>") -> list[str]:
    """Comparisons that pick behaviour by preset: ``==``/``!=``/``is`` between a name or attribute called
    ``*preset*`` and anything but None, or any comparison with a preset's name as a string
    (``x in ("comarl", "paper")``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        named = any("preset" in (getattr(o, "id", None) or getattr(o, "attr", None) or "").lower() for o in operands)
        equality = any(isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) for op in node.ops) and not any(
            isinstance(o, ast.Constant) and o.value is None for o in operands)
        constants = [c.value for o in operands for c in ([o] + list(getattr(o, "elts", [])))
                     if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        if (named and equality) or PRESET_NAMES & set(constants):
            out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_environment_tests_its_preset():
    offenders = []
    for path in sorted(ENVS.rglob("*.py")):
        offenders += preset_tests(path.read_text(), str(path.relative_to(ENVS.parent)))
    assert not offenders, "preset tests left under comarl/envs (choose a record instead):\n" + "\n".join(offenders)


@pytest.mark.parametrize("source, found", [
    ('if preset == "paper":\n    pass\n', True),
    ("if self.preset != other:\n    pass\n", True),
    ("if env.preset is PAPER:\n    pass\n", True),
    ("if preset is None:\n    pass\n", False),
    ('if preset not in ("comarl", "paper"):\n    pass\n', True),
    ('x = name == "default"\n', True),
    ("record = table.get(ALIASES.get(name, name))\n", False),
    ("if key not in FUNCTION_PRESETS:\n    pass\n", False),
    ('if feedback == "expert_edits":\n    pass\n', False),
])
def test_the_scan_sees_preset_tests(source, found):
    assert bool(preset_tests(source)) == found


def test_default_is_comarls_preset_and_comarl_its_alias():
    assert FUNCTION_PRESETS["default"] is default.FUNCTION and CLASS_PRESETS["paper"] is paper.CLASS
    assert choose(FUNCTION_PRESETS, "comarl") is choose(FUNCTION_PRESETS, "default") is default.FUNCTION
    for kwargs in ({}, {"preset": "default"}, {"preset": "comarl"}):
        assert FunctionCodingEnv("humaneval", 2, **kwargs).preset is default.FUNCTION
        assert ClassEvalEnv(2, **kwargs).preset is default.CLASS
    assert FunctionCodingEnv("mbpp", 1, preset="paper").preset is paper.FUNCTION
    for task in (tldr.TASK, arxiv.TASK):
        assert choose_preset(task, "comarl") is choose_preset(task, "default") is task.presets["default"]
        assert isinstance(task.presets["default"], DefaultPreset) and isinstance(task.presets["paper"], PaperPreset)
    alias = tldr.build(2, preset="comarl").reset({"text": "T"}).prompts
    assert (alias == tldr.build(2, preset="default").reset({"text": "T"}).prompts
            == tldr.build(2).reset({"text": "T"}).prompts)


@pytest.mark.parametrize("build", [lambda: FunctionCodingEnv("humaneval", 2, preset="papers"),
                                   lambda: ClassEvalEnv(2, preset="Default"),
                                   lambda: tldr.build(2, preset="reference")])
def test_an_unknown_preset_names_the_key_and_the_choices(build):
    with pytest.raises(ValueError, match=r"env\.args\.preset: .*default, paper, comarl \(= default\)"):
        build()


class FakeRunner:
    """The runner's contract: one ``run(jobs)`` per batch, a report (or None) per job."""

    def __init__(self):
        self.batches = []

    def run(self, jobs):
        self.batches.append(list(jobs))
        return [None if j is None else f"report of {j}" for j in jobs]


def _count_preset(calls):
    """A made-up preset: the job is the main response, the reward its length, passed when it is ``ok``."""
    def score(settings, item, attempt, report):
        calls.append(("score", attempt, report))
        ok = attempt == "ok"
        return Scored(float(len(attempt)), {"pass_rate": float(ok), "passed_all": float(ok)}, ok,
                      Outcome(True, True, None, None, (), (), (), item["entry_point"]))

    def followups(settings, branches, expert=None):
        calls.append(("followups", [b.responses for b in branches]))
        return [(tuple(f"again: {r}" for r in b.responses), {"seen": b.report}) for b in branches]

    return FunctionPreset(
        name="count", templates={}, feedback_modes=(),
        weights=lambda rewards: None, attempt=lambda s, item, resp: resp[-1],
        job=lambda s, item, attempt: attempt or None, score=score, followups=followups)


def test_a_turn_runs_one_sandbox_call_and_one_followups_call_for_the_branches_that_go_on():
    calls = []
    preset = _count_preset(calls)
    settings = FunctionSettings(mode="single", roles=("single",), helper_name="aux", max_turns=2, feedback="plain",
                                history="last", max_failures=3, templates={}, weights=None)
    runner = FakeRunner()
    first = EnvState(item={"entry_point": "f"}, prompts=("p",))
    out = step_batch(preset, settings, runner, 1, [first] * 3, [("ok",), ("",), ("bad",)])
    assert runner.batches == [["ok", None, "bad"]]  # no job for the empty response; one call for the batch
    assert [t.done for t in out] == [True, False, False] and [t.reward for t in out] == [2.0, 0.0, 3.0]
    assert calls[-1] == ("followups", [("",), ("bad",)])  # only the branches that go on, once
    assert out[2].next_state.prompts == ("again: bad",) and out[2].next_state.info == {"seen": "report of bad"}
    assert out[2].next_state.history == ((("p", "bad"),),)
    last = step_batch(preset, settings, runner, 1, [out[2].next_state], [("still bad",)])
    assert last[0].done and last[0].next_state is None  # the last turn ends every branch
    with pytest.raises(ValueError, match="joint action has 2 responses, environment has 1 agents"):
        step_batch(preset, settings, runner, 1, [first], [("a", "b")])
