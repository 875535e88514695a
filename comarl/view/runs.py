"""What ``comarl view`` reads from run folders: the runs, their JSON-lines files read on from a cursor, notes.

The page asks for what is new since its cursor (one offset per run and file), so a finished run is read once and
a running one is followed by reading on from where the last answer stopped. Reading is tolerant: a line that is not
a JSON object (a crash mid-write, an edit by hand) is skipped and named in a note the page shows; a last line
without its end of line is left for the next poll while the run may still be writing it, and noted once it stays
cut short (or at once, for a snapshot). One answer reads at most ``budget`` bytes; the page asks again while
``more`` is true.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config_io import UserError
from ..runs.run_dir import MARKER, run_contents

FILES = {"metrics": "metrics.jsonl", "samples": "samples.jsonl", "trees": "trees.jsonl"}
"""The files a page follows: step metrics, flat sample rows (older runs, preference rounds), rollout trees."""
SIDE_FILES = ("demo_summary.json", "eval.json")
"""Small JSON files shown beside the curves when a run has them (read whole, at most ``SIDE_BYTES``)."""
SIDE_BYTES = 1 << 20
BUDGET = 4 << 20
"""Most bytes of JSON lines one poll reads over all runs and files."""
MAX_LINE = 64 << 20
"""A line longer than this is skipped (named in a note) without reading it whole."""
RECENT_S = 1800
"""Where a process's open files cannot be read: a run whose process is alive counts as running while one of its
files changed within this many seconds."""


class ViewError(UserError):
    """A folder given to ``comarl view`` is not a run folder."""

    kind = "view error"


@dataclass(frozen=True)
class Run:
    """One run folder and the name the page gives it."""

    path: Path
    name: str


def find_runs(folders: list[str]) -> list[Run]:
    """The run folders ``comarl view`` was given, checked, with names that tell them apart.

    A folder without run files is refused, naming the runs inside it when it holds some (``runs/demo`` holds a
    run per demo)."""
    if not folders:
        raise ViewError("comarl view: give at least one run folder (the train.run.output_dir of a run)")
    paths = []
    for f in folders:
        p = Path(f).expanduser()
        if not p.is_dir():
            raise ViewError(f"comarl view: {f} is not a folder")
        if not any((p / name).is_file() for name in (MARKER, *FILES.values())):
            inside = sorted(str(c) for c in p.iterdir() if c.is_dir() and run_contents(c))
            hint = f"; runs inside it: {', '.join(inside[:6])}{' ...' if len(inside) > 6 else ''}" if inside else ""
            raise ViewError(f"comarl view: {f} holds no run (no {MARKER}, metrics.jsonl or trees.jsonl){hint}")
        paths.append(p.resolve())
    names = [p.name for p in paths]
    runs = []
    for p, n in zip(paths, names):
        if names.count(n) > 1:  # two "latest": take the parent folder's name too
            n = f"{p.parent.name}/{p.name}"
        runs.append(Run(p, n))
    return runs


def run_info(run: Run) -> dict[str, Any]:
    """The run's name, folder, ``run.json``, side files and whether it is running (``status``)."""
    info: dict[str, Any] = {"name": run.name, "path": str(run.path), "marker": _small_json(run.path / MARKER)}
    for name in SIDE_FILES:
        data = _small_json(run.path / name)
        if data is not None:
            info[name.split(".")[0]] = data
    info["status"] = run_status(run.path, info["marker"])
    return info


