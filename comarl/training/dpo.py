"""The MADPO update: preference pairs of the step's rollout -> one optimizer step per agent.

The joint loss couples the agents only through a sum of their log-ratios, so
its gradient for agent i is ``sum_s c_s * grad log pi_i(y_s)`` with one scalar
``c_s = d loss / d log pi_i(y_s)`` per sample, taken at the current weights.
We compute every agent's sequence log-probs once without gradients, get the
``c_s`` from autograd on that small [P, N] problem, then backpropagate the
linear surrogate ``sum_s c_s * log pi_i(y_s)`` over micro-batches: exactly the
joint loss's gradient, whatever the micro-batch size, with one extra no-grad
forward per agent.

Structured generation: tokens a schema forced (``AgentSamples.forced``) are left
out of the sequence log-probs, of the policy and of the reference alike.

FSDP sharding (``train.sharding: fsdp``): the reference and no-grad policy
log-probs (a count that differs per rank) run with the models gathered whole;
the backward runs the same number of micro-batches on every rank (an idle
backward for a rank out of samples), each copy of a prompt encoded (no
``share_prefix``), and a non-finite surrogate still backpropagates so that
every rank joins FSDP's collectives before all of them skip the step.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from ..logprobs import completion_logprobs, forced_mask
from ..losses import joint_dpo_loss, reference_free_dpo_loss
from ..preference.pairs import JointPair, NodeRng, tree_pairs
from ..types import joined_samples
from ..compute import distributed as dist
from ..preference.pair_tokens import joint_tokens, side_tokens, tokenizer_fingerprint
from ..compute.dropout import dropout_disabled
from ..compute.precision import autocast, backward
from ..compute.sharding import idle_backward, lockstep_count


def step_pairs(rollouts, cfg, key: str) -> list[list[JointPair]]:
    """Pairs of every rollout chunk (sample indices local to the chunk); ``key`` names the batch for the
    per-node streams of ``pair_selection: random`` (:func:`node_rngs`)."""
    pref = cfg.preference
    return [tree_pairs(r.tree.rewards, r.tree.child, r.tree.joints, cfg.num_generations, cfg.discount,
                       pref.pair_selection, pref.pairs_per_item, rng)
            for r, rng in zip(rollouts, chunk_node_rngs(rollouts, key))]


def node_rngs(ro, key: str, first_item: int = 0) -> NodeRng:
    """g -> a stream seeded by ``key``, the global index of node g's item and g's place among that item's
    nodes: the same draws whichever rank holds the item, so ``pair_selection: random`` picks the same pairs
    on any number of ranks. ``first_item``: this rank's local index of the rollout's first item."""
    item, w, r = node_items(ro), dist.world_size(), dist.rank()
    seen: dict[int, int] = {}
    place = []
    for it in item:
        place.append(seen.get(it, 0))
        seen[it] = place[-1] + 1
    return lambda g: random.Random(f"{key}/{(first_item + item[g]) * w + r}/{place[g]}")


def first_items(rollouts) -> list[int]:
    """The rank-local index of each chunk's first item (chunks of one batch number their items on)."""
    out, offset = [], 0
    for ro in rollouts:
        out.append(offset)
        offset += sum(int(t) == 0 for t in ro.agents[0].turns)
    return out


def chunk_node_rngs(rollouts, key: str) -> list[NodeRng]:
    """:func:`node_rngs` of consecutive chunks of one batch."""
    return [node_rngs(ro, key, first) for ro, first in zip(rollouts, first_items(rollouts))]


def _pair_indices(rollouts, chunk_pairs, i: int) -> tuple[list[int], list[int]]:
    """Agent i's chosen and rejected sample indices in the step's concatenated samples ([P] each)."""
    chosen, rejected, offset = [], [], 0
    for r, pairs in zip(rollouts, chunk_pairs):
        chosen += [offset + p.chosen_samples[i] for p in pairs]
        rejected += [offset + p.rejected_samples[i] for p in pairs]
        offset += r.agents[i].num_samples
    return chosen, rejected


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


