"""Which algorithms can train on a ``ProgramEnv`` (``comarl/envs/program.py``): checked before any model is built."""
from __future__ import annotations

from ..core.config_io import ConfigError
from .base import policy_gradient, prompt_batches

SUPPORTED = "magrpo, mareinforce, marloo, maremax_groupmax (and their single-agent names)"


def check_program_run(cfg, algorithm) -> None:
    """Refuse, before any model is built, what program runs cannot do (one line naming the key).

    A run is one joint action with no tree inside it: critics (IAC, MAAC) value tree nodes, MAReMax decodes a
    greedy continuation of each node, MADPO and MARLHF pair the joint actions of a node's texts, and turns,
    cross joint actions and early stops shape a tree the program replaces with its own control flow.
    """
    r = cfg.rollout
    if r.max_staleness:
        raise ConfigError("train.rollout.max_staleness: a program's calls are served by the gateway as the program "
                          "makes them, not sampled ahead by a generation worker; set it to 0")
    if r.num_turns != 1:
        raise ConfigError(f"train.rollout.num_turns: {r.num_turns}; a program runs its own turns (a ProgramEnv run is "
                          f"one episode): set 1")
    if r.joint_mode != "aligned":
        raise ConfigError(f"train.rollout.joint_mode: {r.joint_mode}; program runs are whole joint actions, K per item "
                          f"(aligned): there are no samples to cross")
    for key in ("early_stop_reward", "early_stop_sibling_mean"):
        if getattr(r, key) is not None:
            raise ConfigError(f"train.rollout.{key}: a program run ends when the program returns; leave it unset")
    step = algorithm.step_algorithm(cfg)
    why = None
    if algorithm.source is not prompt_batches or step.source is not prompt_batches:
        why = "learns in rounds over a pool of scored pairs"
    elif step.update is not policy_gradient or step.advantage is None:
        why = "learns from pairs of a node's joint actions, which program runs do not form"
    elif step.critic is not None:
        why = f"trains a critic ({step.critic}) over the rollout tree's nodes; a program run has no tree"
    elif step.greedy_baseline:
        why = "decodes a greedy continuation of every node, which a program run has none of"
    if why is not None:
        raise ConfigError(f"train.algorithm: {cfg.algorithm} {why}; with a ProgramEnv use {SUPPORTED}")
    if cfg.hardware.sharding == "fsdp" and cfg.hardware.fsdp_gather == "agent":
        raise ConfigError("train.hardware.fsdp_gather: agent gathers one agent at a time, in step with the other "
                          "ranks; a program calls agents in its own order: use fsdp_gather: team")


__all__ = ["SUPPORTED", "check_program_run"]
