"""MARLHF's joint reward model: a one-label sequence classifier over every agent's prompt and response.

The model reads one text per joint response, written by a replaceable joint-input
function (default ``critics.joint_input.role_marker_template``), and its logit is
the score. It is trained with the Bradley-Terry loss on preference pairs
(``losses.bradley_terry_loss``) and reports pairwise accuracy (the fraction of
pairs whose chosen response scores higher). :class:`RewardModelEnv` then puts its
score in place of an environment's reward, so any on-policy algorithm of the
library (MAGRPO, MARLOO, MAReMax, IAC, MAAC) trains on it; the environment's own
reward is still logged as ``env/env_reward``.

A pair is a dict ``{"prompts": [N], "chosen": [N], "rejected": [N]}`` (the
format ``train.preference.pairs.pairs_out`` writes).

Under torchrun, :meth:`JointRewardModel.data_parallel` makes ``fit`` and
``accuracy`` collectives: every rank holds the same pairs and takes its share
of each batch (pairs r, r+W, ...), the loss is normalised by the whole batch's
weight and the gradients are summed over ranks, so W ranks train the model a
single process would. The ranks are the business of the component passed in
(``preference/parallel_fit.py``: this module sits below the training loop). With
``train.hardware.sharding: fsdp`` the model is sharded first (FSDP2, per decoder block
and at the root, on the agents' mesh); a rank with no pair in a batch then runs
a zero-loss forward/backward to join the collectives, and a sharded model
scores (``accuracy``, :class:`RewardModelEnv`) only whole, which the trainer
arranges for the rollout through the environment's
:meth:`RewardModelEnv.rollout_modules`.
"""
from __future__ import annotations

import contextlib
import json
import random
import warnings
import zlib
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import torch

from ..compute.stepping import MicroLoss, micro_batched_backward, optimizer_step
from ..critics.joint_input import role_marker_template
from ..envs.base import AgentRewards, EnvState, Environment, Transition, rollout_modules
from ..objective.losses import bradley_terry_loss

if TYPE_CHECKING:
    from .parallel_fit import ParallelFit