def run_status(folder: Path, marker: Any) -> str:
    """``running`` while the process in ``run.json`` trains into ``folder``, else ``stopped``.

    On Linux the witness is exact: the trainer keeps its log files open while it trains, so the process has
    a file of the folder open (``/proc/<pid>/fd``). Elsewhere (or when another user's process cannot be looked
    into): the process is alive and a run file changed within ``RECENT_S`` (a process id can be reused)."""
    pid = marker.get("pid") if isinstance(marker, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return "stopped"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "stopped"
    except (PermissionError, OSError):  # alive, another user's (or no signals here)
        pass
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # no /proc, or not ours to read
        fds = None
    if fds is not None:
        inside = str(folder.resolve()) + os.sep
        for fd in fds:
            try:
                if os.readlink(fd).startswith(inside):
                    return "running"
            except OSError:  # closed since it was listed
                continue
        return "stopped"
    changed = max((p.stat().st_mtime for p in (folder / n for n in FILES.values()) if p.exists()), default=0.0)
    return "running" if time.time() - changed < RECENT_S else "stopped"


def _small_json(path: Path) -> Any:
    try:
        if path.stat().st_size > SIDE_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def new_cursor(runs: list[Run]) -> dict:
    """The cursor of a page that has read nothing: per run, per file ``[offset, lines read, tail seen]``."""
    return {"runs": [{key: [0, 0, 0] for key in FILES} for _ in runs]}


def check_cursor(cursor: Any, runs: list[Run]) -> dict:
    """The cursor a page sent back, checked (anything else is refused with ValueError)."""
    if not isinstance(cursor, dict) or not isinstance(cursor.get("runs"), list) or len(cursor["runs"]) != len(runs):
        raise ValueError("bad cursor")
    for per_run in cursor["runs"]:
        if not isinstance(per_run, dict) or set(per_run) != set(FILES):
            raise ValueError("bad cursor")
        for v in per_run.values():
            if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and 0 <= x < 1 << 50 for x in v)):
                raise ValueError("bad cursor")
    return cursor


def poll(runs: list[Run], cursor: dict, final: bool = False, budget: int = BUDGET) -> dict:
    """What is new in every run since ``cursor``.

    Returns ``{"rows": [{"metrics": [...], "samples": [...], "trees": [...]} per run], "notes": [...],
    "reset": [[run, file key], ...], "cursor": ..., "more": bool}`` (``reset``: drop that file's rows read
    before, it was rewritten). ``final``: nothing is being written any more (a snapshot): a last line
    without its end of line is noted at once."""
    rows: list[dict[str, list]] = []
    notes: list[dict] = []
    reset: list[list] = []
    more = False
    out_cursor: dict = {"runs": []}
    for r, run in enumerate(runs):
        got: dict[str, list] = {}
        per_run = {}
        for key, name in FILES.items():
            offset, line, tail = cursor["runs"][r][key]
            lines, state = read_lines(run.path / name, offset, line, tail, max(budget, 0), final)
            budget -= state["read"]
            more |= state["more"]
            if state["reset"]:
                reset.append([r, key])
            got[key] = []
            for n, text in lines:
                row, why = parse_row(text, key)
                if row is None:
                    notes.append({"run": r, "file": name, "line": n, "text": why})
                else:
                    got[key].append(row)
            notes += [{"run": r, "file": name, "line": n, "text": why} for n, why in state["notes"]]
            per_run[key] = [state["offset"], state["line"], state["tail"]]
        rows.append(got)
        out_cursor["runs"].append(per_run)
    return {"rows": rows, "notes": notes, "reset": reset, "cursor": out_cursor, "more": more}


