"""Where an agent's samples are cut into micro-batches (one forward/backward each)."""
from __future__ import annotations


def micro_batch_spans(group_sizes: list[int], micro_batch_size: int, keep_groups: bool) -> list[tuple[int, int]]:
    """``[start, end)`` spans over the samples of consecutive groups (group-major order).

    ``keep_groups`` False: fixed spans of ``micro_batch_size`` samples. True
    (shared prefixes): a span takes whole groups while they fit in
    ``micro_batch_size``, so a group's samples meet their prompt in one forward
    and the prompt is encoded once; a group larger than ``micro_batch_size`` is
    cut into pieces of that size (its prompt encoded once per piece). A span
    never holds more than ``micro_batch_size`` samples either way (same memory cap).

    E.g. sizes [4, 4, 4], micro-batch 10: keep_groups -> [(0, 8), (8, 12)];
    fixed -> [(0, 10), (10, 12)]. Sizes [4], micro-batch 3 -> [(0, 3), (3, 4)].
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    n = sum(group_sizes)
    if not keep_groups:
        return [(s, min(s + micro_batch_size, n)) for s in range(0, n, micro_batch_size)]
    spans: list[tuple[int, int]] = []
    start = end = 0
    for g in group_sizes:
        if end - start + g > micro_batch_size and end > start:
            spans.append((start, end))
            start = end
        if g > micro_batch_size:  # a group alone is too big: cut it
            for s in range(end, end + g, micro_batch_size):
                spans.append((s, min(s + micro_batch_size, end + g)))
            start = end = end + g
            continue
        end += g
    if end > start:
        spans.append((start, end))
    return spans