class JointRewardModel:
    """Scores of joint responses from a sequence classifier with ``num_labels=1``.

    Args:
        model: a ``*ForSequenceClassification`` model with one label (its ``config.pad_token_id`` set).
        tokenizer: its tokenizer.
        joint_input: ``(prompts [N], responses [N]) -> text``.
        freeze_backbone: train only the classification head (``model.score``), not the backbone.
        max_length: keep the last ``max_length`` tokens of each text (0 = all).
    """

    def __init__(self, model, tokenizer, joint_input: Callable = role_marker_template, freeze_backbone: bool = False,
                 max_length: int = 0):
        if getattr(model.config, "num_labels", None) != 1:
            raise ValueError(f"reward model: a sequence classifier with num_labels=1 is needed, "
                             f"got num_labels={getattr(model.config, 'num_labels', None)}")
        self.model, self.tokenizer, self.joint_input = model, tokenizer, joint_input
        self.max_length = max_length
        self.parallel: ParallelFit | None = None  # the ranks' collectives once data_parallel
        self.nonfinite_skips = 0  # fit's batches skipped for a non-finite loss or gradient
        head = getattr(model, "score", None) or getattr(model, "classifier", None)
        if freeze_backbone:
            if head is None:
                raise ValueError("reward model: freeze_backbone needs the head as model.score or model.classifier")
            model.requires_grad_(False)
            head.requires_grad_(True)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def data_parallel(self, parallel) -> "JointRewardModel":
        """Train and measure over all ranks from now on, through ``parallel``
        (``comarl.preference.parallel_fit.ParallelFit``: it copies rank 0's weights to every rank and, with the
        run's sharding, shards the model). Every rank calls this, and later ``fit``/``accuracy`` with the same
        pairs. Build no optimiser before: FSDP swaps the parameters (``fit`` builds its own)."""
        parallel.prepare(self.model)
        self.parallel = parallel
        return self

    @property
    def sharded(self) -> bool:
        """Whether the model is sharded over the ranks (FSDP2): it scores only when gathered."""
        return self.parallel is not None and self.parallel.sharding is not None

    def scores(self, prompts: Sequence[Sequence[str]], responses: Sequence[Sequence[str]]) -> torch.Tensor:
        """[B] scores of B joint responses (gradient flows when enabled), float32 on the model's device."""
        texts = [self.joint_input(list(p), list(r)) for p, r in zip(prompts, responses)]
        ids = [x[-self.max_length:] if self.max_length else x for x in self.tokenizer(texts)["input_ids"]]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        width = max(len(x) for x in ids)
        inp = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros_like(inp)
        for s, x in enumerate(ids):  # left padding: the last real token is the last position
            inp[s, width - len(x):] = torch.tensor(x, dtype=torch.long)
            mask[s, width - len(x):] = 1
        dev = next(self.model.parameters()).device
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        out = self.model(input_ids=inp.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev))
        return out.logits[:, -1].float()

    def pair_loss(self, pairs: Sequence[Mapping], weights: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(Bradley-Terry loss, weighted by ``weights`` [P] when given; [P] margins s_w - s_l) of a batch of pairs."""
        prompts = [p["prompts"] for p in pairs]
        s = self.scores(prompts + prompts, [p["chosen"] for p in pairs] + [p["rejected"] for p in pairs])
        sw, sl = s[:len(pairs)], s[len(pairs):]
        return bradley_terry_loss(sw, sl, weights), (sw - sl).detach()

    def share_loss(self, pairs: Sequence[Mapping], batch: list[int], mine: list[int],
                   weights: torch.Tensor | None = None) -> torch.Tensor:
        """One rank's part of the Bradley-Terry loss of the pairs ``batch`` (indices into ``pairs``), from its
        share ``mine`` (a non-empty subset): ``L(mine) * w(mine) / w(batch)`` with L the weighted mean
        (``weights`` [P], None = 1 each), so the parts of disjoint shares sum to ``L(batch)``."""
        loss, _ = self.pair_loss([pairs[i] for i in mine], weights[mine] if weights is not None else None)
        if weights is None:
            return loss * (len(mine) / len(batch))
        return loss * (weights[mine].sum() / weights[batch].sum())

    @torch.no_grad()
    def accuracy(self, pairs: Sequence[Mapping], batch_size: int = 16) -> float:
        """Fraction of ``pairs`` whose chosen joint response scores strictly higher (data parallel: each rank
        scores its share, the counts are summed)."""
        par = self.parallel
        if par is not None:
            _check_same_pairs(par, pairs, "accuracy")
        mine = par.share(list(pairs)) if par is not None else pairs
        was = self.model.training
        self.model.eval()
        try:
            # sharded: whole, so ranks may score different numbers of batches
            with par.whole(self.model) if par is not None else contextlib.nullcontext():
                right: float = sum(int((self.pair_loss(mine[a:a + batch_size])[1] > 0).sum())
                            for a in range(0, len(mine), batch_size))
        finally:
            self.model.train(was)
        if par is not None:
            right = par.total(right)
        return right / max(len(pairs), 1)

    def fit(self, pairs: Sequence[Mapping], epochs: int = 1, batch_size: int = 8, lr: float = 1e-4,
            seed: int = 0, weights: Sequence[float] | None = None, max_grad_norm: float = 0.0) -> list[float]:
        """Train on ``pairs`` (AdamW, shuffled each epoch; ``weights`` [P]: each pair's weight in the
        Bradley-Terry loss, e.g. replay decay) -> the loss of every batch that stepped.

        Each batch is one backward (``compute.stepping.micro_batched_backward``) and one optimiser step
        (``compute.stepping.optimizer_step``) as the agents' and critics' are: gradients clipped at
        ``max_grad_norm`` (0: not clipped), and a batch with a non-finite loss or gradient skipped on every rank,
        counted in ``nonfinite_skips`` with one warning line.

        Data parallel (:meth:`data_parallel`): rank r computes the loss of pairs r, r+W, ... of each batch
        normalised by the whole batch's weight, ``bradley_terry_loss(mine) * w(mine) / w(batch)``, and the
        gradients are summed over ranks (FSDP's reduce-scatter, else an all-reduce): the single-process
        gradient of the batch. Every rank runs one forward/backward per batch (a zero-loss one without a pair).
        """
        if not pairs:
            raise ValueError("reward model: no preference pairs to train on")
        par = self.parallel
        if par is not None:
            _check_same_pairs(par, pairs, "fit")
        opt = torch.optim.AdamW(self.parameters(), lr=lr)
        rng, order, losses = random.Random(seed), list(range(len(pairs))), []
        w = torch.tensor(list(weights), dtype=torch.float32) if weights is not None else torch.ones(len(pairs))
        self.model.train()
        params = self.parameters()

        def skipped() -> None:
            self.nonfinite_skips += 1
            warnings.warn(f"reward model: non-finite loss or gradient in a batch; step skipped (skips so far: "
                          f"{self.nonfinite_skips})", RuntimeWarning, stacklevel=4)

        for _ in range(epochs):
            rng.shuffle(order)
            for a in range(0, len(order), batch_size):
                idx = order[a:a + batch_size]
                mine = par.share(idx) if par is not None else idx
                opt.zero_grad(set_to_none=True)
                def batch_loss(m: int, idx=idx, mine=mine) -> MicroLoss:
                    return MicroLoss(self.share_loss(pairs, idx, mine, w if weights is not None else None))

                def idle() -> None:  # no pair on this rank: a sharded model still joins the batch's collectives
                    if par is not None:
                        par.idle(self.model)

                done = micro_batched_backward(1 if mine else 0, batch_loss, idle=idle,
                                              lockstep=(lambda n: 1) if par is not None else None)
                stepped = optimizer_step(
                    params, opt, bad=not done.finite, max_grad_norm=max_grad_norm,
                    reduce_grads=(lambda: par.after_backward(self.model)) if par is not None else None,
                    on_skip=skipped, all_reduce_sum=par.total if par is not None else _identity)
                if stepped is not None:
                    losses.append(par.total(done.total) if par is not None else done.total)
        self.model.eval()
        return losses


def _identity(x):
    return x


class RewardModelEnv:
    """``env`` with the reward model's score as the team reward; the env's own reward logged as ``env_reward``.

    Prompts, turns and episode ends stay the environment's; so does everything else callers read from it
    (``summarize`` and ``render_table`` for ``evaluate()``, its team graph ``stages``, ``sample_view``).
    """

    def __init__(self, env: Environment, reward_model: JointRewardModel):
        self.env, self.reward_model = env, reward_model
        self.num_agents = env.num_agents
        self.max_turns = getattr(env, "max_turns", 1)

    def __getattr__(self, name: str):
        if name in ("env", "reward_model") or name.startswith("__"):  # (not set yet: copy, pickle)
            raise AttributeError(name)
        return getattr(self.env, name)

    def rollout_modules(self) -> list[torch.nn.Module]:
        """The reward model (and the wrapped env's modules): a sharded trainer gathers them for the rollout."""
        return [self.reward_model.model] + rollout_modules(self.env)

    def reset(self, item) -> EnvState:
        return self.env.reset(item)

    def close(self) -> None:
        getattr(self.env, "close", lambda: None)()

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        trs = self.env.step_batch(states, responses)
        if self.reward_model.sharded and _is_sharded(self.reward_model.model):
            raise RuntimeError("the reward model is sharded (train.hardware.sharding=fsdp): score with it inside "
                               "Sharding.gathered() (the trainer gathers the env's rollout_modules())")
        with torch.no_grad():
            scores = self.reward_model.scores([s.prompts for s in states], responses).cpu().tolist()
        out = []
        for tr, score in zip(trs, scores):
            own = sum(tr.reward.values) / len(tr.reward.values) if isinstance(tr.reward, AgentRewards) else tr.reward
            out.append(Transition(float(score), tr.done, tr.next_state, {**tr.metrics, "env_reward": float(own)}))
        return out


def _is_sharded(model) -> bool:
    """Whether the parameters are FSDP shards (DTensors) right now, i.e. the model is not gathered."""
    from torch.distributed.tensor import DTensor

    return isinstance(next(model.parameters()), DTensor)


def _check_same_pairs(parallel, pairs: Sequence[Mapping], what: str) -> None:
    """Data parallel ``fit``/``accuracy`` split one list of pairs: refuse ranks that hold different ones."""
    crc = zlib.crc32(json.dumps([[p["prompts"], p["chosen"], p["rejected"]] for p in pairs]).encode())
    if not parallel.same_everywhere(crc):
        raise ValueError(f"reward model {what}: the ranks hold different preference pairs; data parallel "
                         f"training needs the same pairs on every rank (each takes its share)")
