"""MARLHF's joint reward model under train.hardware.sharding=fsdp: 2 gloo ranks == 1 process, sharded resume.

The runs are in tests/distributed/fsdp_rm_worker.py (scenarios ``iter``: marlhf_iter, ``iter_resume``: its resume inside
a round, ``rlhf``: env.reward_model). One 2-rank launch runs them while this process runs the single-process
side; then this process resumes the 2-rank checkpoint (2 ranks -> 1 process). The tests read the outputs.
Below them, single-process tests of the pieces: the rank's share of the loss, the order of the gathered
pairs, the modules an environment asks the trainer to gather.
"""
import json
import math
import shutil
from types import SimpleNamespace

import pytest
import torch

import fsdp_rm_worker
from sharded_runs import LONG, launch_beside
from sharded_runs import load_result as _load
from sharded_runs import max_diff as _max_diff


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp_rm")
    for side in ("multi", "single"):
        fsdp_rm_worker.write_pairs(tmp / side / "pairs.jsonl")

    def single():
        for name in ("rlhf", "iter"):
            fsdp_rm_worker.run(name, tmp / "single", 4, None)

    launch_beside(tmp, fsdp_rm_worker.__file__, ["rlhf", "iter", "iter_resume", "iter_ddp", "rlhf_ddp"],
                  "torchrun with 2 sharded ranks", single)
    # 2 ranks -> 1 process, in a copy of the 2-rank run's folder (it holds the rounds' pairs)
    shutil.copytree(tmp / "multi" / "iter" / "run", tmp / "from" / "iter" / "run", ignore=shutil.ignore_patterns(
        "checkpoint-4"))
    fsdp_rm_worker.run("iter_resume", tmp / "single", 4, str(tmp / "from"))
    return tmp


def _same_on_both_ranks_and_as_one_process(runs, name, sharded=True):
    r0, r1 = _load(runs, "multi", name, 0), _load(runs, "multi", name, 1)
    one = _load(runs, "single", name.removesuffix("_ddp"))
    assert r0["world_size"] == 2 and r0["sharded"] == r0["rm_sharded"] == sharded  # sharded: DTensor params
    assert not one["sharded"] and not one["rm_sharded"]
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0 and _max_diff(r0["rm"], r1["rm"]) == 0.0
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5  # float noise only (measured 8e-6, sharded)
    assert _max_diff(r0["rm"], one["rm"]) < 5e-5  # measured 3e-6 (iter), 2e-6 (rlhf), sharded
    for m0, m1 in zip(r0["history"], one["history"], strict=True):
        for k in [k for k in m1 if k.endswith(("/grad_norm", "/loss", "reward")) or k == "reward/mean"]:
            assert m0[k] == pytest.approx(m1[k], rel=1e-4, abs=1e-5), k
        for k in [k for k in m1 if k.startswith("rm/") or k in ("pref/pairs", "pref/pool", "pref/policy_wins")]:
            assert m0[k] == m1[k] or (math.isnan(m0[k]) and math.isnan(m1[k])), k  # rm/accuracy included
    return r0, one


