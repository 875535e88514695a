"""kill -9 at random points of 2-agent runs (LoRA agents; a critic; madpo_iter; a generation worker sampling
ahead, ``train.rollout.max_staleness: 1``), and a damaged checkpoint or a full
disk in the middle of such a run (issue #33): each run resumes from its newest checkpoint that verifies, or stops
with one line, and ends with exactly the tensors (weights, optimiser and critic state, RNG) of the run that was
never interrupted.

How: every run is `comarl train` (``cli.main``) on a small YAML config, in a child forked from this process, which
has imported torch and built each kind of run once (a fresh interpreter takes ~20 s here to import torch; a fork,
a tenth of a second). Hooks in the child count events: a generate call, an optimizer step, a critic step, a round's
sampling (madpo_iter), a file written into a checkpoint. The uninterrupted run records its event sequence; a
seeded RNG picks kill points from it (per kind of run: one in a checkpoint write, one in the kind's own step, one
anywhere), and the child kills itself with SIGKILL there: kill -9, as far as the files are concerned. The numbers
(kill points tried, resumed exactly) are printed at the end. The rest of issue #33's faults: test_faults.py (skipped
steps, an environment that raises), test_faults_sandbox.py (the sandbox pool), test_checkpoint_faults.py
(checkpoint files one at a time)."""
import errno
import json
import os
import random
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from comarl.runs import checkpoint as ckpt

SEED = 33  # the kill points' RNG
STEPS = 4
AGENT = {"model": "tiny", "max_new_tokens": 4, "temperature": 1.0, "lr": 1.0e-2,
         "model_kwargs": {"hidden_size": 32, "num_layers": 1}}
TRAIN = {"rollout": {"num_generations": 2},
         "run": {"batch_size": 2, "max_steps": STEPS, "save_steps": 1, "save_total_limit": 2, "progress_bar": False,
                 "report_to": ["jsonl"], "log_samples_steps": 0}}
KINDS = {
    "lora": ({**AGENT, "lora": {"r": 4}}, {"algorithm": "magrpo"}, "update"),
    "critic": (AGENT, {"algorithm": "iac", "critic": {"model": None, "lr": 1.0e-3}}, "critic"),
    "madpo_iter": (AGENT, {"algorithm": "madpo_iter", "rollout": {"joint_mode": "cross"},
                           "preference": {"iterative": {"rounds": 2, "round_batches": 1, "steps_per_round": 2,
                                                        "replay": "all"},
                                          "pairs": {"pairs_per_item": 2}}}, "round"),
    # the generation worker samples step t+1's batch while step t updates (#41): checkpoints hold that batch
    "overlap": (AGENT, {"algorithm": "magrpo", "rollout": {"max_staleness": 1}}, "update"),
}
TRIED: list[dict] = []  # one row per kill point, for the summary


def _config(tmp: Path, kind: str, out: Path) -> str:
    agent, train, _ = KINDS[kind]
    sections = {**TRAIN, **train, "rollout": {**TRAIN["rollout"], **train.get("rollout", {})},
                "run": {**TRAIN["run"], "output_dir": str(out)}}
    cfg = {"agents": [agent, agent], "env": {"name": "demo_writing"}, "data": {"train": {"limit": 8}},
           "train": sections}
    path = tmp / f"{kind}-{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


# ---------------------------------------------------------------- the child: hooks, then `comarl train`

class Hooks:
    """Counts events in the child; at event number ``kill_at`` kills the process (SIGKILL), at ``full_at`` (a
    checkpoint write) raises ENOSPC instead of writing."""

    def __init__(self, kill_at: int | None = None, full_at: int | None = None):
        self.trace: list[str] = []
        self.kill_at, self.full_at = kill_at, full_at

    def event(self, name: str) -> None:
        if len(self.trace) == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if len(self.trace) == self.full_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.trace.append(name)

    def wrap(self, owner, attr: str, name: str, only=None) -> None:
        inner = getattr(owner, attr)

        def hooked(*args, **kwargs):
            counted = only is None or only(args)
            if counted:
                self.event(f"{name}:before")
            out = inner(*args, **kwargs)
            if counted:
                self.event(f"{name}:after")
            return out

        setattr(owner, attr, hooked)

    def install(self) -> None:
        import comarl.critics.critic as critic
        import comarl.preference.rounds as rounds
        import comarl.rollout.settings as rollout  # RolloutSettings.team_generator: HF's generate_for_agents
        import comarl.training.team as team

        self.wrap(rollout, "generate_for_agents", "generate")
        self.wrap(team.Team, "optimizer_step", "update")
        self.wrap(critic.Critic, "update", "critic")
        self.wrap(rounds, "collect_rollout", "round")
        self.wrap(ckpt, "save_agent_weights", "write", only=lambda args: ".tmp" in str(args[1]))  # not final/
        self.wrap(ckpt, "write_manifest", "write")
        self.wrap(torch, "save", "write", only=lambda args: ".tmp" in str(args[1]))  # checkpoint files only


