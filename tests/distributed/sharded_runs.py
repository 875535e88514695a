"""What the 2-rank sharding tests share (test_sharding*.py): one torchrun launch of a worker beside the
single-process side run here, and reading and comparing what both wrote."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch

from test_distributed import _launch, _wait

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
# the first test of a file pays for its fixture's runs (~1 min idle; several minutes on a loaded 2-core machine)
LONG = 900


def launch_beside(tmp: Path, worker_file: str, scenarios: list[str], label: str, single: Callable[[], None]) -> None:
    """Run ``worker_file``'s ``scenarios`` on 2 gloo ranks (per-rank batch 2, results in ``tmp/multi``) while
    ``single()`` runs here with the same split-independent sampling; then wait for the ranks."""
    with open(tmp / "multi.log", "w") as log:
        multi = _launch(TORCHRUN + [worker_file, str(tmp / "multi"), "--batch-size", "2", *scenarios], log)
        try:
            single()
        finally:
            _wait(multi, tmp / "multi.log", label, timeout=LONG - 60)


def load_result(runs: Path, side: str, name: str, r: int = 0) -> dict:
    """What a scenario's rank ``r`` wrote (``side``: multi or single)."""
    return torch.load(runs / side / name / f"rank{r}.pt", weights_only=False)


def max_diff(a, b) -> float:
    """Largest absolute difference of two state dicts (or lists of them, one per agent) with the same keys."""
    a, b = (a, b) if isinstance(a, list) else ([a], [b])
    assert [sorted(x) for x in a] == [sorted(x) for x in b]
    return max(float((a[i][k].float() - b[i][k].float()).abs().max()) for i in range(len(a)) for k in a[i])
