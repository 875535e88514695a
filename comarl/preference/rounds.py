"""The rounds of the iterative preference algorithms, as StepSources: ``DPORounds`` (``madpo_iter``) and
``RewardModelRounds`` (``marlhf_iter``), sharing one ``RoundSampler``.

Round r covers training steps ``[r*S, (r+1)*S)`` (S = ``steps_per_round``;
``train.run.max_steps`` caps the total, default ``rounds * S``). At its first step:

1. ``madpo_iter`` with ``reference: current``: the DPO reference becomes a frozen copy of the policy;
2. the current policy samples ``round_batches`` batches with the *environment's* reward; with a comparator
   (``train.preference.iterative.comparator``) the comparator samples the same items and candidate j of the policy
   meets candidate j of the comparator at each root node; else pairs are taken among the policy's own
   candidates at every node (``preference.tree_pairs``);
3. every rank's pairs go to ``<output_dir>/round-<r>/pairs.jsonl``; the pool is these plus the replayed earlier
   rounds' (``replay``, weights or draws from ``replay.replay_pool``);
4. ``marlhf_iter``: the joint reward model is fitted (fresh or continued) on the pool and its score becomes
   the reward of the round's steps (``RewardModelEnv``).

Every step of the round is then a DPO step on the pool (``DPORounds`` hands the update a ``PairBatch``) or
one step of ``train.preference.iterative.rl_algorithm`` on the reward model's score (``RewardModelRounds`` hands it a
``PromptBatch``). The round's last step is followed by a checkpoint and ``rounds.json``. The loop drives this
one step at a time, so logging, ``eval_steps``, ``save_steps``, Ctrl-C and ``max_steps`` are the loop's.

Resume: the checkpoint's step gives the round and the step inside it. At a round boundary the next round
starts as in an unbroken run (the data position and RNG come from the checkpoint). Inside a round its pairs
are read back from its file, and what cannot be rebuilt (the reward model; ``madpo_iter``'s frozen reference
of ``reference: current``) comes from the checkpoint, which stores it whenever it is needed.

The sources use the Team (``training/team.py``) through its public members only.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..compute import distributed as dist
from ..core.config_io import ConfigError
from ..core.steps import PairBatch, PromptBatch, SkipStep
from ..envs.base import rollout_modules
from ..rollout import RolloutSettings, collect_rollout, join_rollout
from ..runs import checkpoint as ckpt
from ..sources import PromptBatches
from .comparators import comparator_for
from .pair_tokens import tokenizer_fingerprint
from .pairs_file import read_pairs
from .parallel_fit import ParallelFit

if TYPE_CHECKING:
    from ..core.seams import TeamView
    from .reward_model import JointRewardModel
from .replay import replay_pool
from .rollout_pairs import (all_ranks_pairs, comparison_pairs_of, node_items, node_rngs, step_pairs, text_pairs,
                            text_pairs_to_ids)


def copy_weights_in_place(src: torch.nn.Module, dst: torch.nn.Module) -> None:
    """``dst``'s weights := ``src``'s, tensor by tensor in place; FSDP shards copied shard to shard, with no
    communication (both modules sharded alike on one mesh: the agent and its reference copy)."""
    from torch.distributed.tensor import DTensor

    theirs, mine = src.state_dict(), dst.state_dict()
    if sorted(theirs) != sorted(mine):
        raise ValueError(f"cannot copy {type(src).__name__}'s weights into {type(dst).__name__}: other tensor names")
    with torch.no_grad():
        for k, d in mine.items():
            s = theirs[k]
            if isinstance(d, DTensor) != isinstance(s, DTensor) or \
                    (isinstance(d, DTensor) and (d.placements != s.placements or d.shape != s.shape)):
                raise ValueError(f"cannot copy {k} shard to shard: the two modules are not sharded alike")
            (d.to_local() if isinstance(d, DTensor) else d).copy_(s.to_local() if isinstance(s, DTensor) else s)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


class RoundSampler:
    """What both kinds of rounds share: the schedule, each round's pairs (own candidates or against a
    comparator), their files, the pool with replay, and the checkpoint the rounds resume from.

    Args:
        config: the run's ``TrainConfig``.
        prompts: the ``PromptBatches`` whose cursor the rounds' sampling (and, ``marlhf_iter``, the steps)
            walk.
        lockstep: the team's ``AgentAtATime`` or None (``train.hardware.fsdp_gather: agent``).
        generator: the team generator (``generation/team.py``); None: Hugging Face's.
    """

    def __init__(self, config, prompts: PromptBatches, lockstep=None, generator=None):
        self.config, self.prompts = config, prompts
        self.out = Path(config.run.output_dir)
        self.base_env = prompts.env  # the environment's own reward picks the winners
        # pair sampling: no greedy baseline; fsdp_gather=agent: one agent gathered per generate call, as in the steps
        self.settings = RolloutSettings.from_train_config(config, lockstep=lockstep, generator=generator)
        self.resumed_from: Path | None = None  # the checkpoint the run resumed from (restore)
        self.comparator = comparator_for(config.preference.iterative, self.out)  # ``comparators.py``
        self.collect = collect_rollout  # (agents, env, items, settings) -> Rollout; a test may watch it

    @property
    def steps_per_round(self) -> int:
        return self.config.preference.iterative.steps_per_round

    def total_steps(self) -> int:
        return self.config.run.max_steps or self.config.preference.iterative.rounds * self.steps_per_round

    def ends_round(self, step: int) -> bool:
        """Whether ``step`` (steps done) closes a round."""
        return step % self.steps_per_round == 0

    def saved(self, checkpoint: Path | None, step: int) -> None:
        """After the checkpoint that closes a round: record it in ``rounds.json``."""
        if dist.is_main() and self.ends_round(step):
            done = step // self.steps_per_round
            (self.out / "rounds.json").write_text(json.dumps({"rounds_done": done, "checkpoint": str(checkpoint)}))

    # ----------------------------------------------------------- a round's pairs
    def sample(self, team: "TeamView", r: int, step: int) -> tuple[list[dict], dict[str, float], list[dict]]:
        """Round r's pairs (every rank's, written to its file), its metrics, and a few sampled rows."""
        cfg, pref = self.config, self.config.preference
        comparator = self.comparator.agents(team, r)
        rollouts, others, sampled = [], [], []
        lockstep = self.settings.lockstep
        # sharded agents and comparator (unless gathered one at a time) and any module the env's own reward runs:
        # whole for the round's sampling
        # a comparator with its own generator (a helper's seats) holds no model of the team's: nothing to gather
        own = self.comparator.generator is not None
        other = dataclasses.replace(self.settings, generator=self.comparator.generator, lockstep=None) if own \
            else self.settings
        whole = [] if lockstep is not None else [a.model for a in team.agents] + (
            [a.model for a in comparator] if comparator is not None and comparator is not team.agents and not own
            else [])
        with team.gathered(whole + rollout_modules(self.base_env)):
            for b in range(pref.iterative.round_batches):
                items = self.prompts.next_items()
                if not items:  # this rank's share of the batch is empty (end of an epoch under torchrun)
                    if lockstep is not None:  # one agent at a time: join the other ranks' gathers
                        for side in [team.agents] + ([comparator] if comparator is not None and not own else []):
                            join_rollout(side, self.settings)
                    continue
                sampled.append(b)
                rollouts.append(self.collect(team.agents, self.base_env, items, self.settings))
                if comparator is not None:
                    others.append(self.collect(comparator, self.base_env, items, other))
        keys = [f"{cfg.run.seed}/round{r}/batch{b}" for b in sampled]  # pair_selection: random
        fps = [tokenizer_fingerprint(a.tokenizer) for a in team.agents]  # pairs keep their sampled tokens
        if comparator is None:
            batches = [text_pairs(ro, step_pairs([ro], cfg.rollout, cfg.preference.pairs, key)[0], step, r, fps)
                       for ro, key in zip(rollouts, keys)]
        else:
            sides = (fps, [tokenizer_fingerprint(a.tokenizer) for a in comparator])
            batches = [comparison_pairs_of(ro, co, cfg, node_rngs(ro, key), step, r, sides)
                       for ro, co, key in zip(rollouts, others, keys)]
        # the round's file and pool hold every rank's pairs, in the order one process would make them
        # (madpo_iter: each rank then trains on its share of the pool; marlhf_iter: one reward model on all)
        pairs = all_ranks_pairs([(b, [(node_item[g], p) for g, p in batch])
                                  for b, batch, node_item in zip(sampled, batches, map(node_items, rollouts))])
        completions = sum(ro.num_completions for ro in rollouts + others)
        # a comparator loaded for this round only is freed before the round's training, not when the next round's
        # replaces it (its rollouts hold no model; this frame's reference goes first)
        comparator = None
        self.comparator.release()
        folder = self.out / f"round-{r}"
        folder.mkdir(parents=True, exist_ok=True)
        if dist.is_main():
            (folder / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
        team.count("completions", completions)
        env_reward = _mean([ro.metrics.get("reward/turn0", 0.0) for ro in rollouts])
        metrics = {"round": r, "pref/pairs": float(len(pairs)), "pref/env_reward": env_reward}
        if others:
            metrics["pref/comparator_env_reward"] = _mean([o.metrics.get("reward/turn0", 0.0) for o in others])
            metrics["pref/policy_wins"] = (sum(p["chosen_by"] == "policy" for p in pairs) / len(pairs)
                                           if pairs else float("nan"))
        return pairs, metrics, (rollouts[0].examples if rollouts else [])

    def read_round(self, r: int, step: int) -> list[dict]:
        """Round r's pairs from its file (resumed inside the round)."""
        path = self.out / f"round-{r}" / "pairs.jsonl"
        if not path.exists():
            raise ConfigError(f"train.run.resume: step {step} is inside round {r}, but {path} is missing")
        return read_pairs(path)

    def pool(self, r: int, pairs: list[dict]) -> tuple[list[dict], torch.Tensor]:
        """Round r's pool (its pairs and the replayed earlier rounds', ``replay.replay_pool``) and a weight
        per pair."""
        pairs_of = lambda past: pairs if past == r else read_pairs(self.out / f"round-{past}" / "pairs.jsonl")  # noqa: E731
        pool, weights = replay_pool(r, pairs_of, self.config.preference.iterative, self.config.run.seed)
        return pool, torch.tensor(weights, dtype=torch.float32)

    # ----------------------------------------------------------- checkpoints
    def load_extra(self, name: str):
        if self.resumed_from is None:
            raise ConfigError(f"train.run.resume: resuming inside a round needs the checkpoint's {name}")
        return ckpt.load_extra(self.resumed_from, name)