def read_lines(path: Path, offset: int, line: int, tail: int, budget: int, final: bool) -> tuple[list, dict]:
    """Complete lines of ``path`` from byte ``offset`` (line number ``line`` read so far), at most ``budget``
    bytes. Returns ([(line number, text)], state) with the new ``offset``/``line``, the ``tail`` (bytes of an
    unfinished last line, to compare at the next poll), bytes ``read``, ``more``, ``notes`` [(line, text)] and
    ``reset`` (the file got shorter: it is read again from its start, and the rows read before are stale)."""
    state: dict[str, Any] = {"offset": offset, "line": line, "tail": 0, "read": 0, "more": False, "notes": [],
                             "reset": False}
    try:
        size = path.stat().st_size
    except OSError:
        return [], state
    if size < offset:  # the file was rewritten (a resumed run drops the rows after its checkpoint): read again
        offset = line = 0
        state.update(offset=0, line=0, reset=True)
        state["notes"].append((0, f"{path.name} got shorter (a resumed run rewrote it): read again from the start"))
    if size == offset:
        return [], state
    out = []
    with open(path, "rb") as f:
        f.seek(offset)
        chunk = f.read(min(size - offset, budget)) if budget > 0 else b""
        state["read"] = len(chunk)
        end = chunk.rfind(b"\n")
        if end < 0 and len(chunk) < size - offset:  # no whole line within what is left of the budget
            if budget < BUDGET // 2:  # the next poll reads it with a whole budget
                state["more"] = True
                return [], state
            stop = _line_end(f, offset + len(chunk))  # one long line: find its end without holding it
            if stop is not None and stop - offset > MAX_LINE:
                state["notes"].append((line + 1, f"longer than {MAX_LINE} bytes: skipped"))
                state.update(offset=stop, line=line + 1, more=stop < size)
                return [], state
            if stop is not None:
                f.seek(offset)
                chunk = f.read(stop - offset)
                state["read"] = len(chunk)
                end = len(chunk) - 1
        if end < 0:  # only an unfinished last line
            rest = size - offset
            if final or (rest == tail and tail > 0):  # cut short: it did not grow since the last poll
                state["notes"].append((line + 1, "no end of line (cut short?): skipped"))
                state.update(offset=size, line=line + 1)
            else:
                state["tail"] = rest
            return [], state
        for text in chunk[:end].split(b"\n"):
            line += 1
            out.append((line, text))
        at_end = offset + len(chunk) == size
        tail = len(chunk) - end - 1 if at_end else 0
        state.update(offset=offset + end + 1, line=line, more=not at_end, tail=tail)
        if tail and final:  # a snapshot: nothing will finish the last line
            state["notes"].append((line + 1, "no end of line (cut short?): skipped"))
            state.update(offset=size, line=line + 1, tail=0)
    return out, state


def _line_end(f, start: int) -> int | None:
    """The offset after the next end of line at or after ``start``, read 1 MiB at a time (None: the file ends
    first)."""
    f.seek(start)
    read = 0
    while True:
        block = f.read(1 << 20)
        if not block:
            return None
        i = block.find(b"\n")
        if i >= 0:
            return start + read + i + 1
        read += len(block)


def parse_row(text: bytes, key: str) -> tuple[dict | None, str]:
    """A line as a JSON object (None and why not: not JSON, not an object, a tree without nodes)."""
    try:
        row = json.loads(text.decode("utf-8"), parse_constant=lambda _: None)  # NaN, Infinity: JSON has none
    except UnicodeDecodeError:
        return None, "not UTF-8 text: skipped"
    except ValueError as e:
        return None, f"not valid JSON ({str(e)[:80]}): skipped"
    if not isinstance(row, dict):
        return None, f"a JSON {type(row).__name__}, not an object: skipped"
    if key == "trees" and not (isinstance(row.get("nodes"), list) and isinstance(row.get("step"), int)):
        return None, "not a tree record (no step or nodes): skipped"
    if key == "metrics" and not isinstance(row.get("step"), (int, float)):
        return None, "a metrics row without a step: skipped"
    return row, ""


def snapshot(runs: list[Run]) -> dict:
    """Everything in ``runs`` now, as one page's data (``comarl view --out``)."""
    data = poll(runs, new_cursor(runs), final=True, budget=1 << 62)
    data["runs"] = [run_info(r) for r in runs]
    data["live"] = False
    data["written"] = time.strftime("%Y-%m-%d %H:%M:%S")
    return data


__all__ = ["BUDGET", "FILES", "Run", "ViewError", "check_cursor", "find_runs", "new_cursor", "parse_row", "poll",
           "read_lines", "run_info", "run_status", "snapshot"]
