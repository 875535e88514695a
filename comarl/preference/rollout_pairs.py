"""Preference pairs out of rollouts, and their files: what MADPO's steps, the rounds and ``pairs_out`` share.

``step_pairs`` picks a step's (chosen, rejected) joint pairs at every tree node (``pairs.tree_pairs``);
``comparison_pairs_of`` pairs the policy's rollout with a comparator's on the same items; ``text_pairs`` and
``write_pairs`` turn pairs into the JSON lines every file of pairs holds (every agent's prompt and chosen /
rejected text, the return gap, the sampled tokens); ``text_pairs_to_ids`` turns such lines back into token
ids. Pair selection with ``pair_selection: random`` draws from one stream per node, seeded by the batch,
the item's global index and the node's place (``node_rngs``), so any number of ranks picks the same pairs;
``all_ranks_pairs`` gathers every rank's pairs in the order one process makes them.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from ..compute import distributed as dist
from ..core.steps import AgentPairs
from .pair_tokens import joint_tokens, side_tokens, tokenizer_fingerprint
from .pairs import JointPair, NodeRng, comparator_pairs, joint_returns, tree_pairs


def step_pairs(rollouts, rollout, pairs, key: str) -> list[list[JointPair]]:
    """Pairs of every rollout chunk (sample indices local to the chunk); ``rollout``: ``train.rollout`` (K and the
    discount), ``pairs``: ``train.preference.pairs`` (selection, pairs per item); ``key`` names the batch for the
    per-node streams of ``pair_selection: random`` (:func:`node_rngs`)."""
    return [tree_pairs(r.tree.rewards, r.tree.child, r.tree.joints[0], rollout.num_generations,
                       rollout.discount, pairs.pair_selection, pairs.pairs_per_item, rng)
            if not r.tree.staged else
            tree_pairs(r.tree.rewards, r.tree.child, r.tree.joints, [int(a.returns.shape[1]) for a in r.agents],
                       rollout.discount, pairs.pair_selection, pairs.pairs_per_item, rng, tree=r.tree)
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
        offset += len(ro.tree.roots())
    return out


def chunk_node_rngs(rollouts, key: str) -> list[NodeRng]:
    """:func:`node_rngs` of consecutive chunks of one batch."""
    return [node_rngs(ro, key, first) for ro, first in zip(rollouts, first_items(rollouts))]



def check_text_pairs(pairs, n_agents: int) -> None:
    """A ValueError naming the first pair without one prompt, chosen and rejected text per agent."""
    for n, p in enumerate(pairs):
        for key in ("prompts", "chosen", "rejected"):
            if len(p.get(key, ())) != n_agents:
                raise ValueError(f"preference pair {n}: {key!r} needs {n_agents} entries (one per agent)")


def text_pairs_to_ids(agents, pairs) -> list[AgentPairs]:
    """Pairs of texts ``{"prompts": [N], "chosen": [N], "rejected": [N]}`` -> per agent the token ids
    (``AgentPairs``) the DPO update (``updates/dpo.py``) learns from.

    Prompts go through each agent's prompt rendering. A response this agent's tokenizer sampled (the pair's
    ``tokens`` record, pair_tokens.py) keeps its ids and forced flags; any other is re-tokenised and ends
    with EOS (what the agent would have generated had it stopped there), all its tokens learnt."""
    check_text_pairs(pairs, len(agents))
    if not pairs:  # a rank whose share of the pairs is empty still runs dpo_step's collectives for every agent
        return [AgentPairs([], [], [], [], None) for _ in agents]
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
        every = [rec for rec in recorded if rec is not None]  # all of them: the missing ones were re-tokenised
        comps = [ids for ids, _ in every]
        forced = [f for _, f in every] if any(any(f) for _, f in every) else None
        n = len(pairs)
        out.append(AgentPairs(prompts + prompts, comps, list(range(n)), list(range(n, 2 * n)), forced))
    return out



def text_pairs(ro, pairs, step: int, r: int | None = None,
               fingerprints: list[str] | None = None) -> list[tuple[int, dict]]:
    """``(node, pair)`` of one rollout's pairs, in node order (``r``: the round, iterative training);
    ``fingerprints`` (the agents' tokenizers'): each pair also records its sampled tokens (pair_tokens.py)."""
    out = []
    if ro.tree.staged:
        raise ValueError("preference pairs of a team graph (env.stages) cannot be written as text pairs yet: an "
                         "agent that does not act at a node has no text in them (drop "
                         "train.preference.pairs.pairs_out, or use the one-stage team)")
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
    for b, g in enumerate(ro.tree.roots()):
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

def joint_side(rollout, g: int, j: int, k: int, fingerprints: list[str] | None) -> tuple[list[str], dict | None]:
    """Every agent's text of joint action j at node g ([N]), and its tokens record (pair_tokens.py)."""
    if rollout.tree.staged:
        raise ValueError("comparator pairs (iterative MADPO / MARLHF rounds) need the one-stage team; a team graph "
                         "(env.stages) is not supported there yet")
    idx = [g * k + int(rollout.tree.joints[g, j, i]) for i in range(len(rollout.agents))]
    texts = [a.texts[s] for a, s in zip(rollout.agents, idx)]
    return texts, joint_tokens(rollout.agents, idx, fingerprints) if fingerprints is not None else None


def comparison_pairs_of(ro, co, cfg, rng: random.Random | NodeRng, step: int, r: int,
                      fingerprints: tuple[list[str], list[str]] | None = None) -> list[tuple[int, dict]]:
    """``(root node, pair)`` of one policy rollout against the comparator's on the same items: at every root node,
    joint candidate j of one side meets candidate j of the other (``preference.comparator_pairs``); ``chosen_by``
    says which side won, and returns are the trees' joint returns (later turns included). ``rng``: one stream, or
    one per node (``node -> Random``) for ``pair_selection: random``; ``fingerprints``: (the policy's, the
    comparator's) tokenizers', to record each side's tokens."""
    pref, k = cfg.preference, cfg.rollout.num_generations
    rp = joint_returns(ro.tree.rewards, ro.tree.child, cfg.rollout.discount)
    rc = joint_returns(co.tree.rewards, co.tree.child, cfg.rollout.discount)
    out = []
    for g in ro.tree.roots():
        for j, policy_wins, gap in comparator_pairs(rp[g].tolist(), rc[g].tolist(), pref.pairs.pair_selection,
                                                    pref.pairs.pairs_per_item, rng(g) if callable(rng) else rng):
            mine = joint_side(ro, g, j, k, fingerprints[0] if fingerprints else None)
            theirs = joint_side(co, g, j, k, fingerprints[1] if fingerprints else None)
            won, lost = (mine, theirs) if policy_wins else (theirs, mine)
            pair = {"step": step, "round": r, "prompts": ro.tree.prompts[g], "chosen": won[0], "rejected": lost[0],
                    "gap": gap, "chosen_by": "policy" if policy_wins else "comparator"}
            if fingerprints:
                pair["tokens"] = {"chosen": won[1], "rejected": lost[1]}
            out.append((g, pair))
    return out
