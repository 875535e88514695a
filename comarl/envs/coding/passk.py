"""pass@k and the evaluation summary of the coding environments."""
from __future__ import annotations

from math import comb
from typing import Any, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: ``1 - C(n-c, k) / C(n, k)``.

    ``n`` samples were drawn, ``c`` of them correct; the chance that at least
    one of ``k`` samples drawn without replacement is correct. Needs
    ``0 <= c <= n`` and ``1 <= k <= n``. Example: n=4, c=1, k=2 ->
    1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def summarize_records(records: Sequence[Any], ks: Sequence[int] = (1, 2, 4, 8, 16)) -> dict[str, Any]:
    """Team pass@k per task and overall from ``EvalRecord``s.

    A joint response is correct when its transition has ``metrics["passed_all"] == 1``.
    pass@k is reported for every k in ``ks`` with k <= n of the task; the
    overall value of a k averages the tasks that have it. Also averages
    ``reward`` and ``pass_rate`` (fraction of tests passed). JSON-able.
    """
    tasks: dict[str, Any] = {}
    sums: dict[str, list[float]] = {}
    for idx, rec in enumerate(records):
        tid = str(rec.item.get("task_id", idx))
        n = len(rec.transitions)
        if n == 0:
            continue
        c = sum(1 for t in rec.transitions if t.metrics.get("passed_all", 0.0) >= 1.0)
        row: dict[str, Any] = {"n": n, "correct": c}
        for k in ks:
            if k <= n:
                row[f"pass@{k}"] = pass_at_k(n, c, k)
        row["pass_rate"] = sum(t.metrics.get("pass_rate", 0.0) for t in rec.transitions) / n
        row["reward"] = sum(_team(t.reward) for t in rec.transitions) / n
        tasks[tid] = row
        for key, value in row.items():
            if key not in ("n", "correct"):
                sums.setdefault(key, []).append(value)
    overall = {key: sum(v) / len(v) for key, v in sums.items()}
    overall["tasks"] = len(tasks)
    return {"overall": overall, "per_task": tasks}


def _team(reward: Any) -> float:
    values = getattr(reward, "values", None)
    return sum(values) / len(values) if values else float(reward)


def render_table(summary: dict[str, Any], per_task: bool = False) -> str:
    """A plain-text table of ``summarize_records`` output (overall row; tasks if asked)."""
    overall = summary["overall"]
    keys = [k for k in overall if k != "tasks"]
    header = ["task"] + keys
    rows = [["overall"] + [f"{overall[k]:.4f}" for k in keys]]
    if per_task:
        for tid, row in summary["per_task"].items():
            rows.append([tid] + [f"{row[k]:.4f}" if k in row else "-" for k in keys])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    def line(r):
        return "  ".join(c.ljust(w) for c, w in zip(r, widths))

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