def _child(argv: list[str], log: Path, hooks: Hooks, trace_out: Path | None) -> int:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)
    warnings.simplefilter("default")  # printed to the log, not recorded by the pytest run this process forked from
    warnings.showwarning = lambda msg, cat, fname, line, file=None, text=None: sys.stderr.write(
        warnings.formatwarning(msg, cat, fname, line, text))
    torch.set_num_threads(1)  # the same numbers in every run (and no OpenMP pool carried over the fork)
    from comarl.cli import main

    hooks.install()
    code = main(argv)
    if trace_out is not None:
        trace_out.write_text(json.dumps(hooks.trace))
    return code


def _fork(fn, timeout: float = 240.0) -> int:
    """Run ``fn`` in a forked child; its exit status (-9 when it killed itself)."""
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            code = fn()
        except BaseException:
            traceback.print_exc()
            code = 71
        finally:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:
                    pass
            os._exit(code)
    end = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"a fault run took more than {timeout} s")
        time.sleep(0.05)


def _run(cfg: str, log: Path, *over: str, hooks: Hooks | None = None, trace_out: Path | None = None) -> int:
    return _fork(lambda: _child(["train", cfg, *over], log, hooks or Hooks(), trace_out))


def _comarl_lines(log: Path) -> list[str]:
    return [x for x in log.read_text().splitlines() if x.startswith("comarl:")]


# ---------------------------------------------------------------- comparing runs

def _tensors(obj, prefix: str, out: dict) -> None:
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _tensors(v, f"{prefix}/{k}", out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _tensors(v, f"{prefix}/{i}", out)
    elif isinstance(obj, (int, float, str, bool, type(None))):
        out[prefix] = obj
    # numpy RNG arrays and the like
    elif hasattr(obj, "tolist"):
        out[prefix] = obj.tolist()


def _state(folder: Path) -> dict:
    """Every tensor (and number) of a checkpoint's .safetensors and .pt files, by file and key."""
    from safetensors.torch import load_file

    out: dict = {}
    for f in sorted(folder.rglob("*")):
        rel = f.relative_to(folder).as_posix()
        if f.suffix == ".safetensors":
            _tensors(load_file(str(f)), rel, out)
        elif f.suffix == ".pt":
            _tensors(torch.load(f, map_location="cpu", weights_only=False), rel, out)
    return out


def _same(a: dict, b: dict) -> list[str]:
    """The keys where two checkpoints differ (empty: the same tensors, bit for bit)."""
    diff = sorted(set(a) ^ set(b))
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)):
                diff.append(k)
        elif x != y:
            diff.append(k)
    return diff


# ---------------------------------------------------------------- the runs

@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Each kind's uninterrupted run (its final checkpoint's tensors and its event sequence), after warming this
    process up by building each kind once (imports and lazy modules then come with every fork)."""
    from comarl.config import load_config
    from comarl.experiment import build_trainer

    tmp = tmp_path_factory.mktemp("faults")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for kind in KINDS:
            build_trainer(load_config(_config(tmp, kind, tmp / f"warm-{kind}")))
    finally:
        torch.set_num_threads(threads)
    refs = {}
    for kind in KINDS:
        out = tmp / f"ref-{kind}"
        trace = tmp / f"ref-{kind}.json"
        assert _run(_config(tmp, kind, out), tmp / f"ref-{kind}.log", trace_out=trace) == 0, \
            (tmp / f"ref-{kind}.log").read_text()[-3000:]
        refs[kind] = {"state": _state(out / f"checkpoint-{STEPS}"), "trace": json.loads(trace.read_text())}
    return tmp, refs


def _kill_points(trace: list[str], own: str, rng: random.Random) -> list[tuple[str, int]]:
    """(what, event index): one in a checkpoint write, one in the kind's own step once a checkpoint exists (so the
    resume starts inside the run: round 2 of madpo_iter), one anywhere (all distinct)."""
    writes = [i for i, e in enumerate(trace) if e.startswith("write")]
    first_saved = next(i for i in range(writes[0], len(trace)) if not trace[i].startswith("write"))
    owns = [i for i, e in enumerate(trace) if e.startswith(own) and i > first_saved]
    picks = [("checkpoint write", rng.choice(writes)), (own, rng.choice(owns))]
    rest = [i for i in range(len(trace)) if i not in {p for _, p in picks}]
    return picks + [("anywhere", rng.choice(rest))]


def _resume_and_compare(tmp: Path, cfg: str, out: Path, ref: dict, row: dict, log: Path) -> None:
    """``train.run.resume=latest``; with no checkpoint yet, the one-line message and then a fresh start. The final
    checkpoint must hold the reference's tensors."""
    code = _run(cfg, log, "train.run.resume=latest")
    if code == 2:
        lines = _comarl_lines(log)
        assert len(lines) == 1 and "stopped before its first checkpoint" in lines[0], log.read_text()[-3000:]
        row["how"] = "no checkpoint yet: one line, then train.run.overwrite=true"
        code = _run(cfg, log, "train.run.overwrite=true")
    else:
        row["how"] = "resumed " + next((x.split("resumed from ")[1].split(" ")[0] for x in log.read_text().splitlines()
                                        if x.startswith("resumed from ")), "?")
    assert code == 0, log.read_text()[-3000:]
    diff = _same(ref["state"], _state(out / f"checkpoint-{STEPS}"))
    row["exact"] = not diff
    assert not diff, f"{row}: {len(diff)} tensors differ from the uninterrupted run, e.g. {diff[:5]}"


