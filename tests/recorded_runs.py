"""Short training runs recorded once and held to the recording: what a run is reduced to (generated tokens, the
metrics, the weights), the platform it ran on, and the comparison (exact on the recording platform, to 1e-4
elsewhere, where the last bits of floats may differ)."""
from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

import pytest
import torch


def digest(chunks) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c if isinstance(c, bytes) else str(c).encode())
    return h.hexdigest()[:16]


def recording_generator(generate, calls: list):
    """``generate`` (a team generator) that appends a digest of each call's prompts and tokens to ``calls``."""
    def recording(agents, prompt_ids, k, **kw):
        out = generate(agents, prompt_ids, k, **kw)
        calls.append(digest([json.dumps(prompt_ids), json.dumps([c.ids for c in out])]))
        return out
    return recording


def run_record(calls: list, history: list, modules) -> dict:
    """A finished run as it is recorded: its generate calls, its metrics (no timings) and each module's weights."""
    weights = {}
    for n, m in enumerate(modules):
        params = sorted(m.state_dict().items())
        weights[f"module{n}"] = {
            "digest": digest(v.detach().cpu().contiguous().numpy().tobytes() for _, v in params),
            "sum": float(sum(v.detach().double().sum() for _, v in params)),
            "abs_sum": float(sum(v.detach().double().abs().sum() for _, v in params))}
    metrics = [{k: v for k, v in sorted(h.items()) if not k.startswith(("time/", "tokens_per_s"))} for h in history]
    return {"generate_calls": calls, "metrics": metrics, "weights": weights}


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


def platform_info() -> dict:
    return {"torch": torch.__version__, "machine": platform.machine(), "python": sys.version.split()[0],
            "cpu": _cpu()}


def assert_matches(got: dict, recorded: dict, name: str) -> None:
    """``got`` (a ``run_record``) equals the recording's run ``name``: tokens always exactly; metrics and weights
    exactly on the recording platform, else to 1e-4."""
    want = recorded["runs"][name]
    assert got["generate_calls"] == want["generate_calls"], "generated tokens differ from the recorded run"
    exact = recorded["platform"] == platform_info()
    for step, (g, w) in enumerate(zip(got["metrics"], want["metrics"])):
        assert sorted(g) == sorted(w), f"step {step}: metric names differ"
        for k in w:
            if exact:
                assert g[k] == w[k] or (g[k] != g[k] and w[k] != w[k]), f"step {step}: {k} {g[k]} != {w[k]}"
            else:
                assert g[k] == pytest.approx(w[k], rel=1e-4, abs=1e-5, nan_ok=True), f"step {step}: {k}"
    for m, w in want["weights"].items():
        if exact:
            assert got["weights"][m]["digest"] == w["digest"], f"{m}: weights after 3 steps differ"
        else:
            assert got["weights"][m]["sum"] == pytest.approx(w["sum"], rel=1e-4)
            assert got["weights"][m]["abs_sum"] == pytest.approx(w["abs_sum"], rel=1e-4)


def record(fixture: Path, runs: dict) -> None:
    fixture.parent.mkdir(exist_ok=True)
    fixture.write_text(json.dumps({"platform": platform_info(), "runs": runs}, indent=1) + "\n")
    print(f"wrote {fixture}")
