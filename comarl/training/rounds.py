"""The outer loop of the iterative preference algorithms (``madpo_iter``, ``marlhf_iter``), and offline MADPO.

Round r covers training steps ``[r*S, (r+1)*S)`` (S = ``steps_per_round``;
``train.max_steps`` caps the total, default ``rounds * S``). At its first step:

1. ``madpo_iter`` with ``reference: current``: the DPO reference becomes a frozen copy of the policy;
2. the current policy samples ``round_batches`` batches with the *environment's* reward; with a comparator
   (``train.preference.comparator``) the comparator samples the same items and candidate j of the policy
   meets candidate j of the comparator at each root node; else pairs are taken among the policy's own
   candidates at every node (``preference.tree_pairs``);
3. every rank's pairs go to ``<output_dir>/round-<r>/pairs.jsonl``; the pool is these plus the replayed earlier
   rounds' (``replay``: ``preference.replay.replay_pool``);
4. ``marlhf_iter``: the joint reward model is fitted (fresh or continued) on the pool and its score becomes
   the reward of the round's steps (``RewardModelEnv``).

Every step of the round is then a DPO step on the pool (``madpo_iter``) or one step of
``train.preference.rl_algorithm`` in the ordinary loop (``marlhf_iter``). The round's last step is
followed by a checkpoint and ``rounds.json``. The loop (``loop.py``) drives this one step at a time, so
logging, ``eval_steps``, ``save_steps``, Ctrl-C and ``max_steps`` are the loop's.

Resume: the checkpoint's step gives the round and the step inside it. At a round boundary the next round
starts as in an unbroken run (the data position and RNG come from the checkpoint). Inside a round its pairs
are read back from its file, and what cannot be rebuilt (the reward model; ``madpo_iter``'s frozen reference
of ``reference: current``) comes from the checkpoint, which stores it whenever it is needed.
"""
from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path

import torch

from ..config_io import ConfigError
from ..envs.base import rollout_modules
from ..preference.pairs import NodeRng, comparator_pairs, joint_returns
from ..preference.replay import replay_pool
from ..rollout import RolloutSettings, collect_rollout, join_rollout
from .. import checkpoint as ckpt
from ..compute import distributed as dist
from .dpo import (all_ranks_pairs, check_text_pairs, dpo_step, node_items, node_rngs, step_pairs, text_pairs,
                  text_pairs_to_ids)
from ..preference.pair_tokens import joint_tokens, tokenizer_fingerprint
from ..preference.parallel_fit import ParallelFit
from ..compute.placement import place_references
from ..compute.sharding import built_on_rank0, full_state_dict


def _joint_side(rollout, g: int, j: int, k: int, fingerprints: list[str] | None) -> tuple[list[str], dict | None]:
    """Every agent's text of joint action j at node g ([N]), and its tokens record (pair_tokens.py)."""
    idx = [g * k + int(rollout.tree.joints[j, i]) for i in range(len(rollout.agents))]
    texts = [a.texts[s] for a, s in zip(rollout.agents, idx)]
    return texts, joint_tokens(rollout.agents, idx, fingerprints) if fingerprints is not None else None


def comparison_pairs(policy, comparator, cfg, rng: random.Random | NodeRng, step: int, r: int,
                     fingerprints: tuple[list[str], list[str]] | None = None) -> list[dict]:
    """Text pairs of the policy's rollouts against the comparator's on the same items: at every root node,
    joint candidate j of one side meets candidate j of the other (``preference.comparator_pairs``);
    ``chosen_by`` says which side won. Returns are the trees' joint returns (later turns included).
    ``fingerprints``: (the policy's, the comparator's) tokenizers', to record each side's tokens."""
    return [p for ro, co in zip(policy, comparator)
            for _, p in _comparison_pairs(ro, co, cfg, rng, step, r, fingerprints)]