def dpo_update(trainer, rollouts) -> dict[str, float]:
    """Build the step's joint pairs from the rollout and take ``num_iterations`` MADPO steps for every agent."""
    cfg = trainer.config
    chunk_pairs = step_pairs(rollouts, cfg, f"{cfg.seed}/step{trainer.state.step}")
    n_pairs = sum(len(p) for p in chunk_pairs)
    out = {"pref/pairs": float(n_pairs),
           "pref/gap": sum(p.gap for ps in chunk_pairs for p in ps) / max(n_pairs, 1)}
    if cfg.preference.pairs_out:  # every rank's pairs (collective)
        write_pairs(cfg.preference.pairs_out, trainer.state.step, rollouts, chunk_pairs,
                    [tokenizer_fingerprint(a.tokenizer) for a in trainer.agents])
    data = []  # per agent: prompts, completions, chosen and rejected sample indices [P]
    for i in range(len(trainer.agents)):
        chosen, rejected = _pair_indices(rollouts, chunk_pairs, i)
        prompts, comps, forced = joined_samples([r.agents[i] for r in rollouts])
        data.append((prompts, comps, chosen, rejected, forced))
    out.update(dpo_step(trainer, data, torch.ones(n_pairs)))
    return out


def check_text_pairs(pairs, n_agents: int) -> None:
    """A ValueError naming the first pair without one prompt, chosen and rejected text per agent."""
    for n, p in enumerate(pairs):
        for key in ("prompts", "chosen", "rejected"):
            if len(p.get(key, ())) != n_agents:
                raise ValueError(f"preference pair {n}: {key!r} needs {n_agents} entries (one per agent)")


def text_pairs_to_ids(agents, pairs) -> list[tuple]:
    """Pairs of texts ``{"prompts": [N], "chosen": [N], "rejected": [N]}`` -> per agent
    (prompts, completions, chosen [P], rejected [P], forced flags or None) as :func:`dpo_step` takes them.

    Prompts go through each agent's prompt rendering. A response this agent's tokenizer sampled (the pair's
    ``tokens`` record, pair_tokens.py) keeps its ids and forced flags; any other is re-tokenised and ends
    with EOS (what the agent would have generated had it stopped there), all its tokens learnt."""
    check_text_pairs(pairs, len(agents))
    if not pairs:  # a rank whose share of the pairs is empty still runs dpo_step's collectives for every agent
        return [([], [], [], [], None) for _ in agents]
    out = []
    for i, agent in enumerate(agents):
        prompts = agent.encode_prompts([p["prompts"][i] for p in pairs])
        eos = [agent.tokenizer.eos_token_id] if agent.tokenizer.eos_token_id is not None else []
        fp = tokenizer_fingerprint(agent.tokenizer)
        sides = [(p, side) for side in ("chosen", "rejected") for p in pairs]
        recorded = [side_tokens(p, side, i, fp) for p, side in sides]
        redo = [k for k, rec in enumerate(recorded) if rec is None]
        if redo:
            texts = [sides[k][0][sides[k][1]][i] for k in redo]
            for k, x in zip(redo, agent.tokenizer(texts, add_special_tokens=False)["input_ids"]):
                recorded[k] = (list(x) + eos, [False] * (len(x) + len(eos)))
        comps = [ids for ids, _ in recorded]
        forced = [f for _, f in recorded] if any(any(f) for _, f in recorded) else None
        n = len(pairs)
        out.append((prompts + prompts, comps, list(range(n)), list(range(n, 2 * n)), forced))
    return out


