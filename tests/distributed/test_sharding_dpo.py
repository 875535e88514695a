"""The DPO family under FSDP2 sharding (madpo, madpo_iter, madpo_offline, the centralised actor): 2 gloo ranks ==
1 process, and madpo_iter resumes exactly inside a round (2 -> 2 ranks) and on one process (2 -> 1).

One 2-rank launch of tests/distributed/fsdp_dpo_worker.py runs every scenario (see its docstring) while this process
runs the single-process side; then this process resumes the 2-rank madpo_iter checkpoint.
"""
import json

import pytest
import torch

import fsdp_dpo_worker
from sharded_runs import LONG, launch_beside
from sharded_runs import load_result as _load
from sharded_runs import max_diff as _max_diff
SCENARIOS = ["madpo", "iter", "iter_ckpt", "iter_model", "offline", "central"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp_dpo")
    for side in ("multi", "single"):
        fsdp_dpo_worker.write_pairs(tmp / side / "pairs.jsonl")

    def single():
        for name in [*SCENARIOS, "iter_ckpt_lora"]:
            fsdp_dpo_worker.run(name, tmp / "single", 4)

    launch_beside(tmp, fsdp_dpo_worker.__file__, [*SCENARIOS, "iter_ckpt_lora", "iter_resume", "iter_agent"],
                  "torchrun with 2 sharded ranks (DPO family)", single)
    fsdp_dpo_worker.run("iter_resume", tmp / "single", 4, resume_from=tmp / "multi")
    return tmp


GLOBAL = ("pref/loss", "pref/margin", "pref/accuracy", "/grad_norm")  # metrics over every rank's pairs


@pytest.mark.slow
@pytest.mark.timeout(LONG)
@pytest.mark.parametrize("name", SCENARIOS)
def test_two_sharded_ranks_match_one_process(runs, name):
    r0, r1, one = _load(runs, "multi", name, 0), _load(runs, "multi", name, 1), _load(runs, "single", name)
    assert r0["sharded"] and r0["world_size"] == 2 and not one["sharded"]
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0  # the gathered weights agree on every rank
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5  # float noise only
    keys = [k for k in one["history"][0] if k.endswith(GLOBAL)]
    assert "pref/loss" in keys and "agent0/grad_norm" in keys
    if name == "iter":
        keys += ["pref/pool", "pref/pairs"]  # the round's pairs and pool are gathered from every rank
    for m0, m1 in zip(r0["history"], one["history"], strict=True):
        assert [k for k in keys if k in m0] == [k for k in keys if k in m1]  # a skipped step has no grad norm
        for k in [k for k in keys if k in m1]:  # a margin near 0 is float noise in absolute terms (7e-6 at -4.6e-4)
            assert m0[k] == pytest.approx(m1[k], rel=1e-4, abs=1e-4 if k == "pref/margin" else 1e-6, nan_ok=True), k
    if name in ("madpo", "iter", "offline"):
        assert all(m["agent1/grad_norm"] > 0 for m in r0["history"])  # the second agent learnt every step
    if name == "iter_model":  # the fixed comparator is sharded too (whole only in the single process)
        assert r0["comparator_sharded"] and r1["comparator_sharded"] and not one["comparator_sharded"]
        assert r1["meta_adds_in_training"] == [True] and r0["meta_adds_in_training"] == [False]  # rank-0 build
    if name == "iter_ckpt":  # the round's snapshot comparator: read by rank 0 only, built on meta by rank 1
        assert r1["meta_adds_in_training"] == [True] and r0["meta_adds_in_training"] == [False]
    if name == "central":  # step 2's NaN loss, on rank 0 only (rank 1 had no item): skipped on both, no hang
        assert [m["count/nonfinite_skips"] for m in r0["history"]] == [0, 1]
        assert [m["count/nonfinite_skips"] for m in one["history"]] == [0, 1]
        assert "agent0/grad_norm" not in r0["history"][1]


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_madpo_iter_gathering_one_agent_at_a_time_matches_one_process(runs):
    """fsdp_gather=agent in the rounds' sampling too (round 1: rank 1 has no item and joins rank 0's gathers)."""
    r0, r1 = _load(runs, "multi", "iter_agent", 0), _load(runs, "multi", "iter_agent", 1)
    one = _load(runs, "single", "iter")
    assert _max_diff(r0["weights"], r1["weights"]) == 0.0
    assert _max_diff(r0["weights"], one["weights"]) < 5e-5
    assert [m["pref/pairs"] for m in r0["history"]] == [m["pref/pairs"] for m in one["history"]]


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_round_pair_files_are_the_one_process_files(runs):
    """Gathered in one process's order; iter_ckpt's pair_selection: random draws per node, not per rank;
    iter_ckpt_lora's snapshot comparator (a model and an adapter folder) was built on meta by rank 1 and
    still wrote the one process's candidates."""
    r0, r1 = _load(runs, "multi", "iter_ckpt_lora", 0), _load(runs, "multi", "iter_ckpt_lora", 1)
    assert r1["meta_adds_in_training"] == [True, True] and r0["meta_adds_in_training"] == [False, False]
    for name, rounds in (("iter", 2), ("iter_ckpt", 1), ("iter_ckpt_lora", 1), ("iter_model", 2)):
        for r in range(rounds):
            multi = (runs / "multi" / name / "run" / f"round-{r}" / "pairs.jsonl").read_text()
            assert multi and multi == (runs / "single" / name / "run" / f"round-{r}" / "pairs.jsonl").read_text()


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_online_madpo_pairs_out_holds_every_ranks_pairs_in_one_process_order(runs):
    multi = (runs / "multi" / "madpo" / "pairs_out.jsonl").read_text()
    assert multi == (runs / "single" / "madpo" / "pairs_out.jsonl").read_text()
    steps = [json.loads(line)["step"] for line in multi.splitlines()]
    assert steps == sorted(steps) and set(steps) == {0, 1, 2} and len(steps) > 3


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_madpo_iter_rounds_refresh_the_sharded_reference(runs):
    h = _load(runs, "multi", "iter")["history"]
    assert len(h) == 4 and [m["round"] for m in h] == [0, 0, 1, 1]
    # reference = the policy at each round's start: the round's first step sits at the reference (loss ln 2)
    assert h[0]["pref/loss"] == pytest.approx(0.693147, abs=1e-5)
    assert h[2]["pref/loss"] == pytest.approx(0.693147, abs=1e-5)
    assert h[1]["pref/loss"] < 0.69 and h[3]["pref/loss"] < 0.69
    multi, single = ((runs / side / "iter" / "run" / "round-0" / "pairs.jsonl").read_text().splitlines()
                     for side in ("multi", "single"))
    assert len(multi) == 4 and sorted(multi) == sorted(single)  # rank 0 wrote both ranks' pairs


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_madpo_iter_resumes_inside_a_round_on_two_ranks_and_on_one(runs):
    ckpt = runs / "multi" / "iter" / "run" / "checkpoint-3"
    assert json.loads((ckpt / "trainer_state.json").read_text())["sharded"]
    for i in (0, 1):  # round 1's references, sharded, through DCP
        assert (ckpt / f"reference{i}" / "dcp" / ".metadata").exists() and not (ckpt / f"reference{i}.pt").exists()
    full, resumed = _load(runs, "multi", "iter"), _load(runs, "multi", "iter_resume")
    assert _max_diff(resumed["weights"], full["weights"]) == 0.0  # 2 -> 2 ranks: bit-exact
    assert [m["agent0/grad_norm"] for m in resumed["history"]] == [full["history"][3]["agent0/grad_norm"]]
    on_one = _load(runs, "single", "iter_resume")
    assert not on_one["sharded"]
    assert _max_diff(on_one["weights"], full["weights"]) < 5e-5


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_comparator_snapshot_is_gathered_whole_from_the_shards(runs):
    from safetensors.torch import load_file

    multi, single = (load_file(runs / side / "iter_ckpt" / "run" / "round-0" / "policy" / "agent0" /
                               "model.safetensors") for side in ("multi", "single"))
    assert set(single) <= set(multi)  # (the gathered dict also names the tied lm_head)
    assert all(torch.equal(multi[k], v) for k, v in single.items())  # rank 0's starting weights, whole
    assert _load(runs, "multi", "iter_ckpt")["history"][0]["pref/pairs"] > 0


@pytest.mark.slow
@pytest.mark.timeout(LONG)
def test_madpo_offline_splits_the_batch_and_saves_a_sharded_checkpoint(runs):
    h = _load(runs, "multi", "offline")["history"]
    assert [m["pref/pairs"] for m in h] == [4.0, 1.0, 4.0]  # global batches of 2 x 2 pairs over 5 pairs
    ckpt = runs / "multi" / "offline" / "run" / "checkpoint-3"
    assert (ckpt / "agent0" / "dcp" / ".metadata").exists() and (ckpt / "agent1" / "dcp" / ".metadata").exists()


# ------------------------------------------------------------------ single process

def test_copy_weights_in_place_copies_every_tensor_and_refuses_other_shapes():
    from comarl.models.tiny_model import tiny_model
    from comarl.preference.rounds import copy_weights_in_place

    src, _ = tiny_model(hidden_size=32, num_layers=2, seed=1)
    dst, _ = tiny_model(hidden_size=32, num_layers=2, seed=2)
    before = dict(dst.named_parameters())
    copy_weights_in_place(src, dst)
    assert all(torch.equal(p, src.state_dict()[k]) for k, p in dst.state_dict().items())
    assert dict(dst.named_parameters()) == before  # the same parameter objects (in place)
    other, _ = tiny_model(hidden_size=32, num_layers=1)
    with pytest.raises(ValueError, match="other tensor names"):
        copy_weights_in_place(src, other)


def test_offline_pairs_are_checked_whole_and_an_empty_share_gives_empty_data():
    from comarl.preference.rollout_pairs import check_text_pairs, text_pairs_to_ids

    check_text_pairs([{"prompts": ["a", "b"], "chosen": ["x", "y"], "rejected": ["z", "w"]}], 2)
    with pytest.raises(ValueError, match="preference pair 1: 'chosen' needs 2 entries"):
        check_text_pairs([{"prompts": ["a", "b"], "chosen": ["x", "y"], "rejected": ["z", "w"]},
                          {"prompts": ["a", "b"], "chosen": ["x"], "rejected": ["z", "w"]}], 2)
    from comarl.core.steps import AgentPairs
    assert text_pairs_to_ids([object(), object()], []) == [AgentPairs([], [], [], [], None)] * 2