def _comparison_pairs(ro, co, cfg, rng: random.Random | NodeRng, step: int, r: int,
                      fingerprints: tuple[list[str], list[str]] | None = None) -> list[tuple[int, dict]]:
    """``(root node, pair)`` of one policy rollout against the comparator's (:func:`comparison_pairs`);
    ``rng``: one stream, or one per node (``node -> Random``) for ``pair_selection: random``."""
    pref, k = cfg.preference, cfg.num_generations
    rp = joint_returns(ro.tree.rewards, ro.tree.child, cfg.discount)
    rc = joint_returns(co.tree.rewards, co.tree.child, cfg.discount)
    out = []
    for g in [g for g in range(len(ro.tree.prompts)) if int(ro.agents[0].turns[g]) == 0]:
        for j, policy_wins, gap in comparator_pairs(rp[g].tolist(), rc[g].tolist(), pref.pair_selection,
                                                    pref.pairs_per_item, rng(g) if callable(rng) else rng):
            mine = _joint_side(ro, g, j, k, fingerprints[0] if fingerprints else None)
            theirs = _joint_side(co, g, j, k, fingerprints[1] if fingerprints else None)
            won, lost = (mine, theirs) if policy_wins else (theirs, mine)
            pair = {"step": step, "round": r, "prompts": ro.tree.prompts[g], "chosen": won[0], "rejected": lost[0],
                    "gap": gap, "chosen_by": "policy" if policy_wins else "comparator"}
            if fingerprints:
                pair["tokens"] = {"chosen": won[1], "rejected": lost[1]}
            out.append((g, pair))
    return out


def read_pairs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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


