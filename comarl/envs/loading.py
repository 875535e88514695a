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
