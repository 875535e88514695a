"""FSDP2 sharding (train.hardware.sharding=fsdp): 2 gloo ranks == 1 process, sharded checkpoints, HF folders, HSDP.

The runs are in tests/distributed/fsdp_worker.py (see its docstring for the scenarios and
how sampling is made independent of the split of items over ranks). One
2-rank launch trains (and resumes 2 -> 2 ranks) while this process runs the
single-process side; then this process resumes the 2-rank checkpoint
(2 ranks -> 1 process). The tests read the outputs.
"""
import json
import pytest
import torch

from comarl.core.config_io import ConfigError
from comarl.config import HardwareConfig, TrainConfig
from comarl.compute.sharding import block_modules, mesh_shape, mixed_precision_policy

import fsdp_worker
from sharded_runs import LONG, launch_beside
from sharded_runs import load_result as _load
from sharded_runs import max_diff as _max_diff


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")

    def single():
        for name in ("two", "one", "agent", "fp16"):
            fsdp_worker.run(name, tmp / "single", 4, None)

    launch_beside(tmp, fsdp_worker.__file__, ["two", "resume", "one", "hsdp1", "hsdp2", "bf16", "fp16", "gc", "agent",
                                              "plain", "from_plain"], "torchrun with 2 sharded ranks", single)
    fsdp_worker.run("resume", tmp / "single", 4, str(tmp / "multi"))
    return tmp


@pytest.mark.slow
@pytest.mark.timeout(LONG)
@pytest.mark.parametrize("name", ["two", "one"])
def test_two_sharded_ranks_match_one_process(runs, name):
    """two: a full and a LoRA agent; one: one full agent with a sharded reference, 2 passes, clipping active."""
    r0, r1, one = _load(runs, "multi", name, 0), _load(runs, "multi", name, 1), _load(runs, "single", name)
    assert r0["sharded"] and r0["world_size"] == 2 and not one["sharded"]
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0  # the gathered weights agree on every rank
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5  # float noise only (measured 6e-6 / 2e-5)
    for m0, m1 in zip(r0["history"], one["history"], strict=True):
        for k in [k for k in m1 if k.endswith(("/grad_norm", "/loss")) or k == "reward/mean"]:
            assert m0[k] == pytest.approx(m1[k], rel=1e-4, abs=1e-6, nan_ok=True), k
    # rank 0 built the models (agents and reference copies) on the CPU, rank 1 on `meta`: filled from rank 0
    assert r1["meta_adds"] and all(r1["meta_adds"]) and not any(r0["meta_adds"])
    assert one["meta_adds"] == []  # one process: nothing to shard with
    if name == "one":
        # step 2: NaN reward on rank 0's only item, no item on rank 1: both passes skipped together, no hang
        assert [m["count/nonfinite_skips"] for m in r0["history"]] == [0, 2, 2]
        assert [m["count/nonfinite_skips"] for m in one["history"]] == [0, 2, 2]
        assert "agent0/grad_norm" not in r0["history"][1]
        # grad norms above max_grad_norm=0.1: the clipping (over DTensor shards) was active
        assert all(r0["history"][s]["agent0/grad_norm"] > 0.1 for s in (0, 2))
        assert all("agent0/kl" in m for m in r0["history"])
    else:
        assert all(m["agent1/grad_norm"] > 0 for m in r0["history"])  # the LoRA adapter learnt every step


