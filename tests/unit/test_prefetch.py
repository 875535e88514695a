"""The sampling worker's schedule (``comarl/rollout/prefetch.py``): batch b is sampled with version max(0, b - k)
whichever thread runs first, a push waits for the batches of older versions, a pause holds the worker, an error
surfaces where the batch is taken."""
import random
import threading
import time

import pytest

from comarl.rollout.prefetch import Prefetcher


def _trainer_loop(work: Prefetcher, steps: int, k: int, rng: random.Random, weights: list[int]) -> list[tuple]:
    """What ``PrefetchedBatches.next`` and ``Overlap.sync`` do, with random delays: take batch t, 'update',
    push version t+1."""
    got, submitted = [], 0
    for t in range(steps):
        work.at_least(t)
        while submitted <= min(t + k, steps - 1):
            work.submit(submitted, f"items{submitted}")
            submitted += 1
        result, _ = work.take(t)
        got.append(result)
        time.sleep(rng.random() * 0.004)  # the update
        work.push(t + 1, lambda t=t: weights.__setitem__(0, t + 1))
    return got


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_batch_b_is_sampled_with_version_b_minus_k_whatever_the_timing(k, seed):
    rng = random.Random(seed)
    weights = [0]  # what the worker's copy holds: written only by pushes

    def sample(b, payload, version):
        time.sleep(rng.random() * 0.004)
        return b, payload, version, weights[0]

    work = Prefetcher(sample, k)
    got = _trainer_loop(work, 8, k, rng, weights)
    work.close()
    assert [(b, p) for b, p, _, _ in got] == [(b, f"items{b}") for b in range(8)]
    assert [v for _, _, v, _ in got] == [max(0, b - k) for b in range(8)]
    assert [w for _, _, _, w in got] == [max(0, b - k) for b in range(8)]  # the weights it read are that version's


def test_a_push_waits_for_the_batch_being_sampled_and_a_pause_holds_the_worker():
    started, release, log = threading.Event(), threading.Event(), []

    def sample(b, payload, version):
        log.append(("start", b))
        started.set()
        release.wait(5)
        log.append(("end", b))
        return b

    work = Prefetcher(sample, 1)
    work.submit(0, None)
    work.submit(1, None)
    assert started.wait(5)
    pusher = threading.Thread(target=lambda: work.push(1, lambda: log.append(("push", 1))))
    pusher.start()
    time.sleep(0.05)
    assert ("push", 1) not in log  # batch 0 is being sampled; batch 1 (version 0 allowed) must also come first
    release.set()
    pusher.join(5)
    assert log == [("start", 0), ("end", 0), ("start", 1), ("end", 1), ("push", 1)]
    with work.paused():
        work.submit(2, None)
        time.sleep(0.05)
        assert ("start", 2) not in log
    assert work.take(2)[0] == 2
    work.close()


def test_an_error_in_sampling_is_raised_where_the_batch_is_taken_and_pending_leaves_it_out():
    def sample(b, payload, version):
        if b == 1:
            raise RuntimeError("the environment broke")
        return b

    work = Prefetcher(sample, 2)
    for b in range(3):
        work.submit(b, None)
    assert work.pending() == {0: 0, 2: 2}
    assert work.take(0)[0] == 0
    with pytest.raises(RuntimeError, match="the environment broke"):
        work.take(1)
    with pytest.raises(KeyError, match="batch 7 was never submitted"):
        work.take(7)
    work.close()


def test_restored_batches_are_taken_first_and_the_next_submission_follows_them():
    work = Prefetcher(lambda b, p, v: (b, v), 1)
    work.restore(5, "from the checkpoint")
    work.at_least(5)
    work.submit(6, None)
    assert work.take(5)[0] == "from the checkpoint"
    assert work.take(6)[0] == (6, 5)
    with pytest.raises(ValueError, match="batch 8 submitted after 6"):
        work.submit(8, None)
    work.close()


def test_max_staleness_below_one_is_not_a_worker():
    with pytest.raises(ValueError, match="max_staleness must be >= 1"):
        Prefetcher(lambda b, p, v: None, 0)


def test_a_push_right_after_taking_a_batch_does_not_reach_the_next_batch():
    """No time between taking batch t and pushing version t+1 (the window in which the worker has finished batch t
    but not yet picked up batch t+1): batch t+1 must still be sampled with version t."""
    weights = [0]
    work = Prefetcher(lambda b, p, v: (v, weights[0]), 1)
    steps = 300
    got = []
    for t in range(steps):
        work.at_least(t)
        for b in ([0, 1] if t == 0 else [t + 1] if t + 1 < steps else []):
            work.submit(b, None)
        got.append(work.take(t)[0])
        work.push(t + 1, lambda t=t: weights.__setitem__(0, t + 1))
    work.close()
    assert got == [(max(0, b - 1), max(0, b - 1)) for b in range(steps)]
