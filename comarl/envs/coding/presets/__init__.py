"""The coding presets, chosen here and nowhere else (``env.args.preset``).

``default`` is comarl's own preset (``comarl`` is its old name, kept as an alias so existing configs work);
``paper`` is the MAGRPO paper's. Each preset is one module holding a :class:`~.records.FunctionPreset` (HumanEval,
MBPP, CoopHumanEval) and a :class:`~.records.ClassPreset` (ClassEval). To add one: write such a module
(``records.py`` says what each member receives and returns) and add its records to the two tables below.
"""
from __future__ import annotations

from typing import Mapping, TypeVar

from . import default, paper
from .records import ClassPreset, FunctionPreset

FUNCTION_PRESETS: Mapping[str, FunctionPreset] = {"default": default.FUNCTION, "paper": paper.FUNCTION}
CLASS_PRESETS: Mapping[str, ClassPreset] = {"default": default.CLASS, "paper": paper.CLASS}
ALIASES = {"comarl": "default"}

P = TypeVar("P")


def choose(table: Mapping[str, P], name: str) -> P:
    """The record ``name`` (or its alias) names in ``table``; anything else is an error naming ``env.args.preset``."""
    record = table.get(ALIASES.get(name, name)) if isinstance(name, str) else None
    if record is None:
        known = ", ".join(list(table) + [f"{a} (= {t})" for a, t in ALIASES.items() if t in table])
        raise ValueError(f"env.args.preset: must be one of {known}, got {name!r}")
    return record