@pytest.mark.slow
@pytest.mark.timeout(LONG)
@pytest.mark.parametrize("name", ["hsdp1", "hsdp2"])
def test_hsdp_meshes_match_one_process(runs, name):
    """fsdp_shard_size 1 -> mesh (2, 1) (replicate only), 2 -> mesh (1, 2): the same weights as one process."""
    r0, r1, one = _load(runs, "multi", name, 0), _load(runs, "multi", name, 1), _load(runs, "single", "one")
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_gathering_one_agent_at_a_time_matches_one_process(runs):
    """fsdp_gather=agent: multi-turn branches ending on one rank only, ReMax greedy runs, a rank with no
    item (step 2) and unequal evaluation batches keep the ranks in step, with the one-process numbers."""
    r0, r1, one = (_load(runs, "multi", "agent", 0), _load(runs, "multi", "agent", 1),
                   _load(runs, "single", "agent"))
    assert r0["sharded"] and _max_diff(r0["weights"], r1["weights"]) == 0.0
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5
    for m0, m1 in zip(r0["history"], one["history"], strict=True):
        for k in [k for k in m1 if k.endswith(("/grad_norm", "/loss")) or k == "reward/mean"]:
            assert m0[k] == pytest.approx(m1[k], rel=1e-4, abs=1e-6), k
    # per-node metrics are weighted by their nodes over ranks (rank 0 holds every second-turn node of step 1)
    for m0, m1 in zip(r0["history"], one["history"]):
        for k in [k for k in m1 if k.startswith(("reward/turn", "eval/reward/"))]:
            assert m0[k] == pytest.approx(m1[k], rel=1e-5), k


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_gradient_checkpointing_under_sharding_matches_one_process(runs):
    """Recomputing each block in the backward re-gathers its FSDP unit: same weights, same skips."""
    r0, one = _load(runs, "multi", "gc", 0), _load(runs, "single", "one")
    assert _max_diff(r0["weights"], _load(runs, "multi", "gc", 1)["weights"]) == 0.0
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5
    assert [m["count/nonfinite_skips"] for m in r0["history"]] == [0, 2, 2]


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_bf16_mixed_precision_policy_runs_sharded(runs):
    r0, r1 = _load(runs, "multi", "bf16", 0), _load(runs, "multi", "bf16", 1)
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0
    assert all(w.dtype == torch.float32 for w in r0["weights"][0].values())  # float32 master weights
    g = r0["history"][0]["agent0/grad_norm"]
    assert g > 0 and torch.isfinite(torch.tensor(g))


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_fp16_loss_scaler_unscales_sharded_gradients(runs):
    """float16 FSDP policy + the sharded scaler against one process's hooked scaler (fp16 autocast): the
    same skips, the same scale on both ranks, gradient norms and weights as close as float16 allows."""
    r0, r1, one = _load(runs, "multi", "fp16", 0), _load(runs, "multi", "fp16", 1), _load(runs, "single", "fp16")
    assert r0["sharded"] and r0["scalers"][0][0] and not one["scalers"][0][0]  # sharded mode / hook mode
    assert r0["scalers"] == r1["scalers"]  # S and the overflow count agree on every rank ...
    assert r0["scalers"][0][1:] == one["scalers"][0][1:]  # ... and with the hooks (step 2's NaN is no overflow)
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0
    assert all(w.dtype == torch.float32 for w in r0["weights"][0].values())
    assert [m["count/nonfinite_skips"] for m in r0["history"]] == [0, 2, 2]
    assert [m["count/nonfinite_skips"] for m in one["history"]] == [0, 2, 2]
    for s in (0, 2):  # unscaled: the norms of the true gradient (S = 65536 would show as a factor)
        assert r0["history"][s]["agent0/grad_norm"] == pytest.approx(one["history"][s]["agent0/grad_norm"], rel=2e-2)
    # weights: no tight bound; the float16 FSDP policy casts every weight while autocast keeps fp32 ops, and
    # Adam turns those last-bit differences in near-zero gradients into steps of up to lr (measured 1.6e-2)
    assert all(torch.isfinite(w).all() for w in r0["weights"][0].values())


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_sharded_checkpoint_resumes_exactly_on_two_ranks_and_on_one(runs):
    ckpt = runs / "multi" / "two" / "run" / "checkpoint-2"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["sharded"] and state["world_size"] == 2 and state["step"] == 2
    assert (ckpt / "agent0" / "dcp" / ".metadata").exists() and (ckpt / "agent1" / "scheduler.pt").exists()
    assert not list((runs / "multi" / "two" / "run").glob("*.tmp"))
    full = _load(runs, "multi", "two")
    resumed = _load(runs, "multi", "resume")
    assert _max_diff(resumed["weights"], full["weights"]) == 0.0  # 2 -> 2 ranks: bit-exact
    assert resumed["history"][0]["agent0/grad_norm"] == full["history"][2]["agent0/grad_norm"]
    on_one = _load(runs, "single", "resume")  # 2 ranks -> 1 process: DCP reshards into whole models
    assert not on_one["sharded"]
    assert _max_diff(on_one["weights"], full["weights"]) < 5e-5


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_checkpoint_written_without_sharding_resumes_sharded(runs):
    """Whole weights and AdamW state (full agent and LoRA adapter) are split into shards on load: step 3 as
    in the unbroken data-parallel run."""
    plain, resumed = _load(runs, "multi", "plain"), _load(runs, "multi", "from_plain")
    assert not plain["sharded"] and resumed["sharded"]
    assert not (runs / "multi" / "plain" / "run" / "checkpoint-2" / "agent0" / "dcp").exists()
    assert _max_diff(resumed["weights"], plain["weights"]) < 5e-5
    assert resumed["history"][0]["agent0/grad_norm"] == pytest.approx(plain["history"][2]["agent0/grad_norm"],
                                                                      rel=1e-4)


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_saved_folders_are_plain_hugging_face_and_reload(runs):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    weights = _load(runs, "multi", "two")["weights"]
    final = runs / "multi" / "two" / "final"
    m = AutoModelForCausalLM.from_pretrained(final / "agent0")
    got = m.state_dict()
    assert max(float((got[k] - v).abs().max()) for k, v in weights[0].items()) == 0.0
    lora = PeftModel.from_pretrained(m, final / "agent1")  # agent1's base has agent0's shapes
    adapter = {k.replace(".default.", ".agent1."): p for k, p in lora.named_parameters() if "lora_" in k}
    assert sorted(adapter) == sorted(weights[1])
    assert max(float((adapter[k] - v).abs().max()) for k, v in weights[1].items()) == 0.0


