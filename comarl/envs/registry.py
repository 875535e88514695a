"""Name -> environment, for configs and the CLI.

Each entry gives a ``build(num_agents, **args) -> Environment``, a
``load_items(source, split, limit) -> list[dict]`` and the names of the args that take a helper model
(injected built, never built by the environment). ``source`` is a hub
dataset id or a local file/folder; ``None`` means the entry's default.
Modules register themselves on import; ``get_env`` imports the built-in ones
lazily so that, e.g., the coding sandbox is not loaded for a writing run.

A name of the form ``package.module:NAME`` needs no registration: ``NAME`` is an ``EnvEntry``, or a function
``build(num_agents, **args) -> Environment`` whose items come from ``data.*.source`` as plain rows (a local
JSON/JSONL file or folder, or a hub id).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..core.registry import Registry
from .base import Environment


@dataclass(frozen=True)
class EnvEntry:
    build: Callable[..., Environment]
    load_items: Callable[[str | None, str | None, int | None], list[dict[str, Any]]]
    description: str = ""
    helpers: tuple[str, ...] = ()
    """The ``env.args`` keys that take a helper model (``helpers:``, docs/helpers.md): the config names the helper,
    ``experiment.build_env`` hands the environment the built one (the coding envs' ``expert``)."""


# name -> module that registers it (imported on first use)
_BUILTIN_MODULES: dict[str, str] = {
    "demo_writing": "comarl.envs.demo_writing",
    "tldr": "comarl.envs.writing.tldr",
    "arxiv": "comarl.envs.writing.arxiv",
    "humaneval": "comarl.envs.coding.function_env",
    "mbpp": "comarl.envs.coding.function_env",
    "coophumaneval": "comarl.envs.coding.function_env",
    "classeval": "comarl.envs.coding.classeval",
    "travelplanner": "comarl.envs.travel.env",
    "bfcl_parallel": "comarl.envs.tools.bfcl", "bfcl_multiturn_flat": "comarl.envs.tools.bfcl",
    "str_build": "comarl.envs.minecraft.env", "house_build": "comarl.envs.minecraft.env",
    # teams in stages (docs/teams.md)
    "humaneval_planner": "comarl.envs.teams.coding", "coophumaneval_planner": "comarl.envs.teams.coding",
    "mbpp_planner": "comarl.envs.teams.coding", "mbpp_chain": "comarl.envs.teams.coding",
    "humaneval_chain": "comarl.envs.teams.coding", "tldr_editor": "comarl.envs.teams.writing",
}


def _plain_rows(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    if source is None:
        raise ValueError("data source: an environment given by import path needs data.train.source "
                         "(a local JSON/JSONL file or folder, or a hub dataset id)")
    from .loading import load_rows

    return load_rows(source, split, limit, lambda i, row, src: row, "the fields your environment reads")


def _from_import(obj: Any, spec: str) -> EnvEntry:
    """An ``EnvEntry`` as it is, or a ``build(num_agents, **args)`` function whose items are plain rows."""
    if isinstance(obj, EnvEntry):
        return obj
    if not callable(obj):
        raise TypeError("is neither an EnvEntry nor a build(num_agents, **args) function")
    return EnvEntry(obj, _plain_rows, f"user environment {spec}")


ENVIRONMENTS: Registry[EnvEntry] = Registry("environment", "env.name", _BUILTIN_MODULES, from_import=_from_import)


def register_env(name: str, entry: EnvEntry) -> None:
    ENVIRONMENTS.register(name, entry)


def get_env(name: str) -> EnvEntry:
    """The entry named ``name``: built in, registered, or ``package.module:NAME`` (see the module docstring)."""
    return ENVIRONMENTS.get(name)
