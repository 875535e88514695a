"""BFCL v4 environments: ``bfcl_parallel`` (native parallel categories) and
``bfcl_multiturn_flat`` (one turn of a multi-turn trajectory per row).

``bfcl_parallel`` reads the benchmark files (``shared/data/bfcl_v4`` or
``bfcl_eval/data``: categories ``parallel``, ``parallel_multiple``,
``live_parallel``, ``live_parallel_multiple``, 440 items) or the hub dataset
``OpenMLRL/BFCL-V4-Parallel-Native``; calls match as an unordered set.

``bfcl_multiturn_flat`` reads the hub dataset
``OpenMLRL/BFCL-V4-Parallel-Multi-Turn`` (rows ``{id, user_prompt, function,
ground_truth, official_category, turn_index}``, the dialogue so far in
``user_prompt``) or a local JSONL file of such rows; calls are scored in
order. There is no offline copy; without the hub it says so.
"""
from __future__ import annotations

from typing import Any

from ..registry import EnvEntry, register_env
from .data import load_items as _load
from .env import ToolCallEnv, build_env

PARALLEL_HUB_ID = "OpenMLRL/BFCL-V4-Parallel-Native"
MULTITURN_HUB_ID = "OpenMLRL/BFCL-V4-Parallel-Multi-Turn"


def load_parallel(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """Parallel-category items from ``source`` (None -> the hub dataset)."""
    return _load(source or PARALLEL_HUB_ID, split, limit)


def load_multiturn_flat(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """Flattened multi-turn items from ``source`` (None -> the hub dataset); offline: a clear error."""
    try:
        items = _load(source or MULTITURN_HUB_ID, split, limit)
    except RuntimeError as e:
        raise RuntimeError(
            f"bfcl_multiturn_flat: cannot load {source or MULTITURN_HUB_ID!r} split {split or 'train'!r}. Its data "
            f"exists only on the Hugging Face hub ({MULTITURN_HUB_ID}); no offline copy ships with comarl or "
            f"shared/data. Go online, or set data.train.source to a local JSONL of rows "
            f"{{id, user_prompt, function, ground_truth, turn_index}}. Cause: {e}") from e
    missing = [it["id"] for it in items if "turn_index" not in it]
    if missing:
        raise ValueError(f"bfcl_multiturn_flat: rows without 'turn_index' (ids {missing[:5]}): "
                         "not flattened multi-turn data")
    return items


def build_parallel(num_agents: int = 2, **args: Any) -> ToolCallEnv:
    """``env.args``: role_mode, call_format, reward (weights), prompt (template), scoring (lenient | bfcl)."""
    return build_env("bfcl_parallel", num_agents, args, ordered=False)


def build_multiturn_flat(num_agents: int = 2, **args: Any) -> ToolCallEnv:
    """As :func:`build_parallel`, calls scored in order."""
    return build_env("bfcl_multiturn_flat", num_agents, args, ordered=True)


register_env("bfcl_parallel", EnvEntry(build_parallel, load_parallel,
                                       "BFCL v4 parallel function calling; agents' calls merged, BFCL AST checker"))
register_env("bfcl_multiturn_flat", EnvEntry(build_multiturn_flat, load_multiturn_flat,
                                             "BFCL v4 multi-turn, one turn per row (hub data), calls in order"))