@pytest.mark.slow
@pytest.mark.timeout(LONG)
@pytest.mark.parametrize("name", ["iter", "iter_ddp"])
def test_reward_model_rounds_on_two_ranks_match_one_process(runs, name):
    """marlhf_iter: every rank's round pairs (against the policy one round back) gathered in one process's
    order, one reward model fitted data parallel (sharded; iter_ddp: whole, gradients all-reduced), the RL
    steps scoring with it (gathered)."""
    r0, one = _same_on_both_ranks_and_as_one_process(runs, name, sharded=name == "iter")
    assert [m["round"] for m in r0["history"]] == [0, 0, 1, 1]
    assert [m["rm/train_pairs"] for m in r0["history"]] == [2, 2, 5, 5]  # round 1: 5 pairs, batches of 2
    for r in (0, 1):  # rank 0 wrote every rank's pairs, in the order the single process made them
        multi = (runs / "multi" / name / "run" / f"round-{r}" / "pairs.jsonl").read_text()
        assert multi == (runs / "single" / "iter" / "run" / f"round-{r}" / "pairs.jsonl").read_text()
        assert len(multi.splitlines()) == [3, 4][r]


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_sharded_checkpoint_inside_a_round_resumes_exactly(runs):
    ckpt = runs / "multi" / "iter" / "run" / "checkpoint-3"
    assert (ckpt / "reward_model" / "dcp" / ".metadata").exists() and not (ckpt / "reward_model.pt").exists()
    full, resumed = _load(runs, "multi", "iter"), _load(runs, "multi", "iter_resume")
    assert [m["round"] for m in resumed["history"]] == [1]
    assert _max_diff(resumed["weights"], full["weights"]) == 0.0  # 2 -> 2 ranks: bit-exact
    assert _max_diff(resumed["rm"], full["rm"]) == 0.0
    assert resumed["history"][0]["agent0/grad_norm"] == full["history"][3]["agent0/grad_norm"]
    # 2 ranks -> 1 process: the DCP reward model loaded whole (step 4 does not refit it); 1 process x batch 4
    # continues at the data position 2 ranks x batch 2 had reached (the same global batch)
    on_one = _load(runs, "single", "iter_resume")
    assert not on_one["rm_sharded"] and [m["round"] for m in on_one["history"]] == [1]
    assert _max_diff(on_one["rm"], full["rm"]) == 0.0
    assert _max_diff(on_one["weights"], full["weights"]) < 5e-5


@pytest.mark.slow
@pytest.mark.timeout(LONG)
@pytest.mark.parametrize("name", ["rlhf", "rlhf_ddp"])
def test_marlhf_reward_model_on_two_ranks_matches_one_process(runs, name):
    """env.reward_model: fitted sharded (9 pairs in batches of 4: rank 1 idles in the last) before the
    trainer exists, then whole on every rank while the rollouts score with it; rlhf_ddp: not sharded."""
    _same_on_both_ranks_and_as_one_process(runs, name, sharded=name == "rlhf")
    multi = json.loads((runs / "multi" / name / "run" / "reward_model.json").read_text())
    single = json.loads((runs / "single" / "rlhf" / "run" / "reward_model.json").read_text())
    assert multi == single and multi["rm/train_pairs"] == 9 and multi["rm/held_out_pairs"] == 3


# ------------------------------------------------------------------ single process

def _stub_reward_model(scores: dict[str, float]):
    """A JointRewardModel whose score of a joint response is ``scores[its first text]``."""
    from comarl.preference import JointRewardModel

    model = torch.nn.Linear(1, 1)
    model.config = SimpleNamespace(num_labels=1)
    rm = JointRewardModel(model, tokenizer=None)
    rm.scores = lambda prompts, responses: torch.tensor([scores[r[0]] for r in responses])
    return rm


def test_rank_shares_of_the_bradley_terry_loss_sum_to_the_batch_loss():
    rm = _stub_reward_model({"good": 2.0, "bad": 0.0, "meh": 0.0})
    pairs = [{"prompts": ["p"], "chosen": ["good"], "rejected": ["bad"]},   # -log sigmoid(2) = 0.126928
             {"prompts": ["p"], "chosen": ["meh"], "rejected": ["bad"]}]    # -log sigmoid(0) = 0.693147
    w = torch.tensor([1.0, 3.0])
    # whole batch: (1 * 0.126928 + 3 * 0.693147) / 4 = 0.551593
    assert float(rm.share_loss(pairs, [0, 1], [0, 1], w)) == pytest.approx(0.551593, abs=1e-6)
    assert float(rm.share_loss(pairs, [0, 1], [0], w)) == pytest.approx(0.126928 / 4, abs=1e-6)  # rank 0
    assert float(rm.share_loss(pairs, [0, 1], [1], w)) == pytest.approx(3 * 0.693147 / 4, abs=1e-6)  # rank 1
    assert float(rm.share_loss(pairs, [0, 1], [1])) == pytest.approx(0.693147 / 2, abs=1e-6)  # unweighted