# ------------------------------------------------------------------ single process

def test_mesh_shape_1d_and_hsdp():
    assert mesh_shape(4, 0) == (4,)
    assert mesh_shape(8, 4) == (2, 4)  # 2 replicas x 4 shards
    assert mesh_shape(2, 1) == (2, 1) and mesh_shape(2, 2) == (1, 2)
    with pytest.raises(ConfigError, match="train.hardware.fsdp_shard_size: must divide the number of ranks \\(6\\)"):
        mesh_shape(6, 4)


def test_mixed_precision_maps_to_fsdp_policy():
    assert mixed_precision_policy("no") is None
    p = mixed_precision_policy("bf16")
    assert p.param_dtype == torch.bfloat16 and p.reduce_dtype == torch.float32
    p = mixed_precision_policy("fp16")
    assert p.param_dtype == torch.float16 and p.reduce_dtype == torch.float32


def test_blocks_are_the_decoder_layers_and_a_model_without_them_is_refused():
    from comarl.models.tiny_model import tiny_model

    model, _ = tiny_model(hidden_size=32, num_layers=3)
    assert [type(b).__name__ for b in block_modules(model, "agent0")] == ["Qwen2DecoderLayer"] * 3
    with pytest.raises(ConfigError, match="agent1's model \\(Linear\\) names no transformer block"):
        block_modules(torch.nn.Linear(2, 2), "agent1")


@pytest.mark.parametrize("changes, message", [
    ({"sharding": "zero3"}, "train.hardware.sharding: must be none or fsdp"),
    ({"sharding": "fsdp", "reference_device": "cpu"}, "train.hardware.reference_device"),
    ({"fsdp_shard_size": -1}, "train.hardware.fsdp_shard_size: must be >= 0"),
    ({"fsdp_gather": "block"}, "train.hardware.fsdp_gather: must be team or agent, got 'block'"),
])
def test_sharding_config_errors_name_the_key(changes, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(hardware=HardwareConfig(**changes)).validate(2)
