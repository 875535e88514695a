"""The joint DPO update: preference pairs of joint actions -> one optimizer step per agent (MADPO family).

The joint loss couples the agents only through a sum of their log-ratios, so
its gradient for agent i is ``sum_s c_s * grad log pi_i(y_s)`` with one scalar
``c_s = d loss / d log pi_i(y_s)`` per sample, taken at the current weights.
We compute every agent's sequence log-probs once without gradients, get the
``c_s`` from autograd on that small [P, N] problem, then backpropagate the
linear surrogate ``sum_s c_s * log pi_i(y_s)`` over micro-batches: exactly the
joint loss's gradient, whatever the micro-batch size, with one extra no-grad
forward per agent.

Two updates share it: ``OnlineDPO`` (``madpo``: the step's own rollout gives the pairs) and ``PairDPO``
(``madpo_iter``, ``madpo_offline``: the source hands over a ``PairBatch``, a round's pool or a pairs file).

Structured generation: tokens a schema forced (``AgentPairs.forced``) are left
out of the sequence log-probs, of the policy and of the reference alike.

FSDP sharding (``train.hardware.sharding: fsdp``): the reference and no-grad policy
log-probs (a count that differs per rank) run with the models gathered whole;
the backward (``compute.stepping.micro_batched_backward``) runs the same number
of micro-batches on every rank (an idle backward for a rank out of samples),
each copy of a prompt encoded (no ``share_prefix``), and a non-finite surrogate
still backpropagates so that every rank joins FSDP's collectives before all of
them skip the step.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from ..compute import distributed as dist
from ..compute.dropout import dropout_disabled
from ..compute.precision import autocast
from ..compute.sharding import idle_backward, lockstep_count
from ..compute.stepping import MicroLoss, micro_batched_backward
from ..core.steps import AgentPairs, PairBatch, PromptBatch, StepOutput
from ..core.types import joined_samples
from ..objective.logprobs import completion_logprobs, forced_mask
from ..objective.losses import joint_dpo_loss, reference_free_dpo_loss
from ..preference.pair_tokens import tokenizer_fingerprint
from ..preference.rollout_pairs import step_pairs, write_pairs
from .rollout_step import roll_out, rollout_step_metrics, step_times

if TYPE_CHECKING:
    from ..core.seams import TeamView


def _sampled(mask: torch.Tensor, forced, idx: list[int]) -> torch.Tensor:
    """``mask`` [B, T] without the forced tokens of samples ``idx`` (``forced`` None: unchanged)."""
    if forced is None:
        return mask
    return mask * (1 - forced_mask([forced[s] for s in idx], mask.shape[1])).to(mask)


def _sequence_logprobs(fn, prompts, comps, needed: list[int], micro: int, forced=None) -> torch.Tensor:
    """Summed completion log-probs of samples ``needed`` (sampled tokens only) -> [len(needed)] (float32, CPU)."""
    out = []
    for a in range(0, len(needed), micro):
        idx = needed[a:a + micro]
        logp, mask = fn([prompts[s] for s in idx], [comps[s] for s in idx])
        out.append((logp * _sampled(mask, forced, idx)).sum(1).float().cpu())
    return torch.cat(out) if out else torch.zeros(0)


def _at(seq: torch.Tensor, positions: list[int]) -> torch.Tensor:
    """``seq[positions]`` with 0 where a position is -1 (an agent that does not act at the pair's node)."""
    if -1 not in positions:
        return seq[positions]
    idx = torch.tensor(positions, dtype=torch.long)
    return torch.where(idx >= 0, seq[idx.clamp(min=0)] if len(seq) else torch.zeros(len(idx)), torch.zeros(()))


def dpo_step(team: "TeamView", dpo, loss, hardware, batch: PairBatch, step: int,
             loss_fn=joint_dpo_loss) -> dict[str, float]:
    """``loss.num_iterations`` optimizer steps per agent on the weighted joint DPO loss
    ``sum_p w_p * loss_p / sum(w)`` (sums over every rank). Collective: every rank calls it, with its own
    share of the pairs (possibly none). ``dpo``: ``train.preference.dpo`` (beta, reference-free);
    ``loss``: ``train.loss`` (iterations, dropout); ``hardware``: ``train.hardware`` (micro-batches, precision,
    shared prefixes). ``loss_fn``: ``losses.joint_dpo_loss`` (the reference-free form is
    ``train.preference.dpo.reference_free``'s)."""
    agents = team.agents
    n_pairs = batch.num_pairs
    w_total = dist.all_reduce_sum(float(batch.weights.sum()))
    out: dict[str, float] = {}
    if w_total == 0:  # every node's joint actions tied: nothing to prefer
        return out
    sel = []  # per agent: the samples needed, position of each pair's chosen / rejected sample among them
    for d in batch.agents:  # sample -1: the agent does not act at the pair's node (a team graph): no log-ratio
        needed = sorted((set(d.chosen) | set(d.rejected)) - {-1})
        pos = {s: k for k, s in enumerate(needed)}
        pos[-1] = -1
        sel.append((d, needed, [pos[s] for s in d.chosen], [pos[s] for s in d.rejected]))
    sharded = team.sharding is not None
    mb = hardware.micro_batch_size
    ref_seq = []
    for i, (d, needed, _, _) in enumerate(sel):
        ref = team.references[i]
        if dpo.reference_free or ref is None:
            ref_seq.append(torch.zeros(len(needed)))
        else:  # a frozen copy, or (LoRA) the agent's own base with the adapter off
            whole = [ref.model] if getattr(ref, "model", None) is not None else [agents[i].model]
            with team.gathered(whole), autocast(hardware.mixed_precision, agents[i].device):
                ref_seq.append(_sequence_logprobs(ref.logprobs, d.prompts, d.completions, needed, mb, d.forced))
    for it in range(loss.num_iterations):
        pol_seq = []
        for i, (d, needed, _, _) in enumerate(sel):
            agent = agents[i]
            agent.model.train()
            def fn(p, c, a=agent):
                return completion_logprobs(a.model, p, c, a.tokenizer.pad_token_id, a.config.temperature,
                                           hardware.share_prefix)

            with torch.no_grad(), team.gathered([agent.model]), autocast(hardware.mixed_precision, agent.device), \
                    dropout_disabled(agent.model, loss.disable_dropout):  # the same policy the backward pass sees
                pol_seq.append(_sequence_logprobs(fn, d.prompts, d.completions, needed, mb, d.forced))
        # the [P, N] problem: d loss / d (each agent's sequence log-prob), loss = sum over pairs / global pairs
        leaves = [s.clone().requires_grad_(True) for s in pol_seq]
        pc = torch.stack([_at(leaves[i], s[2]) for i, s in enumerate(sel)], dim=1)
        pr = torch.stack([_at(leaves[i], s[3]) for i, s in enumerate(sel)], dim=1)
        if dpo.reference_free:
            losses, z = reference_free_dpo_loss(pc, pr, dpo.beta)
        else:
            rc = torch.stack([_at(ref_seq[i], s[2]) for i, s in enumerate(sel)], dim=1)
            rr = torch.stack([_at(ref_seq[i], s[3]) for i, s in enumerate(sel)], dim=1)
            losses, z = loss_fn(pc, pr, rc, rr, dpo.beta)
        joint = (losses * batch.weights.to(losses.dtype)).sum() / w_total
        coefs = torch.autograd.grad(joint, leaves, allow_unused=True) if n_pairs else [None] * len(leaves)
        if it == 0:  # over every rank's pairs
            n_all = dist.all_reduce_sum(n_pairs)
            z = z.detach()
            out.update({"pref/loss": dist.all_reduce_sum(float(joint.detach())),
                        "pref/margin": dist.all_reduce_sum(float(z.sum())) / dpo.beta / max(n_all, 1),
                        "pref/accuracy": dist.all_reduce_sum(float((z > 0).sum())) / max(n_all, 1)})
        for i, (d, needed, _, _) in enumerate(sel):
            agent = agents[i]
            given = coefs[i]
            coef = given if given is not None else torch.zeros(len(needed))
            pad = agent.tokenizer.pad_token_id
            # sharded: every rank runs as many forwards/backwards (FSDP collectives), each copy of a prompt encoded
            share = hardware.share_prefix and not sharded

            def surrogate(m: int, agent=agent, d=d, needed=needed, coef=coef, pad=pad, share=share) -> MicroLoss:
                idx = needed[m * mb:(m + 1) * mb]
                with autocast(hardware.mixed_precision, agent.device), \
                        dropout_disabled(agent.model, loss.disable_dropout):
                    logp, mask = completion_logprobs(agent.model, [d.prompts[s] for s in idx],
                                                     [d.completions[s] for s in idx], pad,
                                                     agent.config.temperature, share)
                mask = _sampled(mask, d.forced, idx)
                c = coef[m * mb:m * mb + len(idx)].to(logp.device, logp.dtype)
                return MicroLoss((c * (logp * mask).sum(1)).sum())

            def idle(model=agent.model, pad=pad) -> None:
                idle_backward(model, pad)

            done = micro_batched_backward(-(-len(needed) // mb), surrogate, idle=idle,
                                          lockstep=lockstep_count if sharded else None,
                                          scaler=team.scalers.get(id(agent.model)))
            grad_norm = team.optimizer_step(i, not done.finite, step)
            if grad_norm is not None:
                out[f"{agent.name}/grad_norm"] = grad_norm
            out[f"{agent.name}/lr"] = team.lr(i)
    return out


class PairDPO:
    """DPO on the pairs the source hands over (``madpo_iter``: a round's pool; ``madpo_offline``: a pairs file).

    ``dpo``, ``loss``, ``hardware``: the sections ``dpo_step`` reads; ``joint_loss``: the joint DPO loss
    (``losses.joint_dpo_loss``)."""

    def __init__(self, dpo, loss, hardware, joint_loss=joint_dpo_loss):
        self.dpo, self.loss, self.hardware, self.joint_loss = dpo, loss, hardware, joint_loss

    def step(self, team: "TeamView", batch: PairBatch, step: int) -> StepOutput:
        return StepOutput(dpo_step(team, self.dpo, self.loss, self.hardware, batch, step, self.joint_loss),
                          examples=batch.examples)

    def checkpoint_parts(self, team: "TeamView", step: int) -> tuple[dict, dict]:
        return {}, {}

    def restore(self, path, team: "TeamView") -> None:
        pass


def _pair_indices(rollouts, chunk_pairs, i: int) -> tuple[list[int], list[int]]:
    """Agent i's chosen and rejected sample indices in the step's concatenated samples ([P] each)."""
    chosen, rejected, offset = [], [], 0
    for r, pairs in zip(rollouts, chunk_pairs):
        chosen += [offset + p.chosen_samples[i] if p.chosen_samples[i] >= 0 else -1 for p in pairs]
        rejected += [offset + p.rejected_samples[i] if p.rejected_samples[i] >= 0 else -1 for p in pairs]
        offset += r.agents[i].num_samples
    return chosen, rejected


class OnlineDPO:
    """MADPO online: the step's rollout (no critic) gives every tree node's (chosen, rejected) joint pairs
    (``train.preference.pairs.pair_selection``), appended to ``pairs_out`` when set, then ``dpo_step``.

    Args:
        preference: ``train.preference`` (pairs, DPO); rollout: ``train.rollout`` (K, discount);
        loss, hardware: what ``dpo_step`` reads; accumulation_steps: ``train.run.gradient_accumulation_steps``;
        seed: ``train.run.seed`` (the streams of ``pair_selection: random``); settings: the ``RolloutSettings``;
        joint_loss: the joint DPO loss (``losses.joint_dpo_loss``).
    """

    def __init__(self, preference, rollout, loss, hardware, accumulation_steps: int, seed: int, settings,
                 joint_loss=joint_dpo_loss):
        self.preference, self.rollout, self.loss, self.hardware = preference, rollout, loss, hardware
        self.accumulation_steps, self.seed, self.settings, self.joint_loss = accumulation_steps, seed, settings, \
            joint_loss

    def step(self, team: "TeamView", batch: PromptBatch, step: int) -> StepOutput:
        t0 = time.perf_counter()
        if batch.rolled is not None:  # sampled ahead by the generation worker (train.rollout.max_staleness)
            rollouts, t_roll = batch.rolled.rollouts, 0.0
        else:
            rollouts, _, t_roll = roll_out(team, batch.env, batch.items, self.settings, self.accumulation_steps)
        metrics, counts = rollout_step_metrics(rollouts, {})
        team.count("completions", sum(r.num_completions for r in rollouts))
        metrics.update(self.learn(team, rollouts, step))
        trained = sum(len(c) for r in rollouts for s in r.agents for c in s.completion_ids)
        dt = time.perf_counter() - t0
        metrics.update(step_times(dt, t_roll, batch))
        metrics["tokens_per_s"] = trained / max(metrics["time/step_s"], 1e-9)
        return StepOutput(metrics, float(len(batch.items)), counts, rollouts[0].examples if rollouts else [],
                          rollouts=rollouts)

    def learn(self, team: "TeamView", rollouts, step: int) -> dict[str, float]:
        """The pairs of ``rollouts`` (every tree node's), then ``dpo_step`` on them."""
        pairs_cfg = self.preference.pairs
        chunk_pairs = step_pairs(rollouts, self.rollout, pairs_cfg, f"{self.seed}/step{step}")
        n_pairs = sum(len(p) for p in chunk_pairs)
        out = {"pref/pairs": float(n_pairs),
               "pref/gap": sum(p.gap for ps in chunk_pairs for p in ps) / max(n_pairs, 1)}
        if pairs_cfg.pairs_out:  # every rank's pairs (collective)
            write_pairs(pairs_cfg.pairs_out, step, rollouts, chunk_pairs,
                        [tokenizer_fingerprint(a.tokenizer) for a in team.agents])
        agents = []
        for i in range(len(team.agents)):
            chosen, rejected = _pair_indices(rollouts, chunk_pairs, i)
            prompts, comps, forced = joined_samples([r.agents[i] for r in rollouts])
            agents.append(AgentPairs(prompts, comps, chosen, rejected, forced))
        out.update(dpo_step(team, self.preference.dpo, self.loss, self.hardware, PairBatch(agents, torch.ones(n_pairs)),
                            step, self.joint_loss))
        return out

    def checkpoint_parts(self, team: "TeamView", step: int) -> tuple[dict, dict]:
        return {}, {}

    def restore(self, path, team: "TeamView") -> None:
        pass


__all__ = ["OnlineDPO", "PairDPO", "dpo_step"]