class Rounds:
    """Round state of a ``madpo_iter`` (``kind="dpo"``) or ``marlhf_iter`` (``kind="rm"``) trainer."""

    def __init__(self, trainer, kind: str):
        cfg, pref = trainer.config, trainer.config.preference
        name = cfg.algorithm
        if not cfg.output_dir:
            raise ConfigError(f"train.output_dir: {name} writes each round's pairs and checkpoints there; set it")
        if kind == "dpo" and pref.reference == "current" and not pref.reference_free and \
                any(r is not None and r.adapter_off for r in trainer.references):
            raise ConfigError("train.preference.reference: 'current' needs a frozen copy of the policy; LoRA agents' "
                              "reference is the base with the adapter off (use reference: initial)")
        if kind == "rm" and pref.reward_model is None:
            raise ConfigError("train.preference.reward_model: marlhf_iter fits a joint reward model each round; "
                              "set its model (hub id, local path or tiny), e.g. train.preference.reward_model.model=tiny")
        self.trainer, self.kind = trainer, kind
        self.out = Path(cfg.output_dir)
        self.base_env = trainer.env  # the environment's own reward picks the winners
        # pair sampling: no greedy baseline; fsdp_gather=agent: one agent gathered per generate call, as in the steps
        self.settings = RolloutSettings.from_train_config(cfg, lockstep=trainer.settings.lockstep)
        self.round: int | None = None  # the round whose pool is ready
        self.pool: list[dict] = []
        self.weights = torch.zeros(0)
        self.data: list = []  # this rank's share of the pool, as dpo_step takes it
        self.data_weights = torch.zeros(0)
        self.metrics: dict[str, float] = {}
        self.reward_model = None
        self._fixed_comparator = None

    # ----------------------------------------------------------- schedule
    @property
    def steps_per_round(self) -> int:
        return self.trainer.config.preference.steps_per_round

    def total_steps(self) -> int:
        cfg = self.trainer.config
        return cfg.max_steps or cfg.preference.rounds * self.steps_per_round

    def ends_round(self, step: int) -> bool:
        """Whether ``step`` (steps done) closes a round."""
        return step % self.steps_per_round == 0

    def begin_step(self) -> None:
        """Make the pool (and reward model) of the round the next step belongs to ready."""
        step = self.trainer.state.step
        r, offset = divmod(step, self.steps_per_round)
        if self.round == r:
            return
        if offset == 0:
            self._start_round(r)
        else:
            self._resume_inside(r)
        self.round = r

    def round_done(self, checkpoint: Path | None) -> None:
        """After the checkpoint that closes a round: record it in ``rounds.json``."""
        if dist.is_main():
            done = self.trainer.state.step // self.steps_per_round
            (self.out / "rounds.json").write_text(json.dumps({"rounds_done": done, "checkpoint": str(checkpoint)}))

    def checkpoint_extra(self) -> dict:
        """What a checkpoint must hold to resume here: the reward model (used inside the round, continued
        next round, or kept by a next round without pairs); ``madpo_iter``'s reference=current copies inside
        a round."""
        inside = not self.ends_round(self.trainer.state.step)
        out = {}
        if self.reward_model is not None and not self.reward_model.sharded:  # sharded: checkpoint_modules
            out["reward_model.pt"] = self.reward_model.model.state_dict()
        if self._saves_references(inside) and self.trainer.sharding is None:
            for i, ref in self._distinct_references():
                out[f"reference{i}.pt"] = ref.model.state_dict()
        return out

    def checkpoint_modules(self) -> dict:
        """Sharded modules a checkpoint writes with DCP (``<name>/dcp``): a sharded reward model (no optimiser:
        each fit builds its own); ``madpo_iter``'s sharded reference=current copies inside a round
        (``reference<i>``)."""
        out = {}
        rm = self.reward_model
        if rm is not None and rm.sharded:
            out["reward_model"] = (rm.model, None)
        if self._saves_references(not self.ends_round(self.trainer.state.step)) and self.trainer.sharding is not None:
            out.update({f"reference{i}": (ref.model, None) for i, ref in self._distinct_references()})
        return out

    def _saves_references(self, inside: bool) -> bool:
        pref = self.trainer.config.preference
        return self.kind == "dpo" and inside and pref.reference == "current" and not pref.reference_free

    def _distinct_references(self):
        seen = set()
        for i, ref in enumerate(self.trainer.references):
            if ref is not None and ref.model is not None and id(ref) not in seen:
                seen.add(id(ref))
                yield i, ref

    # ----------------------------------------------------------- rounds
    def _start_round(self, r: int) -> None:
        t, cfg = self.trainer, self.trainer.config
        pref = cfg.preference
        if self.kind == "dpo" and pref.reference == "current" and not pref.reference_free:
            if t.sharding is not None:  # the sharded copy made at the start takes the policy's shards
                for i, ref in self._distinct_references():
                    copy_weights_in_place(t.agents[i].model, ref.model)
            else:
                t.references = place_references(t._build_references(), cfg.reference_device, t.agents)
        if self.kind == "rm" and self.reward_model is None and self._has_reward_model():
            # resumed at a round boundary: last round's model, to continue or to keep when this round has no pair
            self.reward_model = self._load_reward_model_from_checkpoint()
            t.env = self._reward_env()
        comparator = self.comparator_agents(r)
        rollouts, others, sampled = [], [], []
        lockstep = self.settings.lockstep
        # sharded agents and comparator (unless gathered one at a time) and any module the env's own reward runs:
        # whole for the round's sampling
        whole = [] if lockstep is not None else [a.model for a in t.agents] + (
            [a.model for a in comparator] if comparator is not None and comparator is not t.agents else [])
        with t._whole(whole + rollout_modules(self.base_env)):
            for b in range(pref.round_batches):
                items = t.next_batch()
                if not items:  # this rank's share of the batch is empty (end of an epoch under torchrun)
                    if lockstep is not None:  # one agent at a time: join the other ranks' gathers
                        for team in [t.agents] + ([comparator] if comparator is not None else []):
                            join_rollout(team, self.settings)
                    continue
                sampled.append(b)
                rollouts.append(collect_rollout(t.agents, self.base_env, items, self.settings))
                if comparator is not None:
                    others.append(collect_rollout(comparator, self.base_env, items, self.settings))
        step, keys = t.state.step, [f"{cfg.seed}/round{r}/batch{b}" for b in sampled]  # pair_selection: random
        fps = [tokenizer_fingerprint(a.tokenizer) for a in t.agents]  # pairs keep their sampled tokens
        if comparator is None:
            batches = [text_pairs(ro, step_pairs([ro], cfg, key)[0], step, r, fps) for ro, key in zip(rollouts, keys)]
        else:
            sides = (fps, [tokenizer_fingerprint(a.tokenizer) for a in comparator])
            batches = [_comparison_pairs(ro, co, cfg, node_rngs(ro, key), step, r, sides)
                       for ro, co, key in zip(rollouts, others, keys)]
        # the round's file and pool hold every rank's pairs, in the order one process would make them
        # (madpo_iter: each rank then trains on its share of the pool; marlhf_iter: one reward model on all)
        pairs = all_ranks_pairs([(b, [(node_item[g], p) for g, p in batch])
                                  for b, batch, node_item in zip(sampled, batches, map(node_items, rollouts))])
        if comparator is not None and comparator is not t.agents:
            self._drop_comparator(comparator)
        folder = self.out / f"round-{r}"
        folder.mkdir(parents=True, exist_ok=True)
        if dist.is_main():
            (folder / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
        t.state.counters["completions"] += sum(ro.num_completions for ro in rollouts + others)
        t._last_examples = rollouts[0].examples if rollouts else []
        env_reward = _mean([ro.metrics.get("reward/turn0", 0.0) for ro in rollouts])
        self.metrics = {"round": r, "pref/pairs": float(len(pairs)), "pref/env_reward": env_reward}
        if self.kind == "dpo":  # the reward of the policy's round samples (marlhf_iter's steps log their own)
            self.metrics["reward/mean"] = env_reward
        if others:
            self.metrics["pref/comparator_env_reward"] = _mean([o.metrics.get("reward/turn0", 0.0) for o in others])
            self.metrics["pref/policy_wins"] = (sum(p["chosen_by"] == "policy" for p in pairs) / len(pairs)
                                                if pairs else float("nan"))
        self._build_pool(r, pairs)
        if self.kind == "rm":
            self._fit_reward_model(r)

    def _resume_inside(self, r: int) -> None:
        """Resumed inside round r: its pairs from disk, its reward model / reference from the checkpoint."""
        t, pref = self.trainer, self.trainer.config.preference
        path = self.out / f"round-{r}" / "pairs.jsonl"
        if not path.exists():
            raise ConfigError(f"train.resume: step {t.state.step} is inside round {r}, but {path} is missing")
        self.metrics = {"round": r}
        pairs = read_pairs(path)
        self.metrics["pref/pairs"] = float(len(pairs))
        self._build_pool(r, pairs)
        if self.kind == "rm" and self._has_reward_model():
            self.reward_model = self._load_reward_model_from_checkpoint()
            t.env = self._reward_env()
        if self.kind == "dpo" and pref.reference == "current" and not pref.reference_free:
            if t.sharding is None:
                t.references = t._build_references()
            for i, ref in self._distinct_references():  # sharded: into the sharded copy made at the start
                folder = Path(t._resumed_from or "") / f"reference{i}"
                if (folder / "dcp").is_dir():  # written by a sharded run (resharded to this one)
                    ckpt.load_sharded_module(folder, ref.model)
                elif t.sharding is None:
                    ref.model.load_state_dict(self._load_extra(f"reference{i}.pt"))
                else:
                    raise ConfigError(f"train.resume: resuming inside a round under sharding needs {folder}/dcp "
                                      f"(a checkpoint of a sharded run)")
            t.references = place_references(t.references, t.config.reference_device, t.agents)

    def _build_pool(self, r: int, pairs: list[dict]) -> None:
        pref = self.trainer.config.preference
        pool, weights = replay_pool(r, lambda past: pairs if past == r else read_pairs(
            self.out / f"round-{past}" / "pairs.jsonl"), pref, self.trainer.config.seed)
        self.pool, self.weights = pool, torch.tensor(weights, dtype=torch.float32)
        # madpo_iter: each rank trains on its share of the pool (data parallel; the loss is normalised globally)
        mine = dist.shard(list(range(len(pool))))
        self.data = text_pairs_to_ids(self.trainer.agents, [pool[k] for k in mine]) \
            if pool and self.kind == "dpo" else []
        self.data_weights = self.weights[mine]
        self.metrics["pref/pool"] = float(len(pool))

    # ----------------------------------------------------------- steps
    def dpo_step(self) -> dict[str, float]:
        """One ``madpo_iter`` step: DPO on the round's whole pool (nothing when it is empty)."""
        out = dpo_step(self.trainer, self.data, self.data_weights) if self.pool else {}
        out.update(self.metrics)
        return out

    def skips_step(self) -> bool:
        """``marlhf_iter`` before any pair: there is no reward model to train on, the step is skipped."""
        return self.kind == "rm" and self.reward_model is None

    # ----------------------------------------------------------- reward model
    def _fit_reward_model(self, r: int) -> None:
        from ..critics.joint_input import resolve_joint_input
        from ..preference.marlhf import load_classifier
        from ..preference.reward_model import JointRewardModel

        t, pref = self.trainer, self.trainer.config.preference
        s = pref.reward_model
        if not self.pool:  # nothing to learn from: last round's model stays (none yet: the steps are skipped)
            self.metrics["rm/refit"] = 0.0
            return
        with torch.random.fork_rng(devices=[]):  # the policy's sampling stream is not touched
            torch.manual_seed(t.config.seed * 1009 + r)
            if self.reward_model is None or pref.reward_model_refit == "fresh":
                model, tok = load_classifier(s.model, s.device)
                self.reward_model = self._data_parallel(JointRewardModel(
                    model, tok, resolve_joint_input(s.joint_input), s.freeze_backbone, s.max_length))
            cut = len(self.pool) - int(round(len(self.pool) * s.held_out))
            train, held = self.pool[:cut], self.pool[cut:]
            if train:
                self.reward_model.fit(train, s.epochs, s.batch_size, s.lr, t.config.seed + r,
                                      weights=self.weights[:cut].tolist())
            acc = self.reward_model.accuracy(held) if held else float("nan")
        report = {"rm/accuracy": acc, "rm/train_pairs": float(len(train)), "rm/held_out_pairs": float(len(held))}
        self.metrics.update({**report, "rm/refit": 1.0})
        if dist.is_main():
            (self.out / f"round-{r}" / "reward_model.json").write_text(json.dumps(report, indent=2))
        t.env = self._reward_env()

    def _reward_env(self):
        from ..preference.reward_model import RewardModelEnv

        return RewardModelEnv(self.base_env, self.reward_model)

    def _data_parallel(self, rm):
        """Under torchrun: ``rm`` trains over all ranks, sharded on the trainer's mesh when the agents are."""
        return rm.data_parallel(ParallelFit(self.trainer.sharding)) if dist.is_distributed() else rm

    def _load_reward_model_from_checkpoint(self):
        """The checkpoint's reward model: ``reward_model.pt`` (an unsharded run's, loaded before sharding) or
        ``reward_model/dcp`` (a sharded run's, resharded onto this run's ranks or loaded whole)."""
        from ..critics.joint_input import resolve_joint_input
        from ..preference.marlhf import load_classifier
        from ..preference.reward_model import JointRewardModel

        s, where = self.trainer.config.preference.reward_model, Path(self.trainer._resumed_from)
        with torch.random.fork_rng(devices=[]):
            model, tok = load_classifier(s.model, s.device)
        if (where / "reward_model.pt").exists():
            model.load_state_dict(self._load_extra("reward_model.pt"))
        rm = self._data_parallel(JointRewardModel(model, tok, resolve_joint_input(s.joint_input),
                                                  s.freeze_backbone, s.max_length))
        if (where / "reward_model" / "dcp").is_dir():
            ckpt.load_sharded_module(where / "reward_model", rm.model)
        rm.model.eval()
        return rm

    def _has_reward_model(self) -> bool:
        """Whether the checkpoint resumed from holds a reward model (either form)."""
        where = self.trainer._resumed_from
        return where is not None and ((Path(where) / "reward_model.pt").exists()
                                      or (Path(where) / "reward_model" / "dcp").is_dir())

    def _load_extra(self, name: str):
        where = self.trainer._resumed_from
        if where is None:
            raise ConfigError(f"train.resume: resuming inside a round needs the checkpoint's {name}")
        return ckpt.load_extra(where, name)

    # ----------------------------------------------------------- comparators
    def comparator_agents(self, r: int):
        """Who writes the other side of round r's pairs (None: the policy's own candidates are paired)."""
        t, pref = self.trainer, self.trainer.config.preference
        kind = pref.comparator
        if kind == "none":
            return None
        if kind == "current":  # sampled before the round's first update: the frozen copy is the policy itself
            return t.agents
        configs = [a.config for a in t.agents]
        if kind == "model":
            if self._fixed_comparator is None:
                from ..agents import build_agents

                plain = [dataclasses.replace(c, model=pref.comparator_model, tokenizer=None, lora=None,
                                             share_weights_with=None, gguf_file=None, model_kwargs={})
                         for c in configs]
                with torch.random.fork_rng(devices=[]):
                    built = self._build(build_agents, plain)
                for m in {id(a.model): a.model for a in built}.values() if t.sharding is None else []:
                    dist.broadcast_parameters(m)  # as the agents' (sharded: Sharding.add sends rank 0's)
                self._fixed_comparator = self._shard(built)
            return self._fixed_comparator
        if pref.comparator_path:  # a fixed checkpoint
            if self._fixed_comparator is None:
                self._fixed_comparator = self._shard(self._load_folder(Path(pref.comparator_path),
                                                                       "train.preference.comparator_path"))
            return self._fixed_comparator
        # the policy of comparator_rounds_back rounds earlier: snapshots taken at each round's start
        k = pref.comparator_rounds_back
        snap = self.out / f"round-{r}" / "policy"
        full = [full_state_dict(a.model, keep=dist.is_main()) if t.sharding is not None else None
                for a in t.agents]  # sharded: gathered onto rank 0 (collective)
        if dist.is_main():
            for i, agent in enumerate(t.agents):
                ckpt.save_agent_weights(agent, snap / f"agent{i}", state_dict=full[i])
            for old in range(0, r - k + 1):  # never needed again (round r+1 compares with r+1-k)
                if old != max(0, r - k):
                    shutil.rmtree(self.out / f"round-{old}" / "policy", ignore_errors=True)
        if dist.is_distributed():  # the other ranks load rank 0's snapshot
            torch.distributed.barrier()
        return self._shard(self._load_folder(self.out / f"round-{max(0, r - k)}" / "policy",
                                             "train.preference.comparator"))

    def _build(self, build, configs: list) -> list:
        """A comparator built as the agents are: under sharding rank 0 reads it and the others build it on
        meta (``sharding.built_on_rank0``; ``_shard`` then sends rank 0's weights)."""
        return built_on_rank0(build, configs) if self.trainer.sharding is not None else build(configs, meta=False)

    def _shard(self, agents):
        """Under ``sharding: fsdp`` a comparator's models are sharded like the agents (gathered for the round's
        sampling only), so a fixed comparator does not stay whole on every rank for the whole run."""
        sharding = self.trainer.sharding
        if sharding is not None:
            for m in {id(a.model): a.model for a in agents}.values():
                sharding.add(m, "the comparator")
        return agents

    def _load_folder(self, folder: Path, key: str):
        """The comparator of a checkpoint folder (built as :meth:`_build` says)."""
        with torch.random.fork_rng(devices=[]):
            try:
                return self._build(lambda cs, meta: ckpt.agents_from_folder(cs, folder, key, meta=meta),
                                   [a.config for a in self.trainer.agents])
            except FileNotFoundError as e:
                raise ConfigError(str(e)) from None

    def _drop_comparator(self, agents) -> None:
        if agents is self._fixed_comparator:
            return
        del agents
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def offline_pairs(pref) -> list[dict]:
    """The pairs of ``train.preference.pairs_in`` for ``madpo_offline``, read once when the trainer is built
    (their count sets the steps per epoch, the schedule and the resume position)."""
    if not pref.pairs_in:
        raise ConfigError("train.preference.pairs_in: madpo_offline trains on a pairs JSONL file; name it")
    path = Path(pref.pairs_in)
    if not path.exists():
        raise ConfigError(f"train.preference.pairs_in: {path} does not exist")
    pairs = read_pairs(path)
    if not pairs:
        raise ConfigError(f"train.preference.pairs_in: {path} holds no pairs")
    return pairs


def offline_step(trainer) -> dict[str, float]:
    """One ``madpo_offline`` step of the training loop: DPO on the next global batch of
    ``train.preference.pairs_in`` (JSONL, the format ``pairs_out`` and the rounds write), reshuffled each epoch;
    no sampling. Under torchrun each rank takes its share of the global batch (``batch_size`` x ranks).

    The data position is the trainer's (epoch, batch in epoch) over the pairs, as for prompts, so a
    resume on another number of ranks continues after the pairs already trained on."""
    cfg, st, pairs = trainer.config, trainer.state, trainer.offline_pairs
    if st.batch_in_epoch >= trainer.steps_per_epoch:
        st.epoch, st.batch_in_epoch = st.epoch + 1, 0
    g = torch.Generator().manual_seed(cfg.seed * 100_003 + st.epoch)
    order = torch.randperm(len(pairs), generator=g).tolist() if cfg.shuffle else list(range(len(pairs)))
    b, global_batch = st.batch_in_epoch, trainer.global_batch
    batch = [pairs[i] for i in order[b * global_batch:(b + 1) * global_batch]]
    st.batch_in_epoch += 1
    mine = dist.shard(batch)
    try:
        check_text_pairs(batch, len(trainer.agents))  # every rank checks the whole batch: all fail together
        data = text_pairs_to_ids(trainer.agents, mine)
    except ValueError as e:
        raise ConfigError(f"train.preference.pairs_in ({cfg.preference.pairs_in}): {e}") from e
    metrics = dpo_step(trainer, data, torch.ones(len(mine)))
    metrics["pref/pairs"] = float(len(batch))
    return metrics


__all__ = ["Rounds", "comparison_pairs", "offline_pairs", "offline_step", "read_pairs"]
