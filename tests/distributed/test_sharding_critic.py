"""Actor-critic (iac, maac) under FSDP2 sharding: 2 gloo ranks == 1 process, sharded critic checkpoints.

The runs are in tests/distributed/fsdp_critic_worker.py (see its docstring for the
scenarios). One 2-rank launch trains iac and maac sharded, maac under plain
data parallelism and under bf16, and resumes iac 2 -> 2 ranks, while this process runs the
single-process side; then this process resumes the 2-rank iac checkpoint
(2 ranks -> 1 process). The last tests drive ``Critic.update`` in one process
with stand-in collectives.
"""
import copy
import json

import pytest
import torch

import fsdp_critic_worker
from comarl.critics import CriticSettings, ValueHead, ValueModel
from comarl.critics.critic import Critic, _Targets
from comarl.critics.inputs import AgentInputs
from comarl.models.tiny_model import tiny_model
from sharded_runs import LONG, launch_beside
from sharded_runs import load_result as _load
from sharded_runs import max_diff as _max_diff


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp_critic")

    def single():
        for name in ("iac", "maac"):
            fsdp_critic_worker.run(name, tmp / "single", 4, None)

    launch_beside(tmp, fsdp_critic_worker.__file__, ["iac", "resume", "maac", "dp_maac", "bf16", "iac_agent"],
                  "torchrun with 2 sharded actor-critic ranks", single)
    fsdp_critic_worker.run("resume", tmp / "single", 4, str(tmp / "multi"))
    return tmp


def _same_metrics(multi, single, keys=("/grad_norm", "/loss", "/value_loss")):
    for m0, m1 in zip(multi, single, strict=True):
        for k in [k for k in m1 if k.endswith(keys) or k == "reward/mean"]:
            assert m0[k] == pytest.approx(m1[k], rel=1e-4, abs=1e-6, nan_ok=True), k


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_value_heads_gathered_one_agent_at_a_time_match_one_process(runs):
    """fsdp_gather=agent: each value head values with only its own agent gathered (step 2: rank 1 has no item)."""
    r0, r1 = _load(runs, "multi", "iac_agent", 0), _load(runs, "multi", "iac_agent", 1)
    one = _load(runs, "single", "iac")
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0 and _max_diff(r0["critic"], r1["critic"]) == 0.0
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5 and _max_diff(r0["critic"], one["critic"]) < 5e-5
    _same_metrics(r0["history"], one["history"])


@pytest.mark.slow
@pytest.mark.timeout(LONG)
@pytest.mark.parametrize("name", ["iac", "maac"])
def test_sharded_actor_critic_matches_one_process(runs, name):
    """iac: Q value heads on a full and a LoRA agent; maac: a separate central critic, NaN value loss in step 2."""
    r0, r1, one = _load(runs, "multi", name, 0), _load(runs, "multi", name, 1), _load(runs, "single", name)
    assert r0["sharded"] and r0["world_size"] == 2 and not one["sharded"]
    assert r0["critic_dtensor"] and all(r0["critic_dtensor"])  # the critic's parameters are FSDP shards
    assert not any(one["critic_dtensor"])
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0 and _max_diff(r0["critic"], r1["critic"]) == 0.0
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5  # measured 9e-6 (iac), 1e-5 (maac)
    assert _max_diff(r0["critic"], one["critic"]) < 5e-5  # measured 4e-8, 1e-6
    _same_metrics(r0["history"], one["history"])
    if name == "iac":
        assert sorted(r0["critic"][0]) == ["head.net.bias", "head.net.weight"]  # the backbone is the agent's
        assert all(m[f"agent{i}/value_loss"] > 0 for m in r0["history"] for i in (0, 1))
    else:
        assert any(k.startswith("backbone.model.layers.1.") for k in r0["critic"][0])  # its own sharded model
        # step 2: NaN on rank 0's only item, nothing on rank 1: critic and both agents skip (2 passes each)
        for h in (r0["history"], one["history"]):
            assert [m["count/nonfinite_skips"] for m in h] == [0, 4, 4]
            assert [m.get("count/critic_nonfinite_skips", 0) for m in h] == [0, 2, 2]  # its 2 passes, counted
            assert h[1]["critic/value_loss"] == 0.0 and h[2]["critic/value_loss"] > 0


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_plain_data_parallel_critic_skips_a_non_finite_step_on_every_rank(runs):
    """sharding=none: rank 0's NaN value loss must stop rank 1's critic step too (Adam would move it on zeros)."""
    r0, r1, one = _load(runs, "multi", "dp_maac", 0), _load(runs, "multi", "dp_maac", 1), _load(runs, "single", "maac")
    assert not r0["sharded"] and r0["world_size"] == 2
    assert _max_diff(r0["critic"], r1["critic"]) == 0.0 and _max_diff(r0["weights"], r1["weights"]) == 0.0
    assert _max_diff(r0["critic"], one["critic"]) < 5e-5
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5
    _same_metrics(r0["history"], one["history"])


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_sharded_critic_checkpoint_resumes_exactly_on_two_ranks_and_on_one(runs):
    ckpt = runs / "multi" / "iac" / "run" / "checkpoint-2"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["sharded"] and state["world_size"] == 2 and state["step"] == 2
    assert (ckpt / "critic0" / "dcp" / ".metadata").exists() and (ckpt / "critic1" / "dcp" / ".metadata").exists()
    assert not (ckpt / "critic.pt").exists()
    full, resumed = _load(runs, "multi", "iac"), _load(runs, "multi", "resume")
    assert _max_diff(resumed["weights"], full["weights"]) == 0.0  # 2 -> 2 ranks: bit-exact
    assert _max_diff(resumed["critic"], full["critic"]) == 0.0
    for k in ("agent0/value_loss", "agent1/value_loss", "agent0/grad_norm"):
        assert resumed["history"][0][k] == full["history"][2][k], k
    on_one = _load(runs, "single", "resume")  # 2 ranks -> 1 process: DCP reshards into whole models
    assert not on_one["sharded"]
    assert _max_diff(on_one["weights"], full["weights"]) < 5e-5
    assert _max_diff(on_one["critic"], full["critic"]) < 5e-5
    assert on_one["history"][0]["agent0/value_loss"] == pytest.approx(full["history"][2]["agent0/value_loss"],
                                                                      rel=1e-4)


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_bf16_mixed_precision_policy_covers_the_sharded_critic(runs):
    r0, r1, fp32 = _load(runs, "multi", "bf16", 0), _load(runs, "multi", "bf16", 1), _load(runs, "multi", "maac")
    assert all(r0["critic_dtensor"]) and _max_diff(r0["critic"], r1["critic"]) == 0.0
    assert all(w.dtype == torch.float32 for w in r0["critic"][0].values())  # float32 master weights
    loss = r0["history"][0]["critic/value_loss"]  # computed in bf16: near the float32 run's first step
    assert loss == pytest.approx(fp32["history"][0]["critic/value_loss"], rel=0.05)


