"""``comarl serve TARGET``: a team, trained or not, behind the OpenAI-compatible endpoint.

TARGET is a YAML experiment (its agents, untrained, or with ``--checkpoint FOLDER``'s weights), a checkpoint or
``final/`` folder holding ``agent<i>/`` model folders, or a run folder (its ``final/``, else its newest
checkpoint). ``key=value`` overrides apply as in ``comarl train`` (``agents.0.max_new_tokens=256``,
``train.hardware.generator=vllm``); a folder's agents are named ``agent<i>`` unless ``--names`` says otherwise.
The generator is the config's (``train.hardware.generator``: Hugging Face ``generate``, or the vLLM engines),
sampling seeded with ``train.run.seed``. It binds 127.0.0.1; another ``--host`` needs ``--api-key`` (or
``COMARL_API_KEY``), checked on every request. Ctrl-C (or SIGTERM) stops it and closes every connection.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ..core.config_io import ConfigError


def served_folder(path: Path) -> Path:
    """The folder holding ``agent<i>/``: ``path`` itself, its ``final/``, or its newest ``checkpoint-<step>/``."""
    if (path / "agent0").is_dir():
        return path
    if (path / "final" / "agent0").is_dir():
        return path / "final"
    steps = sorted((int(m.group(1)), p) for p in path.glob("checkpoint-*")
                   if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)) and (p / "agent0").is_dir())
    if steps:
        return steps[-1][1]
    raise ConfigError(f"comarl serve: {path} holds no agent0/ folder (a checkpoint or final/ folder), nor a run's "
                      f"final/ or checkpoint-<step>/ with one")


def team_config(target: str, overrides: list[str], checkpoint: str | None, names: list[str] | None):
    """(the ExperimentConfig to serve, the folder its weights come from or None, a line saying what is served)."""
    from ..config import ExperimentConfig, load_config
    from ..core.config_io import apply_overrides, canonical, canonical_key, from_dict

    path = Path(target)
    if path.is_file():
        cfg = load_config(path, overrides)
        folder = served_folder(Path(checkpoint)) if checkpoint else None
        what = f"the agents of {path}" + (f" with the weights of {folder}" if folder else " (untrained)")
    elif path.is_dir():
        if checkpoint:
            raise ConfigError("comarl serve: --checkpoint goes with a config file; a folder is served as it is")
        folder = served_folder(path)
        n = len(list(folder.glob("agent[0-9]*")))
        if names is not None and len(names) != n:
            raise ConfigError(f"--names: {len(names)} names for the {n} agents in {folder}")
        if any((folder / f"agent{i}" / "adapter_config.json").exists() for i in range(n)):
            raise ConfigError(f"comarl serve: {folder} holds LoRA adapters, which need their base model: serve the "
                              f"run's config with --checkpoint {folder}")
        data: dict[str, Any] = {"agents": [{"model": str(folder / f"agent{i}"), "name": f"agent{i}"}
                                           for i in range(n)]}
        data = canonical(ExperimentConfig, data)
        apply_overrides(data, [canonical_key(ExperimentConfig, o.split("=", 1)[0].strip()) + "=" + o.split("=", 1)[1]
                               if "=" in o else o for o in overrides])
        cfg = from_dict(ExperimentConfig, data)
        cfg.validate()
        folder, what = None, f"the agents in {folder}"
    else:
        raise ConfigError(f"comarl serve: {target} is neither a config file nor a folder")
    if names is not None:
        if len(names) != len(cfg.agents):
            raise ConfigError(f"--names: {len(names)} names for {len(cfg.agents)} agents")
        cfg.agents = [dataclasses.replace(a, name=nm) for a, nm in zip(cfg.agents, names)]
    return cfg, folder, what


def build_team(cfg, folder: Path | None):
    """The agents and the team generator of ``cfg`` (weights from ``folder`` when given)."""
    from ..models.agents import build_agents
    from ..runs.checkpoint import agents_from_folder
    from ..generation.team import generate_for_agents

    try:
        agents = agents_from_folder(cfg.agents, folder, "--checkpoint") if folder else build_agents(cfg.agents)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    hw = cfg.train.hardware
    if hw.generator != "vllm":
        return agents, generate_for_agents
    from ..generation.vllm_generator import VLLMGenerator
    from ..generation.vllm_settings import vllm_installed

    if not vllm_installed():
        raise ConfigError("train.hardware.generator: vllm is not installed (docs/vllm.md)")
    settings = hw.vllm if hw.vllm.seed is not None else dataclasses.replace(hw.vllm, seed=cfg.train.run.seed)
    return agents, VLLMGenerator(agents, settings)


def serve(args) -> int:
    """The ``comarl serve`` command (``cli.py`` parses ``args``)."""
    import torch

    from . import Gateway, GatewayServer
    from .server import check_host

    api_key = args.api_key or os.environ.get("COMARL_API_KEY") or None
    try:
        check_host(args.host, api_key)
    except ValueError as e:
        raise ConfigError(f"--host: {e}") from None
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    cfg, folder, what = team_config(args.target, args.overrides, args.checkpoint, names)
    torch.manual_seed(cfg.train.run.seed)
    agents, generator = build_team(cfg, folder)
    hw = cfg.train.hardware
    gateway = Gateway(agents, generator, None, {"batch_size": hw.prompts_per_generate,
                                                "batch_adapters": hw.batch_adapters, "share_prefix": hw.share_prefix},
                      window_s=args.window_ms / 1000, api_key=api_key, max_body_bytes=args.max_body_bytes,
                      request_timeout_s=args.request_timeout)
    server = GatewayServer(gateway, args.host, args.port)
    stop = threading.Event()
    # Ctrl-C and SIGTERM both stop it; SIGINT is handled here rather than by Python's default, which a process
    # started in the background of a non-interactive shell lacks (it inherits SIGINT ignored)
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        print(f"comarl serve: {what} as {', '.join(repr(a.name) for a in agents)} on {server.url}/v1 "
              f"(generator {hw.generator}; Ctrl-C stops)", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        getattr(generator, "close", lambda: None)()
        for s, handler in previous.items():
            signal.signal(s, handler)
        n = gateway.requests
        print(f"comarl serve: stopped after {n} completion request{'' if n == 1 else 's'}", file=sys.stderr, flush=True)
    return 0


__all__ = ["build_team", "serve", "served_folder", "team_config"]
