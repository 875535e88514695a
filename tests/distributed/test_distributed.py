"""Data parallelism: 2 gloo ranks == 1 process over the same global batch; sharding and metric arithmetic.

The 2-rank run is started through torch's launcher (``python -m
torch.distributed.run``) with tests/distributed/dist_worker.py; see that file for how
sampling is made deterministic across different shardings.
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from comarl.compute import distributed as dist
from comarl.training.optim import build_scheduler, lr_factor, rebuild_scheduler

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "distributed" / "dist_worker.py"


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               PYTHONPATH=str(ROOT))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _launch(args, log):
    return subprocess.Popen(args, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)


def _wait(proc, log_path, what, timeout=240):
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{what} did not finish in {timeout} s:\n{Path(log_path).read_text()[-4000:]}")
    assert rc == 0, f"{what} failed (rc {rc}):\n{Path(log_path).read_text()[-4000:]}"


def _max_diff(a, b):
    return max(float((a[i][k] - b[i][k]).abs().max()) for i in range(len(a)) for k in a[i])


def test_two_gloo_ranks_match_one_process_over_the_same_global_batch(tmp_path):
    """3 steps, global batch 4 of 5 items (rank 1 gets no item in step 2); rank 1 starts from other weights."""
    logs = {k: open(tmp_path / f"{k}.log", "w") for k in ("multi", "single")}
    multi = _launch([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                     str(WORKER), str(tmp_path / "multi"), "--batch-size", "2"], logs["multi"])
    single = _launch([sys.executable, str(WORKER), str(tmp_path / "single"), "--batch-size", "4"], logs["single"])
    _wait(multi, tmp_path / "multi.log", "torchrun with 2 ranks")
    _wait(single, tmp_path / "single.log", "single-process run")
    for f in logs.values():
        f.close()
    r0, r1 = (torch.load(tmp_path / "multi" / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    one = torch.load(tmp_path / "single" / "rank0.pt", weights_only=False)
    assert r0["world_size"] == r1["world_size"] == 2 and one["world_size"] == 1
    # whole items per rank: [0,2] [1,3] / [4] [] / [0,2] [1,3]
    assert r0["counts"] == [2, 1, 2] and r1["counts"] == [2, 0, 2] and one["counts"] == [4, 1, 4]
    # all-reduced gradients: bit-identical weights on every rank ...
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0
    # ... equal to one process over the same global batch (float noise only; measured 4e-6 after 3 Adam steps)
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5
    # the advantages were not all zero: every agent had a gradient every step
    for m in one["history"]:
        assert m["agent0/grad_norm"] > 0 and m["agent1/grad_norm"] > 0
    # metrics reduced across ranks (weighted by items; rank 1's empty step ignored) == single-process metrics
    for m0, m1 in zip(r0["history"], one["history"]):
        for k in ("reward/mean", "agent0/grad_norm", "agent1/loss", "agent0/completion_len"):
            assert m0[k] == pytest.approx(m1[k], rel=1e-4, abs=1e-6), k
        assert m0["count/completions"] == m1["count/completions"]
    assert r0["history"] == r1["history"]  # every rank holds the same reduced metrics
    # sampling streams differ per rank after init
    assert r0["first_draw"] != r1["first_draw"]


def test_python_m_comarl_under_torchrun_writes_once(tmp_path):
    """``torchrun -m comarl train CONFIG``: 2 gloo ranks, only rank 0 writes metrics and checkpoints (~11 s)."""
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(json.dumps({
        "agents": [{"model": "tiny", "max_new_tokens": 6, "model_kwargs": {"hidden_size": 32, "num_layers": 1,
                                                                            "seed": i}} for i in range(2)],
        "env": {"name": "demo_writing"},
        "train": {"rollout": {"num_generations": 2},
                  "run": {"batch_size": 1, "max_steps": 2, "save_steps": 1, "progress_bar": False,
                          "report_to": ["jsonl"], "output_dir": str(tmp_path / "run")}}}))
    log = open(tmp_path / "cli.log", "w")
    proc = _launch([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                    "-m", "comarl", "train", str(cfg)], log)
    _wait(proc, tmp_path / "cli.log", "torchrun -m comarl train")
    log.close()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]  # one writer
    state = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["world_size"] == 2
    assert (tmp_path / "run" / "final" / "agent1").exists()


# ------------------------------------------------------------------ arithmetic (single process)

def test_shard_keeps_whole_items_and_may_be_empty():
    items = ["a", "b", "c", "d", "e"]
    assert dist.shard(items, 0, 2) == ["a", "c", "e"]
    assert dist.shard(items, 1, 2) == ["b", "d"]
    assert dist.shard(["e"], 1, 2) == []
    assert sorted(dist.shard(items, 0, 3) + dist.shard(items, 1, 3) + dist.shard(items, 2, 3)) == items


def test_combine_metrics_weights_by_items_and_tolerates_missing_keys():
    # rank 0: 3 items, reward 0.2; rank 1: 1 item, reward 0.6; rank 2: no items (reward NaN, no env key)
    per_rank = [({"reward": 0.2, "env/x": 1.0, "tok/s": 10.0}, 3.0),
                ({"reward": 0.6, "env/x": 3.0, "tok/s": 5.0}, 1.0),
                ({"reward": float("nan"), "tok/s": 0.0}, 0.0)]
    out = dist.combine_metrics(per_rank, sum_keys=("tok/s",))
    assert out["reward"] == pytest.approx((3 * 0.2 + 1 * 0.6) / 4)  # 0.3
    assert out["env/x"] == pytest.approx((3 * 1.0 + 3.0) / 4)  # 1.5
    assert out["tok/s"] == 15.0
    # a value every rank agrees on (an all-reduced loss) is unchanged, even with a weight-0 rank
    assert dist.combine_metrics([({"loss": 2.0}, 2.0), ({"loss": 2.0}, 0.0)])["loss"] == 2.0
    assert math.isnan(dist.combine_metrics([({"k": float("nan")}, 1.0), ({}, 2.0)])["k"])


def test_per_node_metrics_weigh_by_their_observations_across_ranks():
    # rank 0: 2 items, 4 second-turn nodes with mean 0.5; rank 1: 2 items, 1 second-turn node at 1.0
    per_rank = [({"reward/turn1": 0.5, "return/mean": 0.2}, 2.0, {"reward/turn1": 4.0}),
                ({"reward/turn1": 1.0, "return/mean": 0.4}, 2.0, {"reward/turn1": 1.0})]
    out = dist.combine_metrics(per_rank)
    assert out["reward/turn1"] == pytest.approx((4 * 0.5 + 1.0) / 5)  # 0.6 (by items it would be 0.75)
    assert out["return/mean"] == pytest.approx(0.3)  # no observation count: by items


def test_rollout_metrics_weigh_chunks_by_nodes_or_items():
    from types import SimpleNamespace

    from comarl.rollout import rollout_metrics

    def chunk(items, metrics, counts):
        turns = torch.tensor([0] * items + [1] * counts.get("reward/turn1", 0))
        return SimpleNamespace(tree=None, agents=[SimpleNamespace(turns=turns)], metrics=metrics,
                               metric_counts={k: float(v) for k, v in counts.items()})

    a = chunk(3, {"reward/turn1": 0.2, "return/mean": 1.0}, {"reward/turn1": 1})
    b = chunk(1, {"reward/turn1": 0.6, "return/mean": 3.0}, {"reward/turn1": 3})
    means, counts = rollout_metrics([a, b])
    assert means["reward/turn1"] == pytest.approx((0.2 + 3 * 0.6) / 4)  # 0.5: by second-turn nodes
    assert means["return/mean"] == pytest.approx((3 * 1.0 + 3.0) / 4)  # 1.5: by items (root nodes)
    assert counts == {"reward/turn1": 4.0}


def test_single_process_helpers_are_identity():
    assert not dist.is_distributed() and dist.world_size() == 1 and dist.rank() == 0
    assert dist.all_reduce_sum(7) == 7
    assert dist.reduce_metrics({"a": 1.0}, weight=0) == {"a": 1.0}
    m = torch.nn.Linear(2, 2)
    m(torch.ones(1, 2)).sum().backward()
    g = m.weight.grad.clone()
    dist.all_reduce_grads(m)
    assert torch.equal(m.weight.grad, g)


def test_resume_position_with_another_world_size():
    # saved: 2 ranks x batch 4 = 8 items per step, 3 steps into the epoch -> 24 items seen
    assert dist.resume_position(3, 8, 16) == 1  # 4 ranks (16/step): batch 1 re-reads items 16..23
    assert dist.resume_position(3, 8, 4) == 6  # 1 rank (4/step): batch 6 starts at item 24 exactly
    assert dist.resume_position(3, 8, 12) == 2  # 3 ranks (12/step): 24 // 12
    assert dist.resume_position(0, 8, 12) == 0
    assert dist.resume_position(3, 8, 8) == 3  # 2 ranks x 4 -> 1 rank x 8: the same global batch
    # steps left: 3 epochs of 5 steps, at epoch 1 batch 2 -> (3-1)*5-2 = 8
    assert dist.steps_left(1, 2, 5, 3) == 8
    assert dist.steps_left(3, 0, 5, 3) == 0


def test_sampling_seeds_differ_per_rank_and_resume_step():
    seeds = {dist.sampling_seed(0, r, s) for r in range(8) for s in (0, 10)}
    assert len(seeds) == 16


def test_rebuilt_scheduler_continues_with_the_new_horizon():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = build_scheduler(opt, "linear", 0, 10)
    for _ in range(4):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.6)  # 1 - 4/10
    sched = rebuild_scheduler(opt, sched, "linear", 0, 8)
    assert opt.param_groups[0]["lr"] == pytest.approx(lr_factor(4, "linear", 0, 8)) == pytest.approx(0.5)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1 - 5 / 8)


def test_trainer_resumes_a_checkpoint_written_by_more_ranks(tmp_path):
    """A checkpoint from 2 ranks x batch 2 after 1 step (4 items seen) resumed by 1 rank x batch 2: batch 2."""
    from comarl import AgentConfig, FunctionEnv, RolloutConfig, RunConfig, TrainConfig, Trainer

    def make(batch_size=2, **run):
        agents = [AgentConfig(model="tiny", max_new_tokens=4, model_kwargs={"hidden_size": 32, "num_layers": 1})]
        env = FunctionEnv([lambda it: f"item {it['x']}"], lambda r, it: float(len(r[0]) % 3))
        cfg = TrainConfig(rollout=RolloutConfig(num_generations=2),
                          run=RunConfig(batch_size=batch_size, epochs=2, shuffle=False, progress_bar=False,
                                        report_to=[], output_dir=str(tmp_path), lr_scheduler="linear", **run))
        return Trainer(agents, env, [{"x": x} for x in range(10)], cfg)

    t = make(max_steps=1)
    t.train()  # checkpoint-1, written as world size 1
    state_file = tmp_path / "checkpoint-1" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["world_size"], state["global_batch"] = 2, 4  # pretend 2 ranks wrote it: 1 step x 4 items
    state_file.write_text(json.dumps(state))
    from comarl.runs.checkpoint import write_manifest
    write_manifest(tmp_path / "checkpoint-1")  # the edited file's new size (else it no longer verifies)
    r = make(resume="latest")
    assert r.state.step == 1 and r.state.epoch == 0
    assert r.state.batch_in_epoch == 2  # 4 items seen / 2 per step
    # epochs run to the end in the new batch size: 2 epochs x 5 steps = 10 batches, 2 done -> 8 left
    assert r.total_steps == 1 + 8
    assert [b["x"] for b in r.next_batch()] == [4, 5]
    # 1 rank x batch 4 after 2 ranks x batch 2: the same global batch, so the same position and schedule
    same = make(resume="latest", batch_size=4)
    assert same.state.batch_in_epoch == 1 and same.total_steps == 2 * 3
    assert [b["x"] for b in same.next_batch()] == [4, 5, 6, 7]