# ------------------------------------------------------------------ single process, stand-in collectives

def _critic(targets):
    """A value head on a tiny model (the backbone stays the 'agent''s), micro-batch 2, 4 value inputs."""
    model, tok = tiny_model(hidden_size=32, num_layers=1)
    torch.manual_seed(0)
    vm = ValueModel(model, tok, ValueHead(32), owns_backbone=False)
    settings = CriticSettings(lr=1e-1)
    critic = Critic([vm], [torch.optim.AdamW(vm.parameters(), lr=settings.lr)], AgentInputs("v", 1), settings,
                    ["agent0"], 1.0, micro_batch_size=2, max_grad_norm=1.0)
    ids = [[5, 6, 7], [8, 9], [10], [11, 12]]
    critic._targets[0] = _Targets(ids, torch.zeros(4), torch.tensor(targets))
    return critic


def _head(critic):
    return [p.detach().clone() for p in critic.models[0].head.parameters()]


def test_idle_micro_batches_of_a_sharded_critic_add_nothing():
    """Sharded, another rank has 2 more micro-batches: this rank runs 2 zero-loss forwards/backwards, and
    steps exactly as without them."""
    plain = _critic([1.0, -1.0, 0.5, 2.0])
    lockstep = copy.deepcopy(plain)
    lockstep.sharded = True
    calls = []
    plain.update(0, 0)
    lockstep.comm = _Comm(all_reduce_max=lambda n: calls.append(n) or n + 2)
    lockstep.update(0, 0)
    assert calls == [2]  # this rank's 2 micro-batches; the max over ranks is 4
    for p, q in zip(_head(plain), _head(lockstep)):
        assert torch.equal(p, q)
    for p, q in zip(plain.models[0].backbone.parameters(), lockstep.models[0].backbone.parameters()):
        assert torch.equal(p.grad, q.grad)  # the agent's share of the value loss, left for its own step


def _Comm(**fakes):
    """The collectives a critic calls, with some replaced by a stand-in for the other ranks' share."""
    from types import SimpleNamespace
    from comarl.compute import distributed as dist
    calls = {"all_reduce_sum": dist.all_reduce_sum, "all_reduce_max": dist.all_reduce_max,
             "all_reduce_grads": dist.all_reduce_grads}
    return SimpleNamespace(**{**calls, **fakes})


def test_a_non_finite_value_loss_skips_the_step_and_keeps_nan_out_of_the_agent():
    """Sharded: the NaN micro-batch backpropagates zero (FSDP needs the backward) and the rest run idle."""
    critic = _critic([1.0, -1.0, float("nan"), 2.0])
    critic.sharded = True
    before = _head(critic)
    out = critic.update(0, 0)
    assert all(torch.equal(p, q) for p, q in zip(before, _head(critic)))  # no step
    grads = [p.grad for p in critic.models[0].backbone.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert out["agent0/value_loss"] > 0  # the finite first micro-batch


def test_a_non_finite_loss_on_another_rank_skips_this_ranks_critic_step():
    """Plain data parallelism: this rank's loss is finite, the other rank's was not (its flag comes in the
    sum): no rank steps. Stand-in all_reduce_sum adds the other rank's (count 4, bad 1, loss 0)."""
    critic = _critic([1.0, -1.0, 0.5, 2.0])
    before = _head(critic)
    other = iter([4, 1, 0.0])
    critic.comm = _Comm(all_reduce_sum=lambda v: v + next(other))
    critic.update(0, 0)
    assert all(torch.equal(p, q) for p, q in zip(before, _head(critic)))
    fine = _critic([1.0, -1.0, 0.5, 2.0])
    other = iter([4, 0, 0.0])
    fine.comm = _Comm(all_reduce_sum=lambda v: v + next(other))
    fine.update(0, 0)
    assert any(not torch.equal(p, q) for p, q in zip(before, _head(fine)))  # the same with the other rank fine
