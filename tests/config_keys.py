"""Setting config keys section by section in tests: ``set_keys(cfg, run={"max_steps": 2}, loss={"kl_beta": 0.1})``.

For test helpers that take overrides (``demo_trainer(out, run={"save_total_limit": 3})``): the keys are written
with their section, as YAML and ``TrainConfig(run=RunConfig(...))`` write them, and a key the section does not
have is an error, not a new attribute.
"""
from __future__ import annotations

import dataclasses
from typing import Any


def set_keys(cfg: Any, **sections: dict[str, Any]) -> Any:
    """``cfg`` (a TrainConfig) with ``sections`` (section name -> {key: value}) set in place; returns ``cfg``."""
    for section, keys in sections.items():
        target = getattr(cfg, section)
        names = {f.name for f in dataclasses.fields(target)}
        for key, value in keys.items():
            if key not in names:
                raise TypeError(f"{type(target).__name__} has no key {key!r} (train.{section}.{key})")
            setattr(target, key, value)
    return cfg
