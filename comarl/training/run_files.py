"""What a Trainer writes and reads back: checkpoints (save and resume) and the final agents.

Kept beside the loop (``training/loop.py``) so the loop stays a scheduler; these functions read a Trainer's
public members (its team, source, update, state and config) and set only what resuming must restore.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..compute import distributed as dist
from ..compute.sharding import full_state_dict
from ..runs import checkpoint as ckpt
from ..runs import run_dir
from .build import seed_everything
from .optim import rebuild_scheduler

if TYPE_CHECKING:
    from .loop import Trainer
    from .team import Team


def save_checkpoint(trainer: Trainer) -> Path | None:
    """Write ``checkpoint-<step>`` of ``trainer``'s run: the team, the data position, the counters, and what
    the update and the source need to resume. Returns the folder on the main rank, None on the others."""
    st, team, cfg = trainer.state, trainer.team, trainer.config
    if cfg.run.output_dir is None:
        raise ValueError("save_checkpoint: train.run.output_dir is not set (no folder to write checkpoints to)")
    state = {**trainer.source.cursor.state(), "counters": st.counters, "world_size": dist.world_size(),
             "global_batch": trainer.global_batch, "run_id": trainer.run_id}
    modules, extra = {}, {}
    for part in (trainer.update, trainer.source):
        m, e = part.checkpoint_parts(team, st.step)
        modules.update(m)
        extra.update(e)
    if dist.world_size() > 1:  # every rank's random streams (rng.pt holds rank 0's): a resume continues them all
        for r, rng in enumerate(dist.gather_objects(ckpt.rng_state())[1:], start=1):
            extra[rank_rng_file(r)] = rng
    if team.sharding is not None:  # every rank writes its shards
        path = ckpt.save_sharded_checkpoint(cfg.run.output_dir, st.step, team.agents, team.optimizers,
                                            team.schedulers, state, keep=cfg.run.save_total_limit, modules=modules,
                                            extra=extra, checksums=cfg.run.checkpoint_checksums)
        return path if dist.is_main() else None
    if not dist.is_main():
        return None
    return ckpt.save_checkpoint(cfg.run.output_dir, st.step, team.agents, team.optimizers, team.schedulers, state,
                                keep=cfg.run.save_total_limit, extra=extra or None,
                                checksums=cfg.run.checkpoint_checksums)


def resume(trainer: Trainer, where: str) -> None:
    """Load the checkpoint ``where`` names into ``trainer``: weights, optimiser and scheduler states, the
    update's and the source's parts, the data position, the counters and the run id; the generator is
    synced with the loaded weights."""
    cfg, team, source = trainer.config, trainer.team, trainer.source
    out = cfg.run.output_dir or "."
    path = ckpt.resume_checkpoint(where, out, run_dir.read_run_id(out))  # verified; latest: newest that verifies
    saved = ckpt.load_checkpoint(path, team.agents, team.optimizers, team.schedulers, checksums=False)
    trainer.update.restore(path, team)
    source.restore(path, team)
    missing = [k for k in ("run_id", "global_batch", "world_size") if k not in saved]
    if missing:
        raise ckpt.CheckpointError(f"{path}: trainer_state.json lacks {', '.join(missing)}: a checkpoint of a comarl "
                                   f"before 0.1, which this version does not resume (start a fresh run from its "
                                   f"agent folders with agents[i].model)")
    trainer.run_id = saved["run_id"]
    trainer.resumed_from = str(path)
    trainer.state.step = step = saved["step"]
    team.counters.clear()
    team.counters.update(saved["counters"])
    saved_global = saved["global_batch"]
    source.cursor.restore(saved, saved_global)
    if saved_global != trainer.global_batch and not cfg.run.max_steps and source.epoch_based:
        # another global batch (ranks x batch_size): run the rest of the epochs in the new batch size
        trainer.total_steps = step + source.cursor.steps_left(cfg.run.epochs)
        total_opt = trainer.total_steps * cfg.loss.num_iterations
        team.schedulers = [rebuild_scheduler(o, sch, cfg.run.lr_scheduler, cfg.run.warmup_steps, total_opt)
                           for o, sch in zip(team.optimizers, team.schedulers)]
    own = path / rank_rng_file(dist.rank())
    if dist.world_size() > 1 and saved.get("world_size") == dist.world_size() and (dist.rank() == 0 or own.exists()):
        if dist.rank() > 0:  # as many ranks as saved it: each continues its own streams (rank 0's: rng.pt)
            ckpt.set_rng_state(torch.load(own, weights_only=False))
    elif dist.world_size() > 1:  # other ranks (or none saved): give each rank its own stream again
        seed_everything(dist.sampling_seed(cfg.run.seed, dist.rank(), step))
    team.sync_generator(everything=True)  # a generator with its own weights samples from the loaded ones
    if dist.is_main():
        if cfg.run.output_dir:  # rows the interrupted run logged after this checkpoint
            run_dir.truncate_logs(cfg.run.output_dir, step)
        print(f"resumed from {path.name} (step {step} of {trainer.total_steps})", flush=True)


def rank_rng_file(rank: int) -> str:
    """The checkpoint file holding rank ``rank``'s random states under torchrun (rank 0's are in ``rng.pt``)."""
    return f"rng-rank{rank}.pt"


def save_agents(team: Team, path: Path) -> Path:
    """Each agent's model (or adapter) and tokenizer in ``path/agent<i>``; sharded agents gathered one tensor
    at a time onto rank 0, which writes plain Hugging Face folders (every rank calls this)."""
    for i, agent in enumerate(team.agents):
        full = full_state_dict(agent.model, keep=dist.is_main()) if team.sharding is not None else None
        if dist.is_main():
            ckpt.save_agent_weights(agent, path / f"agent{i}", state_dict=full)
    return path