@pytest.mark.parametrize("kind", list(KINDS))
def test_kill_9_at_random_points_resumes_to_the_same_weights(references, kind):
    tmp, refs = references
    ref = refs[kind]
    rng = random.Random(f"{SEED}-{kind}")
    for what, at in _kill_points(ref["trace"], KINDS[kind][2], rng):
        out = tmp / f"{kind}-kill{at}"
        cfg = _config(tmp, kind, out)
        row = {"kind": kind, "where": f"{what} (event {at}: {ref['trace'][at]})"}
        TRIED.append(row)
        assert _run(cfg, tmp / f"{out.name}.log", hooks=Hooks(kill_at=at)) == -signal.SIGKILL, \
            (tmp / f"{out.name}.log").read_text()[-3000:]
        _resume_and_compare(tmp, cfg, out, ref, row, tmp / f"{out.name}-resume.log")


def test_truncated_newest_checkpoint_after_a_kill_falls_back_and_ends_the_same(references):
    """Killed during step 4's rollout, then the newest checkpoint's adapter file cut short (a copy cut off, a disk
    error): resume=latest warns, takes checkpoint-2 and still ends with the uninterrupted run's tensors."""
    tmp, refs = references
    ref = refs["lora"]
    at = max(i for i, e in enumerate(ref["trace"]) if e == "generate:after")  # step 4's rollout
    out = tmp / "lora-truncated"
    cfg = _config(tmp, "lora", out)
    row = {"kind": "lora", "where": f"step 4's rollout (event {at}), then checkpoint-3 truncated"}
    TRIED.append(row)
    assert _run(cfg, tmp / "truncated.log", hooks=Hooks(kill_at=at)) == -signal.SIGKILL
    newest = out / "checkpoint-3"
    victim = next(newest.rglob("*.safetensors"))
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(ckpt.CheckpointError, match="truncated"):
        ckpt.verify_checkpoint(newest)
    _resume_and_compare(tmp, cfg, out, ref, row, tmp / "truncated-resume.log")
    assert row["how"] == "resumed checkpoint-2"
    assert "skipping checkpoint-3, it does not verify" in (tmp / "truncated-resume.log").read_text()


def test_full_disk_during_a_checkpoint_stops_with_one_line_and_resumes_the_same(references):
    """The disk fills while checkpoint-3 is written (a critic run): one line naming the space needed, status 2, the
    previous checkpoint intact; after space is freed, resume=latest ends with the uninterrupted run's tensors."""
    tmp, refs = references
    ref = refs["critic"]
    starts = [i for i, e in enumerate(ref["trace"]) if e == "write:before"]
    per_save = len(starts) // STEPS
    at = starts[2 * per_save + per_save // 2]  # a file in the middle of the third save
    out = tmp / "critic-full"
    cfg = _config(tmp, "critic", out)
    row = {"kind": "critic", "where": f"disk full in checkpoint-3's write (event {at})"}
    TRIED.append(row)
    log = tmp / "full.log"
    assert _run(cfg, log, hooks=Hooks(full_at=at)) == 2, log.read_text()[-3000:]
    [line] = _comarl_lines(log)
    assert line.startswith("comarl: checkpoint error: checkpoint-3 was not written: no space left") and \
        f"{out / 'checkpoint-2'} is intact" in line
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    _resume_and_compare(tmp, cfg, out, ref, row, tmp / "full-resume.log")
    assert row["how"] == "resumed checkpoint-2"


def test_zz_report(references, capsys):
    """The numbers the issue asks for (runs last in this file: pytest keeps definition order)."""
    rows = [r for r in TRIED if "exact" in r]
    if not rows:
        pytest.skip("no fault run in this session (run the whole file)")
    kills = [r for r in rows if not r["where"].startswith("disk full")]
    lines = [f"fault runs: {len(kills)} kill -9 points tried, {sum(r['exact'] for r in kills)} ended exactly as the "
             f"uninterrupted run ({sum(r['how'].startswith('resumed') for r in kills)} resumed from a checkpoint, "
             f"{sum(not r['how'].startswith('resumed') for r in kills)} had none yet); "
             f"{len(rows) - len(kills)} full-disk run(s), "
             f"{sum(r['exact'] for r in rows) - sum(r['exact'] for r in kills)} exact"]
    lines += [f"  {r['kind']:<10} {r['where']:<60} {r['how']:<55} exact={r['exact']}" for r in rows]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert rows and all(r["exact"] for r in rows)