def test_round_pairs_of_all_ranks_come_in_one_process_order(monkeypatch):
    """Rank r's item j of a batch is global item j*W + r; pairs sort by (batch, item, node order)."""
    from comarl.compute import distributed as dist
    from comarl.preference.rollout_pairs import all_ranks_pairs as _all_ranks_pairs

    # (batch, [(item, pair)]): rank 1 had no item in batch 1 and sampled batches 0 and 2 only
    per_rank = {0: [(0, [(0, "b0 i0"), (1, "b0 i2 first"), (1, "b0 i2 second")]), (1, [(0, "b1 i0")]),
                    (2, [(0, "b2 i0")])],
                1: [(0, [(0, "b0 i1"), (1, "b0 i3")]), (2, [(0, "b2 i1")])]}
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(dist, "rank", lambda: 0)
    monkeypatch.setattr(dist, "gather_objects", lambda mine: [mine] + [
        [(b, j * 2 + 1, n, p) for b, batch in per_rank[1] for n, (j, p) in enumerate(batch)]])
    assert _all_ranks_pairs(per_rank[0]) == ["b0 i0", "b0 i1", "b0 i2 first", "b0 i2 second", "b0 i3", "b1 i0",
                                             "b2 i0", "b2 i1"]


def test_node_items_follow_the_tree_from_the_roots():
    from comarl.preference.rollout_pairs import node_items as _node_items

    # roots 0, 1 (items 0, 1); node 2 is a child of node 1, node 3 of node 0, node 4 of node 2
    ro = SimpleNamespace(tree=SimpleNamespace(prompts=[None] * 5, child=torch.tensor(
        [[3, -1], [2, -1], [4, -1], [-1, -1], [-1, -1]]), roots=lambda: [0, 1]))
    assert _node_items(ro) == [0, 1, 1, 0, 1]


def test_environments_name_the_reward_model_for_the_rollout_gather():
    from comarl import FunctionEnv
    from comarl.envs.base import rollout_modules
    from comarl.envs.reward_processing import ProcessedRewardEnv
    from comarl.preference import CentralizedEnv, RewardModelEnv

    rm = _stub_reward_model({})
    base = FunctionEnv([lambda it: "a", lambda it: "b"], lambda responses, item: 0.0)
    assert rollout_modules(base) == []
    wrapped = CentralizedEnv(ProcessedRewardEnv(RewardModelEnv(base, rm), scale=2.0))
    assert rollout_modules(wrapped) == [rm.model]


def test_data_parallel_fit_in_one_process_is_the_plain_fit():
    """ParallelFit's collectives are identities in one process: the same losses and weights, bit for bit."""
    from comarl.preference import JointRewardModel
    from comarl.preference.marlhf import load_classifier
    from comarl.preference.parallel_fit import ParallelFit

    pairs = [json.loads(line) for line in fsdp_rm_pairs().splitlines()]
    fitted = []
    for parallel in (None, ParallelFit()):
        torch.manual_seed(0)
        rm = JointRewardModel(*load_classifier("tiny", "cpu"))
        if parallel is not None:
            rm.data_parallel(parallel)
        losses = rm.fit(pairs[:5], epochs=1, batch_size=2, lr=1e-3, weights=[1.0, 2.0, 1.0, 0.5, 1.0])
        fitted.append((losses, rm.model.state_dict(), rm.accuracy(pairs[5:])))
    (l0, w0, a0), (l1, w1, a1) = fitted
    assert l0 == l1 and a0 == a1 and all(torch.equal(w0[k], w1[k]) for k in w0)


def fsdp_rm_pairs() -> str:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        fsdp_rm_worker.write_pairs(Path(d) / "pairs.jsonl", n=8)
        return (Path(d) / "pairs.jsonl").read_text()
