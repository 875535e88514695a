"""TravelPlanner items from the offline folder or the hub.

Offline (``shared/data/travelplanner``): ``train_ref_info.jsonl`` line i is the
reference information of the query in ``std_travelplanner.jsonl`` line i (chat
rows: system, user = reference + ``Query:...``, assistant = annotated plan).
Only the train split carries reference information offline;
``example_evaluation.jsonl`` (validation) has none, so it cannot be scored and
is refused. Hub (``osunlp/TravelPlanner``, config = split name): rows with the
structured fields and ``reference_information``.

An item holds: ``query`` (text), the structured fields in the benchmark's
names (``org, dest, days, visiting_city_number, date, people_number, budget,
local_constraint, level``), ``reference`` (the raw reference information) and
``annotated_plan`` (list of day dicts, or None).
"""
from __future__ import annotations

import ast
import json
import os
from typing import Any, Mapping

from ...data import resolve_source
from ..loading import split_indices
from .query import TravelQuery, parse_query_text, query_from_fields
from .reference import parse_reference

HUB_ID = "osunlp/TravelPlanner"
REF_FILE, CHAT_FILE = "train_ref_info.jsonl", "std_travelplanner.jsonl"


def item_query(item: Mapping[str, Any]) -> TravelQuery:
    """The :class:`TravelQuery` of an item built by :func:`load_items`."""
    lc = item["local_constraint"]
    return TravelQuery(org=item["org"], dest=item["dest"], days=int(item["days"]),
                       visiting_city_number=int(item["visiting_city_number"]), dates=tuple(item["date"]),
                       people=int(item["people_number"]), budget=float(item["budget"]),
                       house_rule=lc.get("house rule"), room_type=lc.get("room type"),
                       cuisine=tuple(lc.get("cuisine") or ()), transportation=lc.get("transportation"),
                       level=item.get("level"))


def _item(q: TravelQuery, text: str, reference: Any, plan: Any) -> dict[str, Any]:
    return {"query": text, "org": q.org, "dest": q.dest, "days": q.days,
            "visiting_city_number": q.visiting_city_number, "date": list(q.dates), "people_number": q.people,
            "budget": q.budget, "local_constraint": q.local_constraints(), "level": q.level or _level(q),
            "reference": reference, "annotated_plan": plan}


def _level(q: TravelQuery) -> str:
    n = sum(v is not None for v in q.local_constraints().values())
    return "easy" if n == 0 else "medium" if n == 1 else "hard"


def _plan(text: Any) -> list[dict[str, Any]] | None:
    if text is None:
        return None
    plan = ast.literal_eval(text) if isinstance(text, str) else text
    if isinstance(plan, list):  # the hub's train plans open with a dict of the query's fields: not a day
        return [d for d in plan if isinstance(d, dict) and "current_city" in d]
    return None


def load_local(folder: str, split: str) -> list[dict[str, Any]]:
    """Items of the offline folder; ``split`` must be ``train`` (the only one with reference information)."""
    if split != "train":
        raise ValueError(f"data split {split!r}: the offline TravelPlanner folder {folder!r} has reference "
                         f"information only for 'train' ({REF_FILE}); validation/test need the hub ({HUB_ID})")
    paths = [os.path.join(folder, f) for f in (REF_FILE, CHAT_FILE)]
    for p in paths:
        if not os.path.isfile(p):
            raise FileNotFoundError(f"TravelPlanner folder {folder!r} has no {os.path.basename(p)}")
    with open(paths[0], encoding="utf-8") as f:
        refs = [json.loads(line) for line in f if line.strip()]
    with open(paths[1], encoding="utf-8") as f:
        chats = [json.loads(line) for line in f if line.strip()]
    if len(refs) != len(chats):
        raise ValueError(f"{folder}: {len(refs)} reference rows but {len(chats)} queries; line i must pair with line i")
    items = []
    for i, (raw, chat) in enumerate(zip(refs, chats)):
        try:
            msgs = {m["role"]: m["content"] for m in chat["messages"]}
            text = msgs["user"][msgs["user"].rfind("Query:") + len("Query:"):].strip()
            ref = parse_reference(raw)
            q = parse_query_text(text, org=ref.origin, cities=tuple(ref.cities))
            items.append(_item(q, text, raw, _plan(msgs.get("assistant"))))
        except (KeyError, ValueError, SyntaxError) as e:
            raise ValueError(f"{paths[1]}: row {i}: {type(e).__name__}: {e}") from e
    return items


def load_hub(hub_id: str, split: str) -> list[dict[str, Any]]:
    """Rows of the hub dataset (config = split name), as items."""
    try:
        import datasets

        ds = datasets.load_dataset(hub_id, split.split("[")[0], split=split)
    except Exception as e:  # offline, missing config...: reported the same way
        raise RuntimeError(f"could not load hub dataset {hub_id!r} split {split!r} ({type(e).__name__}: {e}). "
                           f"Offline? Set data.train.source to the local TravelPlanner folder "
                           f"(holding {REF_FILE} and {CHAT_FILE}).") from e
    items = []
    for i, row in enumerate(ds):
        try:
            q = query_from_fields(row)
            items.append(_item(q, row["query"], row["reference_information"], _plan(row.get("annotated_plan"))))
        except (KeyError, ValueError, SyntaxError) as e:
            raise ValueError(f"{hub_id} {split}: row {i}: {type(e).__name__}: {e}") from e
    return items



def load_items(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """Items from a local folder (the shared layout), a shipped one (``fixture:travelplanner``: 4 train rows)
    or a hub id (None -> ``osunlp/TravelPlanner``)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"data.limit: expected a non-negative integer or null, got {limit!r}")
    source, split = resolve_source(source or HUB_ID), split or "train"
    if os.path.isdir(source):
        name = split.split("[")[0]
        items = load_local(source, name)
        items = [items[i] for i in split_indices(split, name, len(items))]  # "train[:40]" as the hub reads it
    elif os.path.exists(source) or source.startswith((".", "/", "~")):
        raise FileNotFoundError(f"data source {source!r}: expected the TravelPlanner folder holding {REF_FILE} "
                                f"and {CHAT_FILE}")
    else:
        items = load_hub(source, split)
    return items[:limit] if limit is not None else items
