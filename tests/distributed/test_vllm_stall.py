"""A weight push that never returns (a stalled vLLM engine on one rank of two) stops the whole run within
``train.hardware.vllm.push_timeout_s``: one line naming the rank and the agent, no rank left waiting in a
collective (torchrun stops the other), and the checkpoint of the last good step loads.

tests/distributed/vllm_worker.py ``stall``: 2 gloo ranks, two tiny agents (hidden 128), a checkpoint every step;
rank 1's engine of agent1 sleeps through its second push (step 2), the limit is 5 s. Measured here: the launch
ends ~25 s after it starts (engines ~15 s, the stall 5 s). Needs vLLM (``make test-vllm``); skipped otherwise.
"""
import time

import pytest

from comarl.runs import checkpoint as ckpt
from comarl.generation.vllm_settings import vllm_installed
from sharded_runs import LONG, TORCHRUN
from test_distributed import _launch

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed "
                                                   "(scripts/install_vllm_cpu.sh; make test-vllm runs these)")]


@pytest.mark.timeout(LONG)
def test_a_stalled_push_on_one_rank_stops_the_run_with_one_line_and_the_checkpoint_stays_usable(tmp_path):
    import vllm_worker

    log_path = tmp_path / "stall.log"
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = _launch(TORCHRUN + [vllm_worker.__file__, str(tmp_path / "out"), "stall"], log)
        rc = proc.wait(timeout=LONG - 60)
    took = time.monotonic() - started
    text = log_path.read_text()
    assert rc != 0, text[-3000:]
    lines = [x for x in text.splitlines() if x.startswith("comarl:")]
    assert lines == ["comarl: run stopped: rank 1: the weight push of agent1 to its vLLM engine took more than 5 s "
                     "(train.hardware.vllm.push_timeout_s); the engine may be hung. The newest checkpoint stays "
                     "usable: train.run.resume=latest (or --max-restarts) continues from it"], text[-3000:]
    assert "exitcode  : 3" in text  # rank 1 left with the watchdog's status; torchrun stopped rank 0
    run = tmp_path / "out" / "stall" / "run"
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1"]
    ckpt.verify_checkpoint(run / "checkpoint-1")
    from comarl.models.agents import build_agents
    from comarl.training.optim import build_optimizer, build_scheduler

    agents = build_agents(vllm_worker.agents(False))
    optimizers = [build_optimizer(a.model, a.config, f"agents.{i}") for i, a in enumerate(agents)]
    schedulers = [build_scheduler(o, "constant", 0, 3) for o in optimizers]
    assert ckpt.load_checkpoint(run / "checkpoint-1", agents, optimizers, schedulers)["step"] == 1
    print(f"\nstalled push: the launch ended after {took:.0f} s")
