"""The package reads top to bottom: nothing below the training loop imports from ``comarl/training/``.

CLI, experiment builder and demo sit above the loop and may import it;
``comarl/__init__.py`` is the public facade and re-exports ``Trainer``.
Everything else (rollout, generation, agents, config, envs, algorithms, updates,
sources, compute, checkpoints, evaluation, math, sandbox) must not, and the loop
imports none of the modules above it.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "comarl"
ABOVE_THE_LOOP = {"cli.py", "experiment.py", "demo.py", "__init__.py"}


def imported_modules(path: Path, package_root: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every module an ``import`` / ``from ... import`` in ``path`` names.

    Relative imports are resolved against the file's package; ``from . import training``
    is reported as ``comarl.training`` (the imported names are appended as submodules).
    """
    rel = path.relative_to(package_root.parent).with_suffix("")
    package = list(rel.parts[:-1])  # the package a relative import starts from (also for __init__.py)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def imports_training(path: Path, package_root: Path) -> list[str]:
    return [f"{path.relative_to(package_root.parent)}:{line} imports {mod}"
            for line, mod in imported_modules(path, package_root)
            if mod == "comarl.training" or mod.startswith("comarl.training.")]


def test_no_module_below_the_loop_imports_training():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "training" or (len(rel.parts) == 1 and rel.name in ABOVE_THE_LOOP):
            continue
        offenders += imports_training(path, PACKAGE)
    assert not offenders, "modules below the training loop import comarl.training:\n" + "\n".join(offenders)


def test_the_loop_imports_nothing_above_it():
    above = {f"comarl.{name[:-3]}" for name in ABOVE_THE_LOOP if name != "__init__.py"}
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}"
                 for path in sorted((PACKAGE / "training").rglob("*.py"))
                 for line, mod in imported_modules(path, PACKAGE)
                 if mod in above or any(mod.startswith(a + ".") for a in above)]
    assert not offenders, "the training loop imports modules above it:\n" + "\n".join(offenders)


@pytest.mark.parametrize("where, source", [
    ("rollout.py", "from .training.placement import device_groups\n"),
    ("rollout.py", "from . import training\n"),
    ("generation/hf.py", "from ..training.precision import autocast\n"),
    ("generation/hf.py", "from ..training import loop\n"),
    ("config.py", "def f():\n    from .training.optim import check_optimizer\n"),
    ("envs/coding/env.py", "import comarl.training.loop as loop\n"),
    ("agents.py", "from comarl.training import Trainer\n"),
])
def test_the_check_sees_every_import_form(tmp_path, where, source):
    root = tmp_path / "comarl"
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    assert imports_training(path, root), source


@pytest.mark.parametrize("where, source", [
    ("rollout.py", "from .generation import device_groups\n"),
    ("generation/hf.py", "from ..runtime import MIXED_PRECISION\n"),
    ("envs/coding/env.py", "from .training_data import load\n"),  # comarl.envs.coding.training_data
    ("envs/coding/env.py", "from ..training import x\n"),  # comarl.envs.training, not comarl.training
])
def test_the_check_allows_other_modules(tmp_path, where, source):
    root = tmp_path / "comarl"
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    assert not imports_training(path, root), source
