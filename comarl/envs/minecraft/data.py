"""StrBuild and HouseBuild items: the package's own copies, or a local file.

The package ships both task sets (``data/``; no hub dataset exists): ``str_build.jsonl``, the reference's 10
strings (``I C M L MC CM LI LLM ICML CLIM``: train ``[:8]``, eval ``[8:]``), and ``house_build.jsonl``, its 10
houses, converted from ``house_build/dataset/data.json`` of ``OpenMLRL/LLM_Collab_Minecraft`` (MIT licence,
copyright 2025 OpenMLRL) into the row format below. ``data.*.source: null`` reads them; a split slices them
like a hub split (``train[:8]``).

A local source may be a JSON/JSONL file or folder (``comarl.envs.loading``) or, for StrBuild, the reference's
CSV (``string,difficulty``). Rows:

- StrBuild: ``string`` (the text to spell), optional ``difficulty`` and ``task_id`` (default
  ``str_build_<row number>``, as the reference numbers its CSV rows from 1).
- HouseBuild: ``task_id``, ``box`` (``[[x, y, z], [x, y, z]]``), ``legend`` (character -> block) and ``layers``
  (one list of rows per y, bottom first); or the reference's form (``inventory``, ``target_spec.layers`` with
  ``y`` and ``rows``, optional ``bbox``).
"""
from __future__ import annotations

import csv
import os
from importlib import resources
from typing import Any

from ..loading import load_rows, split_indices
from .housebuild import task_from_item

STR_FILE, HOUSE_FILE = "str_build.jsonl", "house_build.jsonl"
STR_FIELDS = "a 'string' field (the text to spell) and optionally 'difficulty' and 'task_id'"
HOUSE_FIELDS = "'task_id', 'box', 'legend' and 'layers' (or the reference's inventory/target_spec/bbox)"


def package_file(name: str) -> str:
    """The path of one of the package's data files."""
    return str(resources.files("comarl.envs.minecraft").joinpath("data", name))


def _str_row(i: int, row: dict[str, Any], source: str) -> dict[str, Any]:
    text = str(row["string"] if row.get("string") is not None else "").strip()
    if not text:
        raise ValueError("the 'string' to spell is empty")
    try:
        difficulty = int(str(row.get("difficulty") or "0").strip() or "0")
    except ValueError:
        difficulty = 0
    return {"task_id": str(row.get("task_id") or f"str_build_{i + 1:04d}"), "string": text,
            "difficulty": difficulty}


def _house_row(i: int, row: dict[str, Any], source: str) -> dict[str, Any]:
    if "target_spec" in row or "inventory" in row:
        row = _from_reference_form(row, i)
    item = {"task_id": str(row.get("task_id") or f"house_build_{i + 1:04d}"), "box": row["box"],
            "legend": dict(row["legend"]), "layers": [list(map(str, rows)) for rows in row["layers"]]}
    task_from_item(item)  # refuse an inconsistent house now, naming its row
    return item


def _from_reference_form(row: dict[str, Any], i: int) -> dict[str, Any]:
    """A row in the reference's ``data.json`` form as this package's row."""
    spec = row.get("target_spec") or {}
    raw = spec.get("layers")
    if isinstance(raw, dict):
        layers = {int(str(k).strip()): v for k, v in raw.items()}
    elif isinstance(raw, list):
        layers = {int(e["y"]): e["rows"] for e in raw}
    else:
        raise ValueError("target_spec.layers must be a list of {y, rows} or a {y: rows} mapping")
    if not layers:
        raise ValueError("target_spec.layers is empty")
    ys = sorted(layers)
    width, depth = len(str(layers[ys[0]][0])), len(layers[ys[0]])
    bbox = row.get("bbox")
    box = [bbox["from"], bbox["to"]] if bbox else [[0, ys[0], 0], [width - 1, ys[-1], depth - 1]]
    lo_y, hi_y = min(box[0][1], box[1][1]), max(box[0][1], box[1][1])
    missing = [y for y in range(lo_y, hi_y + 1) if y not in layers]
    if missing:
        raise ValueError(f"no layer for y={missing[0]} of the box")
    return {"task_id": row.get("task_id") or f"house_build_{i + 1:04d}", "box": box, "legend": row["inventory"],
            "layers": [layers[y] for y in range(lo_y, hi_y + 1)]}


def _csv_items(path: str, split: str, limit: int | None) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    items = [_str_row(i, r, path) for i, r in enumerate(rows) if r and str(r.get("string") or "").strip()]
    items = [items[i] for i in split_indices(split, split.split("[", 1)[0], len(items))]
    return items[:limit] if limit is not None else items


def _load(default: str, normalize, fields: str, source: str | None, split: str | None,
          limit: int | None) -> list[dict[str, Any]]:
    split = split or "train"
    if split.startswith("["):  # the reference's "[:8]"
        split = "train" + split
    path = source or package_file(default)
    if source and source.endswith(".csv") and normalize is _str_row:
        if not os.path.isfile(source):
            raise FileNotFoundError(f"data source {source!r}: no such file")
        return _csv_items(source, split, limit)
    if source and not os.path.exists(source):
        raise FileNotFoundError(f"data source {source!r}: no such file or folder (Minecraft tasks have no hub "
                                f"dataset; leave data.*.source null for the package's own tasks)")
    return load_rows(path, split, limit, normalize, fields)


def load_str_items(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """StrBuild items (``task_id``, ``string``, ``difficulty``); ``source`` None: the package's 10 strings."""
    return _load(STR_FILE, _str_row, STR_FIELDS, source, split, limit)


def load_house_items(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """HouseBuild items (``task_id``, ``box``, ``legend``, ``layers``); ``source`` None: the package's 10 houses."""
    return _load(HOUSE_FILE, _house_row, HOUSE_FIELDS, source, split, limit)
