"""``comarl view``: a local page showing runs from their folders alone: curves, and each step's rollout trees.

``runs.py`` reads run folders (tolerantly, from a cursor, so a running run is followed), ``page.py`` builds the
page (served, or one self-contained file with ``--out``), ``server.py`` is the small loopback-only server, and
``static/`` holds the page's script and styles and the vendored chart library (uPlot, MIT). The trees are what
training writes to ``trees.jsonl`` (``comarl/training/sample_records.py``); docs/view.md shows the page.
"""
from __future__ import annotations

from .page import standalone_page, write_page
from .runs import Run, ViewError, find_runs, poll, snapshot
from .server import ViewServer, start

__all__ = ["Run", "ViewError", "ViewServer", "find_runs", "poll", "snapshot", "standalone_page", "start",
           "write_page"]