def dpo_step(trainer, data, weights: torch.Tensor) -> dict[str, float]:
    """``num_iterations`` optimizer steps per agent on the weighted joint DPO loss
    ``sum_p w_p * loss_p / sum(w)`` (sums over every rank).

    Args:
        data: per agent ``(prompts, completions, chosen, rejected[, forced])``: token-id lists and the [P]
            sample indices of each pair's chosen and rejected response (pairs in the same order for every agent);
            ``forced`` (optional, per completion token) marks tokens a schema forced: out of the log-probs.
        weights: [P] weight of each pair (1 online; replay decay in iterative rounds).
    """
    cfg, pref, agents = trainer.config, trainer.config.preference, trainer.agents
    n_pairs = len(data[0][2]) if data else 0
    w_total = dist.all_reduce_sum(float(weights.sum()))
    out: dict[str, float] = {}
    if w_total == 0:  # every node's joint actions tied: nothing to prefer
        return out
    sel = []  # per agent: the samples needed, position of each pair's chosen / rejected sample among them
    for prompts, comps, chosen, rejected, *rest in data:
        needed = sorted(set(chosen) | set(rejected))
        pos = {s: k for k, s in enumerate(needed)}
        sel.append((prompts, comps, needed, [pos[s] for s in chosen], [pos[s] for s in rejected],
                    rest[0] if rest else None))
    data = sel
    sharded = trainer.sharding is not None
    ref_seq = []
    for i, (prompts, comps, needed, _, _, forced) in enumerate(data):
        ref = trainer.references[i]
        if pref.reference_free or ref is None:
            ref_seq.append(torch.zeros(len(needed)))
        else:  # a frozen copy, or (LoRA) the agent's own base with the adapter off
            whole = [ref.model] if getattr(ref, "model", None) is not None else [agents[i].model]
            with trainer._whole(whole), autocast(cfg.mixed_precision, agents[i].device):
                ref_seq.append(_sequence_logprobs(ref.logprobs, prompts, comps, needed, cfg.micro_batch_size,
                                                  forced))
    for it in range(cfg.num_iterations):
        pol_seq = []
        for i, (prompts, comps, needed, _, _, forced) in enumerate(data):
            agent = agents[i]
            agent.model.train()
            fn = lambda p, c, a=agent: completion_logprobs(a.model, p, c, a.tokenizer.pad_token_id,
                                                           a.config.temperature, cfg.share_prefix)
            with torch.no_grad(), trainer._whole([agent.model]), autocast(cfg.mixed_precision, agent.device), \
                    dropout_disabled(agent.model, cfg.disable_dropout):  # the same policy the backward pass sees
                pol_seq.append(_sequence_logprobs(fn, prompts, comps, needed, cfg.micro_batch_size, forced))
        # the [P, N] problem: d loss / d (each agent's sequence log-prob), loss = sum over pairs / global pairs
        leaves = [s.clone().requires_grad_(True) for s in pol_seq]
        pc = torch.stack([leaves[i][d[3]] for i, d in enumerate(data)], dim=1)
        pr = torch.stack([leaves[i][d[4]] for i, d in enumerate(data)], dim=1)
        if pref.reference_free:
            losses, z = reference_free_dpo_loss(pc, pr, pref.beta)
        else:
            rc = torch.stack([ref_seq[i][d[3]] for i, d in enumerate(data)], dim=1)
            rr = torch.stack([ref_seq[i][d[4]] for i, d in enumerate(data)], dim=1)
            losses, z = joint_dpo_loss(pc, pr, rc, rr, pref.beta)
        loss = (losses * weights.to(losses.dtype)).sum() / w_total
        coefs = torch.autograd.grad(loss, leaves, allow_unused=True) if n_pairs else [None] * len(leaves)
        if it == 0:  # over every rank's pairs
            n_all = dist.all_reduce_sum(n_pairs)
            z = z.detach()
            out.update({"pref/loss": dist.all_reduce_sum(float(loss.detach())),
                        "pref/margin": dist.all_reduce_sum(float(z.sum())) / pref.beta / max(n_all, 1),
                        "pref/accuracy": dist.all_reduce_sum(float((z > 0).sum())) / max(n_all, 1)})
        for i, (prompts, comps, needed, _, _, forced) in enumerate(data):
            agent = agents[i]
            bad = False
            coef = coefs[i] if coefs[i] is not None else torch.zeros(len(needed))
            mb, pad = cfg.micro_batch_size, agent.tokenizer.pad_token_id
            n_micro = -(-len(needed) // mb)
            # sharded: every rank runs as many forwards/backwards (FSDP collectives), each copy of a prompt encoded
            share = cfg.share_prefix and not sharded
            for m in range(lockstep_count(n_micro) if sharded else n_micro):
                if m >= n_micro or bad:  # sharded: out of samples (or already non-finite)
                    idle_backward(agent.model, pad)
                    continue
                idx = needed[m * mb:(m + 1) * mb]
                with autocast(cfg.mixed_precision, agent.device), dropout_disabled(agent.model, cfg.disable_dropout):
                    logp, mask = completion_logprobs(agent.model, [prompts[s] for s in idx], [comps[s] for s in idx],
                                                     pad, agent.config.temperature, share)
                mask = _sampled(mask, forced, idx)
                surrogate = (coef[m * mb:m * mb + len(idx)].to(logp.device, logp.dtype) * (logp * mask).sum(1)).sum()
                if not torch.isfinite(surrogate):
                    bad = True
                    if not sharded:
                        break
                    surrogate.backward()  # the other ranks' collectives need it; the step is dropped everywhere
                    continue
                backward(surrogate, trainer.scalers.get(id(agent.model)))
            grad_norm = trainer._optimizer_step(i, bad)
            if grad_norm is not None:
                out[f"{agent.name}/grad_norm"] = grad_norm
            out[f"{agent.name}/lr"] = trainer.schedulers[i].get_last_lr()[0]
    return out


def text_pairs(ro, pairs, step: int, r: int | None = None,
               fingerprints: list[str] | None = None) -> list[tuple[int, dict]]:
    """``(node, pair)`` of one rollout's pairs, in node order (``r``: the round, iterative training);
    ``fingerprints`` (the agents' tokenizers'): each pair also records its sampled tokens (pair_tokens.py)."""
    out = []
    for p in pairs:
        pair = {"step": step, **({"round": r} if r is not None else {}), "prompts": ro.tree.prompts[p.group],
                "chosen": [ro.agents[i].texts[s] for i, s in enumerate(p.chosen_samples)],
                "rejected": [ro.agents[i].texts[s] for i, s in enumerate(p.rejected_samples)], "gap": p.gap}
        if fingerprints is not None:
            pair["tokens"] = {"chosen": joint_tokens(ro.agents, p.chosen_samples, fingerprints),
                              "rejected": joint_tokens(ro.agents, p.rejected_samples, fingerprints)}
        out.append((p.group, pair))
    return out


def node_items(ro) -> list[int]:
    """[G] the item (index in the rollout's items) of every node: the roots in item order, children inherit."""
    item = [-1] * len(ro.tree.prompts)
    roots = [g for g in range(len(item)) if int(ro.agents[0].turns[g]) == 0]
    for b, g in enumerate(roots):
        item[g] = b
    for g in range(len(item)):  # breadth-first: a parent comes before its children
        for c in ro.tree.child[g].tolist():
            if c >= 0:
                item[c] = item[g]
    return item


def all_ranks_pairs(batches: list[tuple[int, list[tuple[int, dict]]]]) -> list[dict]:
    """Every rank's ``(batch, [(item, pair)])`` of the batches it sampled (``item``: the rank's own index) ->
    all the pairs, on every rank (collective), in the order one process sampling the whole batches makes:
    batch, item (global, rank r's item j is j*W + r as ``dist.shard`` splits), then the node order within it."""
    w, r = dist.world_size(), dist.rank()
    mine = [(b, j * w + r, n, p) for b, batch in batches for n, (j, p) in enumerate(batch)]
    every = [x for part in dist.gather_objects(mine) for x in part]
    return [x[3] for x in sorted(every, key=lambda x: x[:3])]


def write_pairs(path: str | Path, step: int, rollouts, chunk_pairs, fingerprints: list[str]) -> None:
    """Append one JSON line per pair (step, every agent's prompt and chosen/rejected text and tokens, their
    return gap): every rank's pairs, written by rank 0 in one process's order. Collective: every rank calls it."""
    mine = []
    for ro, pairs, first in zip(rollouts, chunk_pairs, first_items(rollouts)):  # this rank's accumulation chunks
        item = node_items(ro)
        mine += [(first + item[g], p) for g, p in text_pairs(ro, pairs, step, fingerprints=fingerprints)]
    every = all_ranks_pairs([(0, mine)])
    if not dist.is_main():
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(json.dumps(p) + "\n" for p in every)
