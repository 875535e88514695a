"""Loading dataset rows from the hub or a local JSON/JSONL file or folder (any environment).

Both go through ``datasets.load_dataset``: ``("json", data_files=...)`` for a
local path and ``(hub_id, split=...)`` otherwise, so the tests exercise the
same code that reads hub data.
"""
from __future__ import annotations

import os
from typing import Any, Callable

RowFn = Callable[[int, dict[str, Any], str], dict[str, Any]]


def _local_file(source: str, split_name: str) -> str:
    """The data file for ``split_name``: ``source`` itself, or ``<source>/<split>.jsonl|.json``."""
    if os.path.isfile(source):
        return source
    for ext in (".jsonl", ".json"):
        path = os.path.join(source, split_name + ext)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"data source {source!r} is a folder without {split_name}.jsonl or {split_name}.json")


def load_rows(source: str, split: str | None, limit: int | None, normalize: RowFn, fields_hint: str) -> list[dict[str, Any]]:
    """Rows of ``source`` (hub id or local path), each passed through ``normalize``.

    Args:
        source: hub dataset id, or a local ``.json``/``.jsonl`` file, or a
            folder holding ``<split>.jsonl`` / ``<split>.json``.
        split: split name, with optional slice (``"test[:100]"``); None -> "train".
            A single local file is read as that split.
        limit: keep the first ``limit`` rows (None: all).
        normalize: ``(row_index, row, source) -> item``; raises on a bad row.
        fields_hint: what a row must hold, for error messages.

    Raises:
        FileNotFoundError: a path-like source that does not exist.
        RuntimeError: the hub dataset cannot be loaded (e.g. offline).
    """
    import datasets

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"data.limit: expected a non-negative integer or null, got {limit!r}")
    split = split or "train"
    split_name = split.split("[", 1)[0]
    if os.path.exists(source):
        path = _local_file(source, split_name)
        ds = datasets.load_dataset("json", data_files={split_name: path}, split=split)
    elif source.endswith((".json", ".jsonl")) or source.startswith((".", "/", "~")) or os.sep + os.sep in source:
        raise FileNotFoundError(f"data source {source!r}: no such file or folder")
    else:
        try:
            ds = datasets.load_dataset(source, split=split)
        except Exception as e:  # network, missing split, auth...: all reported the same way
            raise RuntimeError(
                f"could not load hub dataset {source!r} split {split!r} ({type(e).__name__}: {e}). "
                f"Offline? Set data.train.source / data.eval.source to a local JSON/JSONL file with {fields_hint}."
            ) from e
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    return [normalize(i, dict(row), source) for i, row in enumerate(ds)]


# Fields that name an item, tried in this order; a field counts only when every item of both sets has it.
ID_FIELDS = ("id", "task_id", "article_id")


def item_keys(train: list[dict[str, Any]], other: list[dict[str, Any]]) -> tuple[str, list[Any], list[Any]]:
    """How items are compared, and each set's keys.

    Returns ``(field, train_keys, other_keys)``: the first of :data:`ID_FIELDS`
    present in every item of both sets (keys are its values), else
    ``"content"`` with each item as canonical JSON (sorted keys).
    """
    import json

    both = list(train) + list(other)
    for name in ID_FIELDS:
        if both and all(name in it for it in both):
            return name, [str(it[name]) for it in train], [str(it[name]) for it in other]

    def content(it: dict[str, Any]) -> str:
        return json.dumps(it, sort_keys=True, default=str)

    return "content", [content(it) for it in train], [content(it) for it in other]


def check_no_overlap(train: list[dict[str, Any]], other: list[dict[str, Any]], train_name: str, other_name: str) -> None:
    """Raise ``ValueError`` naming both splits when ``other`` shares an item with ``train``.

    Items are the same when they carry the same id (:data:`ID_FIELDS`), or,
    for rows without an id, when their whole content is equal.
    """
    if not train or not other:
        return
    field, train_keys, other_keys = item_keys(train, other)
    seen = set(train_keys)
    shared = [i for i, k in enumerate(other_keys) if k in seen]
    if shared:
        first = ", ".join(other_keys[i][:60] if field != "content" else f"#{i}" for i in shared[:3])
        raise ValueError(
            f"{other_name} overlaps {train_name}: {len(shared)} of its {len(other)} items are training items "
            f"(same {field}: {first}{', ...' if len(shared) > 3 else ''}). Use disjoint splits "
            f"(e.g. split: 'test[:32]' and 'test[32:]') or set data.allow_overlap: true")
