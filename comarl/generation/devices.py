"""Which agents generate together: grouping by device and when to overlap devices."""
from __future__ import annotations


def device_groups(devices: list[str]) -> list[list[int]]:
    """Agent indices grouped by device, in first-seen order: ["cuda:0","cuda:1","cuda:0"] -> [[0, 2], [1]]."""
    groups: dict[str, list[int]] = {}
    for i, d in enumerate(devices):
        groups.setdefault(d, []).append(i)
    return list(groups.values())


def overlap_generation(devices: list[str]) -> bool:
    """Generate in a thread per device only when agents sit on two or more distinct CUDA devices."""
    return len({d for d in devices if d.startswith("cuda")}) >= 2
