"""The page of ``comarl view``: one HTML template, the page's script and styles, and the vendored chart library.

Served, the page loads its assets from ``/assets/`` and asks the server for data; written with ``--out`` it is
one self-contained file: the same assets inlined and the data embedded as JSON (every ``<`` escaped, so no text
of a run can close the script element that holds it).
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

ASSETS = {"view.js": "text/javascript", "view.css": "text/css", "uPlot.iife.min.js": "text/javascript",
          "uPlot.min.css": "text/css"}
"""The files the page loads (name -> content type); the uPlot ones live in ``static/vendor/``."""
STYLES = ("uPlot.min.css", "view.css")
SCRIPTS = ("uPlot.iife.min.js", "view.js")


def asset(name: str) -> bytes:
    """An asset's bytes (KeyError for a name not in :data:`ASSETS`)."""
    if name not in ASSETS:
        raise KeyError(name)
    folder = resources.files("comarl.view") / "static"
    path = folder / "vendor" / name if name.startswith("uPlot") else folder / name
    return path.read_bytes()


def _template() -> str:
    return (resources.files("comarl.view") / "static" / "index.html").read_text(encoding="utf-8")


def served_page() -> bytes:
    """The page the server sends: assets by URL, data from ``/api/poll``."""
    styles = "\n".join(f'<link rel="stylesheet" href="assets/{n}">' for n in STYLES)
    scripts = "\n".join(f'<script src="assets/{n}"></script>' for n in SCRIPTS)
    html = _template().replace("<!--STYLES-->", styles).replace("<!--SCRIPTS-->", scripts)
    return html.replace("<!--DATA-->", "").encode("utf-8")


def standalone_page(data: dict[str, Any]) -> str:
    """One HTML file holding the page, its assets and ``data`` (``runs.snapshot``)."""
    styles = "\n".join(f"<style>\n{asset(n).decode('utf-8')}\n</style>" for n in STYLES)
    scripts = "\n".join(f"<script>\n{_inline_js(asset(n).decode('utf-8'))}\n</script>" for n in SCRIPTS)
    embedded = json.dumps(data, ensure_ascii=False, allow_nan=False).replace("<", "\\u003c")
    embedded = embedded.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    holder = f'<script type="application/json" id="comarl-data">{embedded}</script>'
    html = _template().replace("<!--STYLES-->", styles).replace("<!--SCRIPTS-->", scripts)
    return html.replace("<!--DATA-->", holder)


def _inline_js(js: str) -> str:
    if "</script" in js.lower():  # would end the element early; none of the shipped scripts has one
        raise ValueError("an inlined script contains '</script'")
    return js


def write_page(data: dict[str, Any], out: str | Path) -> Path:
    """Write :func:`standalone_page` to ``out``; returns its path."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(standalone_page(data), encoding="utf-8")
    return path


__all__ = ["ASSETS", "asset", "served_page", "standalone_page", "write_page"]
