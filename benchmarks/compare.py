"""Side-by-side speed and memory of comarl and its peers on identical work.

One command (from the repository root, in the project's venv)::

    python benchmarks/compare.py                 # all workloads, batch sizes 1 and 4, 2 repeats

It (1) creates ``benchmarks/.venvs/comlrl`` and ``benchmarks/.venvs/trl`` once
(pinned CPU torch first, then the peer), (2) saves the shared tiny model to
``benchmarks/.cache/tiny-qwen2`` once, (3) for every workload and batch size
runs peer, comarl, peer, comarl, ... (``--repeats`` pairs), each in a fresh
process (``peers/*_runner.py``), and (4) writes ``benchmarks/RESULTS.md``,
``benchmarks/results.json`` (raw records) and ``benchmarks/results.png``.

Numbers per (workload, library, batch size), medians over the repeats:
  s/item = wall_s / items; completions/s = completions_generated / wall_s;
  peak RSS = max over repeats of the run's ru_maxrss;
  comarl/peer = median over repeats r of wall_comarl[r] / wall_peer[r], pairing the two runs
  of the same repeat (time ratio: below 1 means comarl is faster; a failed run drops its pair).
``wall_s`` covers ``trainer.train()`` only (model loading and imports excluded).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import workloads as W  # noqa: E402

TORCH_PIN = "torch==2.13.0"
PEER_PACKAGES = {"comlrl": ["comlrl==1.4.3"], "trl": ["trl==1.16.0"]}
RUNNERS = {"comarl": HERE / "peers" / "comarl_runner.py", "comlrl": HERE / "peers" / "comlrl_runner.py",
           "trl": HERE / "peers" / "trl_runner.py"}


# ------------------------------------------------------------------ set-up
def venv_python(name: str, venv_dir: Path) -> Path:
    return venv_dir / name / "bin" / "python"


def ensure_venv(name: str, venv_dir: Path) -> Path:
    """Create ``venv_dir/name`` with the pinned CPU torch and the peer package, once."""
    py = venv_python(name, venv_dir)
    marker = venv_dir / name / ".benchmark-ready"
    if marker.exists():
        return py
    print(f"[setup] creating venv {venv_dir / name}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir / name)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q"]
    # torch first, so the peer's `torch` requirement is already met by the CPU build.
    subprocess.run(pip + [TORCH_PIN], check=True)
    subprocess.run(pip + PEER_PACKAGES[name], check=True)
    version = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"], check=True,
                             capture_output=True, text=True).stdout.strip()
    if not version.startswith(TORCH_PIN.split("==")[1]) or "+cu" in version:
        raise RuntimeError(f"venv {name}: installing {PEER_PACKAGES[name]} replaced torch with {version}; "
                           f"reinstall with --no-deps and the package's real requirements")
    marker.write_text(version + "\n")
    return py


# ------------------------------------------------------------------- runs
def run_one(lib: str, python: Path, workload: str, model: Path, batch_size: int, out: Path, threads: int,
            items: int | None, timeout: float) -> dict:
    """One training run in a fresh process; its JSON record (or an ``error`` record)."""
    cmd = [str(python), str(RUNNERS[lib]), "--workload", workload, "--model", str(model),
           "--batch-size", str(batch_size), "--out", str(out)]
    if items:
        cmd += ["--items", str(items)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="false", WANDB_MODE="disabled", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0")
    env.pop("VIRTUAL_ENV", None)
    if out.exists():
        out.unlink()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stdout + proc.stderr)[-2000:]
        print(f"  ! {lib} {workload} bs={batch_size} failed (rc {proc.returncode}):\n{tail}", flush=True)
        return {"library": lib, "workload": workload, "batch_size": batch_size, "error": tail}
    rec = json.loads(out.read_text())
    rec["process_s"] = elapsed
    print(f"  {lib:7s} {workload} bs={batch_size}: {rec['wall_s']:.2f}s train, "
          f"{rec['completions_generated']} completions, {rec['optimizer_steps']} steps, "
          f"{rec['peak_rss_mb']:.0f} MB", flush=True)
    return rec


# ---------------------------------------------------------------- summary
def summarise(records: list[dict], workload: str, batch_size: int, peer: str) -> dict:
    """Medians and the same-work check for one (workload, batch size) pair of libraries."""
    def ok(lib):
        return [r for r in records if r["library"] == lib and r["workload"] == workload
                and r["batch_size"] == batch_size and "error" not in r]

    rows = {}
    for lib in (peer, "comarl"):
        rs = ok(lib)
        if not rs:
            rows[lib] = None
            continue
        wall = statistics.median(r["wall_s"] for r in rs)
        rows[lib] = {"runs": len(rs), "wall_s": wall, "s_per_item": wall / rs[0]["items"],
                     "completions_per_s": statistics.median(r["completions_generated"] / r["wall_s"] for r in rs),
                     "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
                     "completions": sorted({r["completions_generated"] for r in rs}),
                     "steps": sorted({r["optimizer_steps"] for r in rs})}
    p = {r.get("repeat"): r for r in ok(peer)}
    c = {r.get("repeat"): r for r in ok("comarl")}
    ratios = [c[k]["wall_s"] / p[k]["wall_s"] for k in sorted(p.keys() & c.keys(), key=str)]  # same-repeat pairs
    same = None
    if rows[peer] and rows["comarl"]:
        same = {"completions": rows[peer]["completions"] == rows["comarl"]["completions"],
                "steps": rows[peer]["steps"] == rows["comarl"]["steps"]}
    return {"workload": workload, "batch_size": batch_size, "peer": peer, "rows": rows,
            "ratio": statistics.median(ratios) if ratios else None, "ratios": ratios, "same": same}


def _counts(v: list[int]) -> str:
    return "/".join(map(str, v))


def write_markdown(summaries: list[dict], path: Path, meta: dict) -> None:
    lines = ["# comarl versus peers: speed and memory", "",
             f"Generated by `python benchmarks/compare.py` on {meta['date']} ({meta['machine']}, "
             f"{meta['threads']} torch thread(s) per run, {meta['repeats']} alternating repeat(s); "
             f"5-min load average {meta.get('load', '?')} during the runs: other jobs may have shared the "
             "machine, so treat differences under ~20% as noise).", "",
             "Model: random Qwen2 (hidden 128, 2 layers, 4 heads / 2 KV heads, 4k ByteLevel BPE). "
             "Every run: 16 items, 1 epoch, 32 new tokens, lr 1e-5, temperature 1.0, top_p 1, no top_k. "
             "Batch size = items per optimiser step. s/item and completions/s time `trainer.train()` only.",
             "",
             "| workload | library | batch | s/item | completions/s | peak RSS MB | "
             "same work (completions; optimiser steps) | comarl/peer time |",
             "|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        wl = W.get_workload(s["workload"])
        for lib in (s["peer"], "comarl"):
            r = s["rows"][lib]
            if r is None:
                lines.append(f"| ({wl.name}) {wl.title} | {lib} | {s['batch_size']} | failed | | | | |")
                continue
            if lib == "comarl" and s["same"] is not None:
                pr = s["rows"][s["peer"]]
                mark = lambda b: "✓" if b else "✗"  # noqa: E731
                same = (f"{mark(s['same']['completions'])} {_counts(r['completions'])} "
                        f"vs {_counts(pr['completions'])}; "
                        f"{mark(s['same']['steps'])} {_counts(r['steps'])} vs {_counts(pr['steps'])}")
                ratio = f"**{s['ratio']:.2f}**" if s["ratio"] is not None else ""
            else:
                same, ratio = "", ""
            lines.append(f"| ({wl.name}) {wl.title} | {lib} | {s['batch_size']} | {r['s_per_item']:.3f} | "
                         f"{r['completions_per_s']:.1f} | {r['peak_rss_mb']:.0f} | {same} | {ratio} |")
    lines += ["", "comarl/peer time is the median over repeat pairs of comarl's train time divided by the peer's "
              "(below 1: comarl faster). Optimiser steps are summed over agents.", ""]
    if meta.get("failed"):
        lines += [f"**{meta['failed']} run(s) failed** (their error tails are in results.json); medians use "
                  "the runs that finished.", ""]
    lines += [f"- {n}" for n in meta.get("notes", [])]
    path.write_text("\n".join(lines) + "\n")


def write_chart(summaries: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, peer_v, comarl_v = [], [], []
    for s in summaries:
        p, c = s["rows"][s["peer"]], s["rows"]["comarl"]
        labels.append(f"({s['workload']}) bs={s['batch_size']}\nvs {s['peer']}")
        peer_v.append(1.0 / p["s_per_item"] if p else 0.0)
        comarl_v.append(1.0 / c["s_per_item"] if c else 0.0)
    x = range(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels)), 4))
    w = 0.4
    ax.bar([i - w / 2 for i in x], peer_v, w, label="peer (CoMLRL / TRL)", color="#999999")
    ax.bar([i + w / 2 for i in x], comarl_v, w, label="comarl", color="#1f77b4")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("training items / s (higher is better)")
    ax.set_title("comarl vs peers, tiny Qwen2 on CPU")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------- main
def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default=",".join(W.WORKLOADS), help="comma list of a,b,c,d")
    ap.add_argument("--batch-sizes", default=",".join(map(str, W.BATCH_SIZES)))
    ap.add_argument("--repeats", type=int, default=2, help="alternating (peer, comarl) pairs per setting")
    ap.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per run (1 = stable on a busy box)")
    ap.add_argument("--items", type=int, default=None, help="override the item count (quick checks)")
    ap.add_argument("--venvs", default=str(HERE / ".venvs"))
    ap.add_argument("--model-dir", default=str(HERE / ".cache" / "tiny-qwen2"))
    ap.add_argument("--out-dir", default=str(HERE), help="where RESULTS.md, results.json, results.png go")
    ap.add_argument("--comarl-python", default=sys.executable, help="python of the venv that has comarl's deps")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    args = ap.parse_args(argv)

    workloads = [W.get_workload(n.strip()).name for n in args.workloads.split(",") if n.strip()]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    venv_dir, out_dir = Path(args.venvs), Path(args.out_dir)
    pythons = {"comarl": Path(args.comarl_python)}
    for peer in sorted({p for n in workloads for p in W.get_workload(n).peers}):
        pythons[peer] = ensure_venv(peer, venv_dir)
    model = W.build_tiny_model(args.model_dir)
    tmp = HERE / ".cache" / "runs"  # per-run JSON records (ignored by git)
    tmp.mkdir(parents=True, exist_ok=True)

    records, summaries = [], []
    load_start = os.getloadavg()[1]
    for name in workloads:
        wl = W.get_workload(name)
        for bs in batch_sizes:
            for peer in wl.peers:
                print(f"[{name}] {wl.title}, batch {bs}: {peer} vs comarl", flush=True)
                for r in range(args.repeats):
                    for lib in (peer, "comarl"):
                        out = tmp / f"{lib}_{name}_bs{bs}_r{r}.json"
                        rec = run_one(lib, pythons[lib], name, model, bs, out, args.threads, args.items,
                                      args.timeout)
                        rec["repeat"] = r
                        records.append(rec)
                summaries.append(summarise(records, name, bs, peer))

    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "threads": args.threads, "repeats": args.repeats,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()}",
            "notes": NOTES, "failed": sum("error" in r for r in records),
            "load": f"{load_start:.1f} -> {os.getloadavg()[1]:.1f}"}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps({"meta": meta, "records": records,
                                                      "summaries": summaries}, indent=1))
    write_markdown(summaries, out_dir / "RESULTS.md", meta)
    write_chart(summaries, out_dir / "results.png")
    print(f"wrote {out_dir / 'RESULTS.md'} and {out_dir / 'results.png'}")
    return summaries


NOTES = [
    "CoMLRL always takes one item per training step and calls `generate` once per agent per item (and per "
    "tree node in multi-turn); its batch size is `rollout_buffer_size = train_batch_size`, i.e. rollout "
    "nodes per optimiser step. comarl generates a whole batch (items x K, and all live branches of a turn) "
    "in one `generate` call per agent.",
    "Workload (c): CoMLRL updates each turn's nodes separately (3 nodes per item per agent: 1 root + K=2 "
    "children), so it takes more optimiser steps than comarl, which takes one step per agent per training step "
    "over the whole tree. The completions generated are the same; the steps differ by design (marked ✗).",
    "CoMLRL's loss sums token log-probs per sequence (no per-sequence mean) and re-runs one forward pass per "
    "completion; comarl and TRL (`loss_type=\"grpo\"`) average per sequence. CoMLRL has no gradient clipping; "
    "comarl and TRL clip at 1.0. All three divide advantages by the group std.",
    "See docs/benchmarks_peers.md for every setting and why.",
]


if __name__ == "__main__":
    main()
