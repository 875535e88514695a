"""The package reads top to bottom: every import inside ``comarl/`` points to its own layer or one below it.

The layers, top first, are those of DESIGN.md and docs/architecture.md. An import under ``if TYPE_CHECKING:``
is an annotation, not a dependency, and is not counted; an import inside a function is (lazy imports still
couple the modules). A new top-level module or folder must be given a layer here, or the check fails.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "comarl"

LAYERS: list[tuple[str, list[str]]] = [
    ("entry", ["__init__", "__main__", "cli", "experiment", "demo", "view", "gateway.serve"]),
    ("training", ["training"]),
    ("config", ["config"]),
    ("algorithms", ["algorithms"]),
    ("steps", ["updates", "sources", "preference", "critics"]),
    ("runs", ["runs"]),
    ("rollout", ["rollout"]),
    ("envs", ["envs", "data"]),
    ("gateway", ["gateway"]),
    ("generation", ["generation"]),
    ("models", ["models", "compute"]),
    ("objective", ["objective"]),
    ("core", ["core"]),
    ("sandbox", ["sandbox"]),
]
ORDER = [name for name, _ in LAYERS]

# What a layer may not import although it sits above it.
FORBIDDEN: dict[str, set[str]] = {
    # the math and the records that flow: nothing but core/
    "objective": set(ORDER) - {"objective", "core"},
    # environments score and transition; they build no models and run no generation (helpers are injected)
    "envs": {"generation", "models"},
    # the sandbox knows no task and no part of the library
    "sandbox": set(ORDER) - {"sandbox"},
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted ``comarl.*`` name (the longest prefix wins), None outside comarl, ``?x`` unknown."""
    parts = module.split(".")
    if parts[0] != "comarl":
        return None
    rest = parts[1:]
    if not rest:
        return "entry"
    best: tuple[str, int] | None = None
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            p = prefix.split(".")
            if rest[:len(p)] == p and (best is None or len(p) > best[1]):
                best = (name, len(p))
    return best[0] if best else "?" + rest[0]


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines |= {n.lineno for n in ast.walk(node) if hasattr(n, "lineno")}
    return lines


def module_name(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, package_root: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every module an import in ``path`` names, outside ``TYPE_CHECKING``.

    Relative imports are resolved against the file's package; ``from . import x`` is reported as
    ``<package>.x`` (the imported names are appended as submodules).
    """
    package = list(path.relative_to(package_root.parent).with_suffix("").parts[:-1])
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _type_checking_lines(tree)
    out = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if node.module:
                out.append((node.lineno, mod))
            else:
                out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def violations(package_root: Path) -> list[str]:
    out = []
    for path in sorted(package_root.rglob("*.py")):
        name = module_name(path, package_root)
        here = layer_of(name)
        if here is None or here.startswith("?"):
            out.append(f"{name}: no layer (add it to LAYERS in {Path(__file__).name})")
            continue
        for line, mod in imported_modules(path, package_root):
            there = layer_of(mod)
            if there is None or there == here:
                continue
            where = f"{path.relative_to(package_root.parent)}:{line} imports {mod}"
            if there.startswith("?"):
                out.append(f"{where}, which has no layer")
            elif ORDER.index(there) < ORDER.index(here):
                out.append(f"{where} ({here} must not import {there}, a layer above it)")
            elif there in FORBIDDEN.get(here, set()):
                out.append(f"{where} ({here} must not import {there})")
    return out


def test_every_import_points_down():
    found = violations(PACKAGE)
    assert not found, "imports against the layers:\n" + "\n".join(found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "comarl"
    for where, source in files.items():
        path = root / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


@pytest.mark.parametrize("where, source", [
    ("rollout/tree.py", "from ..training.placement import device_groups\n"),
    ("rollout/tree.py", "from .. import training\n"),
    ("generation/hf.py", "from ..envs.base import Env\n"),
    ("config.py", "def f():\n    from .training.optim import check_optimizer\n"),
    ("envs/coding/env.py", "import comarl.training.loop as loop\n"),
    ("models/agents.py", "from comarl.training import Trainer\n"),
    ("objective/losses.py", "from ..models.agents import Agent\n"),
    ("objective/losses.py", "from ..compute.precision import autocast\n"),
    ("envs/writing/env.py", "from ...generation.hf import generate\n"),
    ("sandbox/run.py", "from ..core.types import Node\n"),
    ("sandbox/run.py", "import comarl\n"),
    ("newthing.py", "x = 1\n"),
    ("core/types.py", "from ..newthing import x\n"),
])
def test_the_check_sees_every_import_form(tmp_path, where, source):
    assert violations(_package(tmp_path, {where: source})), source


@pytest.mark.parametrize("where, source", [
    ("rollout/tree.py", "from ..generation import device_groups\n"),
    ("generation/hf.py", "from ..core.runtime import MIXED_PRECISION\n"),
    ("envs/coding/env.py", "from .training_data import load\n"),  # comarl.envs.coding.training_data
    ("envs/coding/env.py", "from ..training import x\n"),  # comarl.envs.training, not comarl.training
    ("envs/coding/env.py", "from ...sandbox import run\n"),
    ("training/loop.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..cli import main\n"),
    ("objective/losses.py", "import torch\nfrom ..core.types import Node\n"),
])
def test_the_check_allows_imports_that_point_down(tmp_path, where, source):
    assert not violations(_package(tmp_path, {where: source})), source
