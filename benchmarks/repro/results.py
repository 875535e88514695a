"""The results file: one JSON object per finished run, appended as each run ends.

A run writes its own line when it finishes (one ``write`` of a whole line, then ``fsync``), so a killed run
leaves nothing and loses only itself; the grid skips every key already in the file. A torn last line (the
machine stopped inside the write) is ignored with a warning rather than stopping the grid.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def append_row(path: str | Path, row: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(row, sort_keys=True) + "\n"
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":  # a torn last line: start this row on a line of its own
                line = "\n" + line
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_rows(path: str | Path) -> list[dict]:
    """Every complete row, in file order; a later row with the same key replaces an earlier one."""
    path = Path(path)
    if not path.exists():
        return []
    rows: dict[str, dict] = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            print(f"{path}:{n}: not a complete JSON row (a run stopped while writing?); ignored", file=sys.stderr)
            continue
        rows[row["key"]] = row
    return list(rows.values())


def done_keys(path: str | Path) -> set[str]:
    return {r["key"] for r in read_rows(path)}