class DPORounds:
    """``madpo_iter``'s source: each step DPO on the round's pool (this rank's share of it, as token ids)."""

    epoch_based = False

    def __init__(self, sampler: RoundSampler):
        self.sampler = sampler
        self.cursor, self.env = sampler.prompts.cursor, sampler.base_env
        self.total_steps = sampler.total_steps()
        self.round: int | None = None  # the round whose pool is ready
        self.metrics: dict[str, float] = {}
        self.examples: list[dict] = []
        self.pool: list[dict] = []
        self.data: list = []  # this rank's share of the pool, per agent (AgentPairs)
        self.data_weights = torch.zeros(0)

    @property
    def refreshes_reference(self) -> bool:
        pref = self.sampler.config.preference
        return pref.iterative.reference == "current" and not pref.dpo.reference_free

    def next(self, step: int, team: "TeamView") -> PairBatch | SkipStep:
        r, offset = divmod(step, self.sampler.steps_per_round)
        if self.round != r:
            self._start(team, r, step) if offset == 0 else self._resume_inside(team, r, step)
            self.round = r
        if not self.pool:  # nothing to prefer this round
            return SkipStep(dict(self.metrics))
        examples, self.examples = self.examples, []  # the round's samples go with its first step
        return PairBatch(self.data, self.data_weights, dict(self.metrics), examples)

    def _start(self, team: "TeamView", r: int, step: int) -> None:
        if self.refreshes_reference:
            if team.sharding is not None:  # the sharded copy made at the start takes the policy's shards
                for i, ref in team.distinct_references():
                    copy_weights_in_place(team.agents[i].model, ref.model)
            else:
                team.references = team.new_references()
                team.place_references()
        pairs, self.metrics, self.examples = self.sampler.sample(team, r, step)
        self.metrics["reward/mean"] = self.metrics["pref/env_reward"]  # the policy's round samples
        self._build_pool(team, r, pairs)

    def _resume_inside(self, team: "TeamView", r: int, step: int) -> None:
        """Resumed inside round r: its pairs from disk, its frozen reference (reference: current) from the
        checkpoint."""
        pairs = self.sampler.read_round(r, step)
        self.metrics = {"round": r, "pref/pairs": float(len(pairs))}
        self._build_pool(team, r, pairs)
        if not self.refreshes_reference:
            return
        if team.sharding is None:
            team.references = team.new_references()
        for i, ref in team.distinct_references():  # sharded: into the sharded copy made at the start
            folder = Path(self.sampler.resumed_from or "") / f"reference{i}"
            if (folder / "dcp").is_dir():  # written by a sharded run (resharded to this one)
                ckpt.load_sharded_module(folder, ref.model)
            elif team.sharding is None:
                ref.model.load_state_dict(self.sampler.load_extra(f"reference{i}.pt"))
            else:
                raise ConfigError(f"train.run.resume: resuming inside a round under sharding needs {folder}/dcp "
                                  f"(a checkpoint of a sharded run)")
        team.place_references()

    def _build_pool(self, team: "TeamView", r: int, pairs: list[dict]) -> None:
        self.pool, weights = self.sampler.pool(r, pairs)
        # each rank trains on its share of the pool (data parallel; the loss is normalised globally)
        mine = dist.shard(list(range(len(self.pool))))
        self.data = text_pairs_to_ids(team.agents, [self.pool[k] for k in mine]) if self.pool else []
        self.data_weights = weights[mine]
        self.metrics["pref/pool"] = float(len(self.pool))

    # ----------------------------------------------------------- the loop's hooks
    def ends_round(self, step: int) -> bool:
        return self.sampler.ends_round(step)

    def saved(self, path: Path | None, step: int) -> None:
        self.sampler.saved(path, step)

    def restore(self, path: Path, team: "TeamView") -> None:
        self.sampler.resumed_from = Path(path)

    def checkpoint_parts(self, team: "TeamView", step: int) -> tuple[dict, dict]:
        """Inside a round with ``reference: current``: the frozen reference copies (``reference<i>``), which
        nothing else can rebuild."""
        if not self.refreshes_reference or self.sampler.ends_round(step):
            return {}, {}
        refs = list(team.distinct_references())
        if team.sharding is not None:
            return {f"reference{i}": (ref.model, None) for i, ref in refs}, {}
        return {}, {f"reference{i}.pt": ref.model.state_dict() for i, ref in refs}


