"""Name -> environment, for configs and the CLI.

Each entry gives a ``build(num_agents, **args) -> Environment`` and a
``load_items(source, split, limit) -> list[dict]``. ``source`` is a hub
dataset id or a local file/folder; ``None`` means the entry's default.
Modules register themselves on import; ``get_env`` imports the built-in ones
lazily so that, e.g., the coding sandbox is not loaded for a writing run.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from .base import Environment


@dataclass(frozen=True)
class EnvEntry:
    build: Callable[..., Environment]
    load_items: Callable[[str | None, str | None, int | None], list[dict[str, Any]]]
    description: str = ""


_REGISTRY: dict[str, EnvEntry] = {}

# name -> module that registers it (imported on first use)
_BUILTIN_MODULES: dict[str, str] = {
    "demo_writing": "comarl.envs.demo_writing",
    "tldr": "comarl.envs.writing.tldr",
    "arxiv": "comarl.envs.writing.arxiv",
    "humaneval": "comarl.envs.coding.function_env",
    "mbpp": "comarl.envs.coding.function_env",
    "coophumaneval": "comarl.envs.coding.function_env",
    "classeval": "comarl.envs.coding.classeval",
}


def register_env(name: str, entry: EnvEntry) -> None:
    _REGISTRY[name] = entry


def get_env(name: str) -> EnvEntry:
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
    if name not in _REGISTRY:
        known = sorted(set(_REGISTRY) | set(_BUILTIN_MODULES))
        raise KeyError(f"env.name: unknown environment {name!r}; known: {', '.join(known)}")
    return _REGISTRY[name]


def env_names() -> list[str]:
    return sorted(set(_REGISTRY) | set(_BUILTIN_MODULES))
