"""BFCL items: from the benchmark's own files or from hub-style rows.

An item is ``{"id", "category", "request", "function", "ground_truth"}`` (+
``"turn_index"`` for flattened multi-turn rows): ``request`` is the user's
text (a system message, if any, comes first), ``function`` the JSON schemas,
``ground_truth`` BFCL's possible answer ``[{name: {param: [accepted values]}}]``.

Sources:

- a folder of BFCL files (``BFCL_v4_<category>.json`` + ``possible_answer/``,
  as in ``bfcl_eval/data/`` and ``shared/data/bfcl_v4``), or one such file; ``fixture:bfcl_v4``
  ships 10 rows of two categories, ``package:bfcl_eval/data`` is the whole set of an installed ``bfcl-eval``.
  They have no splits: ``train`` is every item whose index in its category
  file is not 4 mod 5, ``test`` (or ``eval``) the others, ``all`` everything.
- a local JSON/JSONL file (or folder with ``<split>.jsonl``) of hub-style rows
  ``{id, user_prompt, function, ground_truth, official_category[, turn_index]}``.
- a hub dataset id (``OpenMLRL/BFCL-V4-Parallel-Native``): its ``<split>.jsonl``
  file when the repository has one, else ``datasets.load_dataset``.

``function`` / ``ground_truth`` may be JSON strings; gold calls may be BFCL's
dicts or call strings (``"cd(folder='docs')"``, ``"sort('a.pdf')"``: positional
arguments take the schema's parameters in order; each value is then the only
accepted one). Keys whose value is null (columns merged by Arrow) are dropped.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

from ...data import resolve_source
from .calls import gold_call_from_text

PARALLEL_CATEGORIES = ("parallel", "parallel_multiple", "live_parallel", "live_parallel_multiple")
_FILE = re.compile(r"BFCL_v\d+_(\w+)\.json$")


def _read_json_rows(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        return json.loads(stripped)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _drop_nulls(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _drop_nulls(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_nulls(v) for v in x]
    return x


def _gold_call(g: Any, where: str, functions: list[dict]) -> dict[str, dict[str, list]]:
    if isinstance(g, str):
        try:
            c = gold_call_from_text(g, functions)
        except ValueError as e:
            raise ValueError(f"{where}: gold call {g!r}: {e}") from None
        return {c.name: {k: [v] for k, v in c.args.items()}}
    if isinstance(g, dict):
        g = {k: v for k, v in g.items() if v is not None}
    if not isinstance(g, dict) or len(g) != 1 or not isinstance(next(iter(g.values())), dict):
        raise ValueError(f"{where}: a gold call must be {{function_name: {{param: [accepted values]}}}}, got {g!r}")
    (name, params), = g.items()
    out = {}
    for p, accepted in params.items():
        if accepted is None:
            continue
        if not isinstance(accepted, list):
            raise ValueError(f"{where}: gold {name}.{p} must be a list of accepted values, got {accepted!r}")
        out[p] = accepted
    return {name: out}


def normalize(index: int, row: dict[str, Any], source: str, category: str | None = None) -> dict[str, Any]:
    """One row (BFCL file row joined with its answer, or a hub-style row) -> item; errors name the row."""
    where = f"{source}: row {index} (id {row.get('id')!r})"
    request = row.get("user_prompt") or row.get("prompt")
    if request is None and "question" in row:
        turns = row["question"]
        msgs = turns[0] if turns and isinstance(turns[0], list) else turns
        request = "\n\n".join(f"{m['content']}" if m.get("role") == "user" else f"[{m.get('role')}] {m['content']}"
                              for m in msgs)
    if not isinstance(request, str) or not request.strip():
        raise ValueError(f"{where}: no user request ('user_prompt', 'prompt' or BFCL 'question'); "
                         f"fields: {sorted(row)}")
    functions, gold = row.get("function"), row.get("ground_truth")
    functions = json.loads(functions) if isinstance(functions, str) else functions
    gold = json.loads(gold) if isinstance(gold, str) and gold.lstrip()[:1] in "[{" else gold
    if isinstance(gold, str):
        gold = [gold]
    if not isinstance(functions, list) or not all(isinstance(f, dict) and "name" in f for f in functions):
        raise ValueError(f"{where}: 'function' must be a list of schemas with a 'name', got {str(functions)[:120]}")
    # a multi-turn step may rightly need no call (a missing function or parameter): [] allowed there
    if not isinstance(gold, list) or (not gold and row.get("turn_index") is None):
        raise ValueError(f"{where}: 'ground_truth' must be a non-empty list of gold calls, got {gold!r}")
    functions = _drop_nulls(functions)
    item = {"id": str(row.get("id", index)),
            "category": category or row.get("official_category") or row.get("category") or "unknown",
            "request": request.strip(), "function": functions,
            "ground_truth": [_gold_call(g, where, functions) for g in gold]}
    if row.get("turn_index") is not None:
        item["turn_index"] = int(row["turn_index"])
    return item


def _in_split(index: int, split: str) -> bool:
    if split == "all":
        return True
    if split == "train":
        return index % 5 != 4
    if split in ("test", "eval"):
        return index % 5 == 4
    raise ValueError(f"data split {split!r}: BFCL files have no splits; use train, test (eval) or all")


def load_bfcl_file(path: str, split: str) -> list[dict[str, Any]]:
    """Items of one ``BFCL_v4_<category>.json`` joined with ``possible_answer/<same name>``."""
    m = _FILE.search(os.path.basename(path))
    category = m.group(1) if m else "unknown"
    answer_path = os.path.join(os.path.dirname(path), "possible_answer", os.path.basename(path))
    if not os.path.isfile(answer_path):
        raise FileNotFoundError(f"{path}: no answers at {answer_path}")
    answers = {r["id"]: r["ground_truth"] for r in _read_json_rows(answer_path)}
    items = []
    for i, row in enumerate(_read_json_rows(path)):
        if not _in_split(i, split):
            continue
        if row.get("id") not in answers:
            raise ValueError(f"{path}: row {i} (id {row.get('id')!r}) has no possible answer in {answer_path}")
        items.append(normalize(i, {**row, "ground_truth": answers[row["id"]]}, path, category))
    return items


def bfcl_files(folder: str, categories=PARALLEL_CATEGORIES) -> list[str]:
    """The category files of a BFCL data folder, in ``categories`` order (missing ones skipped)."""
    names = sorted(os.listdir(folder))
    out = []
    for cat in categories:
        out += [os.path.join(folder, n) for n in names if (m := _FILE.fullmatch(n)) and m.group(1) == cat]
    return out


def _hub_rows(repo: str, split: str) -> list[dict[str, Any]] | None:
    """``<split>.jsonl`` of a hub dataset repository, read as plain JSON (no Arrow schema merging); None if absent."""
    try:
        from huggingface_hub import hf_hub_download

        return _read_json_rows(hf_hub_download(repo_id=repo, filename=f"{split}.jsonl", repo_type="dataset"))
    except Exception:
        return None


def load_items(source: str, split: str | None, limit: int | None, categories=None) -> list[dict[str, Any]]:
    """Items from ``source`` (see the module docstring), first ``limit`` of them.

    Args:
        categories: keep only these ``category`` values (None: all).
    """
    from ..loading import load_rows

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"data.limit: expected a non-negative integer or null, got {limit!r}")
    split = split or "train"
    source = resolve_source(source)
    if os.path.isdir(source) and bfcl_files(source):
        items = [it for p in bfcl_files(source) for it in load_bfcl_file(p, split)]
    elif os.path.isfile(source) and _FILE.search(os.path.basename(source)):
        items = load_bfcl_file(source, split)
    elif os.path.exists(source):
        path = source if os.path.isfile(source) else os.path.join(source, f"{split}.jsonl")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"data source {source!r}: a folder without BFCL files or {split}.jsonl")
        items = [normalize(i, r, path) for i, r in enumerate(_read_json_rows(path))]
    else:
        rows = _hub_rows(source, split) if "/" in source and not source.startswith((".", "/", "~")) else None
        if rows is None:
            hint = "BFCL rows {id, user_prompt, function, ground_truth}"
            return _select(load_rows(source, split, None, normalize, hint), categories, limit)
        items = [normalize(i, r, source) for i, r in enumerate(rows)]
    return _select(items, categories, limit)


def _select(items: list[dict[str, Any]], categories, limit: int | None) -> list[dict[str, Any]]:
    if categories is not None:
        items = [it for it in items if it["category"] in categories]
    return items if limit is None else items[:limit]