class RewardModelRounds:
    """``marlhf_iter``'s source: each round fits the joint reward model on the pool; each step is a prompt
    batch scored by that model (``RewardModelEnv``), for ``train.preference.iterative.rl_algorithm``'s update."""

    epoch_based = False

    def __init__(self, sampler: RoundSampler):
        self.sampler = sampler
        self.cursor = sampler.prompts.cursor
        self.env = sampler.base_env  # the reward model's env once there is one
        self.total_steps = sampler.total_steps()
        self.round: int | None = None
        self.metrics: dict[str, float] = {}
        self.examples: list[dict] = []
        self.reward_model: JointRewardModel | None = None
        self.pool: list[dict] = []
        self.weights = torch.zeros(0)

    def next(self, step: int, team: "TeamView") -> PromptBatch | SkipStep:
        r, offset = divmod(step, self.sampler.steps_per_round)
        if self.round != r:
            self._start(team, r, step) if offset == 0 else self._resume_inside(team, r, step)
            self.round = r
        if self.reward_model is None:  # before the first pair there is no reward model: the step is skipped
            return SkipStep({**self.metrics, "rm/skipped_step": 1.0})
        return PromptBatch(self.sampler.prompts.next_items(), self.env, dict(self.metrics))

    def _start(self, team: "TeamView", r: int, step: int) -> None:
        if self.reward_model is None and self._has_reward_model():
            # resumed at a round boundary: last round's model, to continue or to keep when this round has no pair
            self.reward_model = self._load_reward_model(team)
            self.env = self._reward_env()
        pairs, self.metrics, self.examples = self.sampler.sample(team, r, step)
        self.pool, self.weights = self.sampler.pool(r, pairs)
        self.metrics["pref/pool"] = float(len(self.pool))
        self.fit_reward_model(team, r)

    def _resume_inside(self, team: "TeamView", r: int, step: int) -> None:
        """Resumed inside round r: its pairs from disk, its reward model from the checkpoint."""
        pairs = self.sampler.read_round(r, step)
        self.metrics = {"round": r, "pref/pairs": float(len(pairs))}
        self.pool, self.weights = self.sampler.pool(r, pairs)
        self.metrics["pref/pool"] = float(len(self.pool))
        if self._has_reward_model():
            self.reward_model = self._load_reward_model(team)
            self.env = self._reward_env()

    def fit_reward_model(self, team: "TeamView", r: int) -> None:
        """Fit (fresh, or continued with ``reward_model_refit: continue``) the joint reward model on round r's
        pool; its score becomes the reward of the round's steps."""
        from ..critics.joint_input import resolve_joint_input
        from .marlhf import load_classifier
        from .reward_model import JointRewardModel

        cfg, pref = self.sampler.config, self.sampler.config.preference
        s = pref.iterative.reward_model
        if not self.pool:  # nothing to learn from: last round's model stays (none yet: the steps are skipped)
            self.metrics["rm/refit"] = 0.0
            return
        with torch.random.fork_rng(devices=[]):  # the policy's sampling stream is not touched
            torch.manual_seed(cfg.run.seed * 1009 + r)
            if self.reward_model is None or pref.iterative.reward_model_refit == "fresh":
                model, tok = load_classifier(s.model, s.device)
                self.reward_model = self._data_parallel(team, JointRewardModel(
                    model, tok, resolve_joint_input(s.joint_input), s.freeze_backbone, s.max_length))
            cut = len(self.pool) - int(round(len(self.pool) * s.held_out))
            train, held = self.pool[:cut], self.pool[cut:]
            if train:
                self.reward_model.fit(train, s.epochs, s.batch_size, s.lr, cfg.run.seed + r,
                                      weights=self.weights[:cut].tolist(), max_grad_norm=s.max_grad_norm)
            acc = self.reward_model.accuracy(held) if held else float("nan")
        report = {"rm/accuracy": acc, "rm/train_pairs": float(len(train)), "rm/held_out_pairs": float(len(held))}
        self.metrics.update({**report, "rm/refit": 1.0})
        if dist.is_main():
            (self.sampler.out / f"round-{r}" / "reward_model.json").write_text(json.dumps(report, indent=2))
        self.env = self._reward_env()

    def _reward_env(self):
        from .reward_model import RewardModelEnv

        assert self.reward_model is not None, "the reward environment needs a fitted or loaded reward model"
        return RewardModelEnv(self.sampler.base_env, self.reward_model)

    @staticmethod
    def _data_parallel(team: "TeamView", rm):
        """Under torchrun: ``rm`` trains over all ranks, sharded on the team's mesh when the agents are."""
        return rm.data_parallel(ParallelFit(team.sharding)) if dist.is_distributed() else rm

    def _load_reward_model(self, team: "TeamView"):
        """The checkpoint's reward model: ``reward_model.pt`` (an unsharded run's, loaded before sharding) or
        ``reward_model/dcp`` (a sharded run's, resharded onto this run's ranks or loaded whole)."""
        from ..critics.joint_input import resolve_joint_input
        from .marlhf import load_classifier
        from .reward_model import JointRewardModel

        assert self.sampler.resumed_from is not None, "called only when _has_reward_model()"
        s, where = self.sampler.config.preference.iterative.reward_model, Path(self.sampler.resumed_from)
        with torch.random.fork_rng(devices=[]):
            model, tok = load_classifier(s.model, s.device)
        if (where / "reward_model.pt").exists():
            model.load_state_dict(self.sampler.load_extra("reward_model.pt"))
        rm = self._data_parallel(team, JointRewardModel(model, tok, resolve_joint_input(s.joint_input),
                                                        s.freeze_backbone, s.max_length))
        if (where / "reward_model" / "dcp").is_dir():
            ckpt.load_sharded_module(where / "reward_model", rm.model)
        rm.model.eval()
        return rm

    def _has_reward_model(self) -> bool:
        """Whether the checkpoint resumed from holds a reward model (either form)."""
        where = self.sampler.resumed_from
        return where is not None and ((Path(where) / "reward_model.pt").exists()
                                      or (Path(where) / "reward_model" / "dcp").is_dir())

    # ----------------------------------------------------------- the loop's hooks
    def ends_round(self, step: int) -> bool:
        return self.sampler.ends_round(step)

    def saved(self, path: Path | None, step: int) -> None:
        self.sampler.saved(path, step)

    def restore(self, path: Path, team: "TeamView") -> None:
        self.sampler.resumed_from = Path(path)

    def checkpoint_parts(self, team: "TeamView", step: int) -> tuple[dict, dict]:
        """The reward model (used inside the round, continued next round, or kept by a next round without
        pairs): ``reward_model/dcp`` when sharded (no optimiser: each fit builds its own), else
        ``reward_model.pt``."""
        rm = self.reward_model
        if rm is None:
            return {}, {}
        if rm.sharded:
            return {"reward_model": (rm.model, None)}, {}
        return {}, {"reward_model.pt": rm.model.state_dict()}


__all__ = ["DPORounds", "RewardModelRounds", "RoundSampler", "copy_weights_in_place"]
