"""Loading dataset rows from the hub or a local JSON/JSONL file or folder (any environment).

A source written ``fixture:NAME`` or ``package:MODULE/PATH`` names a file that the install ships
(``comarl/data/paths.py``); every loader resolves it first, so a smoke config runs from any folder.

Local files are parsed here, line by line, so a malformed line is reported by
file and line number and a row keeps exactly the keys it has (``datasets``'
JSON loader unifies the schema and fills a missing key with null, which hides
the missing field in error messages). Hub ids go through
``datasets.load_dataset``; when the hub cannot be reached the error comes in
seconds instead of after half a minute of retries.
"""
from __future__ import annotations

import json
import os
import socket
from typing import Any, Callable
from urllib.parse import urlparse

from ..core.config_io import DataError
from ..data import resolve_source

RowFn = Callable[[int, dict[str, Any], str], dict[str, Any]]


class HubDataError(DataError, RuntimeError):
    """A hub dataset cannot be loaded (offline, unknown id, missing split); a RuntimeError as before."""


def _local_file(source: str, split_name: str) -> str:
    """The data file for ``split_name``: ``source`` itself, or ``<source>/<split>.jsonl|.json``."""
    if os.path.isfile(source):
        return source
    for ext in (".jsonl", ".json"):
        path = os.path.join(source, split_name + ext)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"data source {source!r} is a folder without {split_name}.jsonl or {split_name}.json")


def read_json_rows(path: str, text: str | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` pairs of a JSON-lines file or a JSON file holding a list of objects.

    Raises:
        DataError: a line that is not JSON, or a row that is not an object, named by file and line.
    """
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("["):  # one JSON document: a list of rows
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}, line {e.lineno}, column {e.colno}: not valid JSON ({e.msg})") from None
        pairs = [(0, r) for r in rows]
    else:
        pairs = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                pairs.append((n, json.loads(line)))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}, line {n}: not valid JSON ({e.msg}, column {e.colno}); "
                                f"fix or delete that line (one JSON object per line)") from None
    for i, (n, row) in enumerate(pairs):
        if not isinstance(row, dict):
            where = f"line {n}" if n else f"row {i}"
            raise DataError(f"{path}, {where}: expected a JSON object, got {type(row).__name__}")
    return pairs


def split_indices(split: str, split_name: str, n: int) -> list[int]:
    """Row indices of ``split`` (``"test[:100]"``, ``"train[10%:20%]"``) in a split of ``n`` rows."""
    if split == split_name:
        return list(range(n))
    import datasets

    try:
        spans = datasets.ReadInstruction.from_spec(split).to_absolute({split_name: n})
    except (ValueError, AssertionError) as e:
        raise DataError(f"data split {split!r}: {e}") from None
    return [i for s in spans for i in range(s.from_, s.to)]


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection within ``timeout`` seconds.

    False in offline mode (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``); True behind a proxy (not probed)."""
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE") or \
            os.environ.get("HF_DATASETS_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return False
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_hub(source: str, split: str, fields_hint: str, config: str | None = None):
    """``datasets.load_dataset(source, config, split=split)``; without a hub connection, from the local cache only."""
    import datasets
    from huggingface_hub import constants

    online = hub_reachable()
    saved = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
    if not online:  # no 30 s of retries: read the cache or fail now
        datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        return datasets.load_dataset(source, config, split=split)
    except Exception as e:  # network, missing split, auth...: all reported the same way
        why = "the hub cannot be reached and it is not in the local cache" if not online else \
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise HubDataError(
            f"could not load hub dataset {source!r}{f' (config {config!r})' if config else ''} split {split!r} "
            f"({why}). Offline? Set data.train.source / data.eval.source to a local JSON/JSONL file with "
            f"{fields_hint}."
        ) from e
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def load_rows(source: str, split: str | None, limit: int | None, normalize: RowFn,
              fields_hint: str) -> list[dict[str, Any]]:
    """Rows of ``source`` (hub id or local path), each passed through ``normalize``.

    Args:
        source: hub dataset id, or a local ``.json``/``.jsonl`` file, or a
            folder holding ``<split>.jsonl`` / ``<split>.json``; ``fixture:NAME`` and
            ``package:MODULE/PATH`` name files of the install (``comarl.data.resolve_source``).
        split: split name, with optional slice (``"test[:100]"``); None -> "train".
            A single local file is read as that split.
        limit: keep the first ``limit`` rows (None: all).
        normalize: ``(row_index, row, source) -> item``; raises ValueError/KeyError/TypeError on a bad row.
        fields_hint: what a row must hold, for error messages.

    Raises:
        FileNotFoundError: a path-like source that does not exist.
        DataError: a malformed line, a row ``normalize`` rejects (named by file and line),
            or a hub dataset that cannot be loaded (e.g. offline).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"data.limit: expected a non-negative integer or null, got {limit!r}")
    source = resolve_source(source)
    split = split or "train"
    split_name = split.split("[", 1)[0]
    if os.path.exists(source):
        path = _local_file(source, split_name)
        pairs = read_json_rows(path)
        pairs = [pairs[i] for i in split_indices(split, split_name, len(pairs))]
        where = [f"{path}, line {n}" if n else f"{path}, row {i}" for i, (n, _) in enumerate(pairs)]
        rows = [row for _, row in pairs]
    elif source.endswith((".json", ".jsonl")) or source.startswith((".", "/", "~")) or os.sep + os.sep in source:
        raise FileNotFoundError(f"data source {source!r}: no such file or folder")
    else:
        rows = [dict(r) for r in load_hub(source, split, fields_hint)]
        where = [f"{source} ({split}) row {i}" for i in range(len(rows))]
    if limit is not None:
        rows = rows[:limit]
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(normalize(i, row, source))
        except (ValueError, KeyError, TypeError) as e:
            msg = f"missing field {e.args[0]!r}" if isinstance(e, KeyError) and e.args else e
            raise DataError(f"{where[i]}: {msg} (a row needs {fields_hint})") from e
    return out


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


def check_no_overlap(train: list[dict[str, Any]], other: list[dict[str, Any]], train_name: str,
                     other_name: str) -> None:
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
