"""The rollout trees the sample log keeps (``trees.jsonl``): each logged item's tree with its texts and credit.

:func:`tree_records` turns a step's rollouts (after the update filled in the advantages) into one JSON-ready
record per item, in batch order, until ``max_bytes`` is spent. ``comarl view`` draws them. A record::

    {"v": 1, "step": 3, "item": 0, "of": 4, "id": "task_id='HumanEval/3'" | null, "key": "3f2a9c1e",
     "agents": ["writer", "editor"], "stages": [{"agents": [0], "kind": "branch"}, ...],
     "algorithm": {"name": "magrpo", "summary": "...", "scaled": false},
     "reward": 0.42, "value": 0.45, "cut": 0, "nodes": [node, ...]}

``of`` is the number of items the step had on this rank (items past the cap are not written), ``key`` a hash
of the item (the same item in another epoch has the same key), ``reward`` the mean team reward of the item's
first-turn leaves (what ``reward/mean`` averages), ``value`` the mean return of the root's joint actions, and
``cut`` the number of texts shortened to fit the cap. Nodes come parents first; node 0 is the root::

    {"id": 1, "parent": 0, "via": 2,            # the parent node and its joint action that led here
     "turn": 0, "stage": 1, "agents": [1],      # the agents acting here (a routed stage: the ones chosen)
     "stage_child": false,                      # the joint actions lead to later stages of this turn
     "prompts": {"1": "..."},                   # an agent of an aligned stage: one prompt per joint action
     "samples": {"1": [{"text": "...", "return": 0.5, "advantage": 0.1, "truncated": false}, ...]},
     "credit": {"1": {"mean": 0.4, "baseline": 0.3}},   # its group's mean return; the greedy baseline (MAReMax)
     "joints": [{"samples": {"0": 2, "1": 0}, "reward": 0.5, "return": 0.5, "child": 3 | null,
                 "truncated": false, "metrics": {...}, "view": [...], "next_prompts": [...], "values": [...]}]}

A joint action names each acting agent's sample index; ``reward`` and ``return`` are one number for a team
reward, a list per agent for per-agent rewards; ``reward`` is absent on a joint action whose child is a later
stage of the same turn (the environment scores leaves). ``truncated``: the branch ended only at ``num_turns``
(then ``next_prompts`` says what the agents would have read next); ``metrics``: the environment's numbers for
that leaf; ``values``: the critic's value of the joint action per critic column, with a critic
(``StepOutput.values``); ``view``: the environment's own picture of the leaf (below). Non-finite numbers are
written as null.

**The environment's view** (one optional hook): an environment (or one it wraps) with a method
``sample_view(item, responses, metrics) -> list[dict] | None`` is asked once per logged leaf, with the
dataset item, every agent's text on the branch ("" for an agent that did not act) and the leaf's metrics. Each
block it returns is ``{"title": str, ...}`` with one of ``"text": str``, ``"table": {"columns": [str],
"rows": [[cell, ...]]}`` or ``"checks": [[label, passed], ...]``; the page shows them as text (never HTML). A
hook that raises, or returns something else, becomes a text block saying so: logging never stops training.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from ..core.stages import StageGraph, env_attribute, stage_graph
from ..core.types import Rollout, RolloutTree
from ..envs.error_policy import ID_KEYS

VERSION = 1
VIEW_BYTES = 16_384
"""Most bytes of the environment's view of one leaf (a bigger view is replaced by a note)."""
MIN_TEXT = 64
"""Shortest a text is cut to when an item alone is bigger than the cap (below it the item is left out)."""


def tree_records(rollouts: Sequence[Rollout], items: Sequence[Mapping[str, Any]], agent_names: Sequence[str], *,
                 step: int, max_bytes: int, env: Any = None, algorithm: Mapping[str, Any] | None = None,
                 advantages: Sequence[Sequence[torch.Tensor]] = (), values: Sequence[torch.Tensor] = ()) -> list[dict]:
    """One record per item of a step's rollouts (see the module docstring), in batch order, while they fit.

    Args:
        rollouts: the step's rollouts (gradient-accumulation chunks of consecutive items); their roots are
            ``items`` in order.
        advantages: per agent, per rollout, the update's advantages (``StepOutput.advantages``: [G, K], or
            [S, T] from a per-token estimator, shown as each sample's mean over its tokens); an agent with none
            (or an empty sequence: no advantages computed) shows null.
        values: per rollout, the critic's [G, J, C] values of the joint actions (``StepOutput.values``), or none.
        items: this rank's items of the step.
        agent_names: one name per agent.
        step: the step the records belong to.
        max_bytes: the most bytes of JSON written for the step: items are kept whole in order until the next
            would pass it; a first item bigger than all of it has its texts shortened (``cut``), and one that
            does not fit at ``MIN_TEXT`` characters per text is written as a stub saying how big it was.
        env: the environment (its team graph names the stages; its ``sample_view`` draws leaves).
        algorithm: ``{"name", "summary", "scaled"}`` of the estimator that computed the advantages.
    """
    if max_bytes <= 0:
        return []
    roots = [(n, g) for n, r in enumerate(rollouts) if r.tree is not None for g in r.tree.roots()]
    if not roots:  # rollouts without a tree (a ProgramEnv's runs: calls, not turns) have none to draw
        return []
    if len(roots) != len(items):
        raise ValueError(f"tree_records: {len(roots)} rollout roots for {len(items)} items")
    n = len(agent_names)
    view = env_attribute(env, "sample_view") if env is not None else None
    head = {"v": VERSION, "step": step, "of": len(items), "agents": list(agent_names),
            "stages": stages_record(stage_graph(env, n) if env is not None else StageGraph.single(n)),
            "algorithm": dict(algorithm or {})}
    out: list[dict] = []
    used = 0
    for b, ((n_r, root), item) in enumerate(zip(roots, items)):
        credit = Credit([sample_view_advantages(a[n_r], rollouts[n_r].agents[i]) if n_r < len(a) else None
                         for i, a in enumerate(advantages)] or [None] * len(rollouts[n_r].agents),
                        values[n_r] if n_r < len(values) else None)
        rec = {**head, "item": b, "id": item_id(item), "key": item_key(item),
               **item_tree(rollouts[n_r], root, item, view, credit)}
        size = _size(rec)
        if used + size > max_bytes:
            if out:
                break
            rec, size = fit_texts(rec, max_bytes)
        out.append(rec)
        used += size
    return out


@dataclass(frozen=True)
class Credit:
    """What the update computed for one rollout: per agent [G, K] advantages (None: none) and the critic's
    [G, J, C] values of the joint actions (None without a critic)."""

    advantages: Sequence[torch.Tensor | None]
    values: torch.Tensor | None = None


def sample_view_advantages(adv: torch.Tensor, samples: Any) -> torch.Tensor | None:
    """An agent's advantages of one rollout as one number per sample, [G, K]: a sequence estimate as it is, a
    per-token one [S, T] as each sample's mean over its completion tokens."""
    shape = tuple(samples.returns.shape)
    if adv.numel() == 0:
        return None
    if tuple(adv.shape) == shape:
        return adv
    lengths = torch.tensor([len(c) for c in samples.completion_ids], dtype=adv.dtype)
    t = torch.arange(adv.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
    mean = (adv * t).sum(1) / lengths.clamp(min=1)
    return mean.reshape(shape)


def item_tree(rollout: Rollout, root: int, item: Mapping[str, Any], view: Callable | None = None,
              credit: Credit | None = None) -> dict:
    """``{"reward", "value", "cut", "nodes"}`` of the item whose tree starts at node ``root`` of ``rollout``."""
    tree = rollout.tree
    assert tree is not None  # tree_records keeps only rollouts with a tree
    credit = credit or Credit([None] * len(rollout.agents))
    order, local = _subtree(tree, root)
    nodes = [node_record(rollout, g, local, item, view, credit) for g in order]
    for g, rec in zip(order, nodes):
        for j, joint in enumerate(rec["joints"]):
            c = joint["child"]
            if c is not None:
                nodes[c]["parent"], nodes[c]["via"] = local[g], j
    leaf_rewards = [float(tree.rewards[g, j].mean()) for g in order if int(tree.turn[g]) == 0
                    for j in range(int(tree.width[g])) if not bool(tree.stage_child[g, j])]
    width = int(tree.width[root])
    value = float(tree.returns[root, :width].mean()) if tree.returns is not None and width else math.nan
    return {"reward": _num(sum(leaf_rewards) / len(leaf_rewards)) if leaf_rewards else None,
            "value": _num(value), "cut": 0, "nodes": nodes}


def node_record(rollout: Rollout, g: int, local: Mapping[int, int], item: Mapping[str, Any] | None = None,
                view: Callable | None = None, computed: Credit | None = None) -> dict:
    """Node ``g`` of ``rollout``'s tree: its acting agents' prompts, samples and credit, and its joint actions
    (``local`` maps node indices of the tree to the record's ids)."""
    tree = rollout.tree
    assert tree is not None
    computed = computed or Credit([None] * len(rollout.agents))
    acting = [i for i in range(tree.groups.shape[1]) if int(tree.groups[g, i]) >= 0]
    width = int(tree.width[g])
    prompts, samples, credit = {}, {}, {}
    for i in acting:
        s, row = rollout.agents[i], int(tree.groups[g, i])
        k = int(s.returns.shape[1])
        per_joint = tree.joint_prompts.get((g, i))
        prompts[str(i)] = list(per_joint) if per_joint is not None else tree.prompts[g][i]
        agent_adv = computed.advantages[i] if i < len(computed.advantages) else None
        adv = agent_adv[row] if agent_adv is not None else None
        samples[str(i)] = [{"text": s.texts[row * k + q], "return": _num(s.returns[row, q]),
                            "advantage": _num(adv[q]) if adv is not None else None,
                            "truncated": bool(s.truncated[row * k + q])} for q in range(k)]
        credit[str(i)] = {"mean": _num(s.returns[row].mean())}
        if s.baseline is not None:
            credit[str(i)]["baseline"] = _num(s.baseline[row])
    values = computed.values  # [G, J, C] a critic's values of the joint actions
    joints = []
    for j in range(width):
        child = int(tree.child[g, j])
        rec: dict[str, Any] = {"samples": {str(i): int(tree.joints[g, j, i]) for i in acting},
                               "child": local[child] if child >= 0 else None, "truncated": bool(tree.truncated[g, j])}
        if tree.returns is not None:
            rec["return"] = _per_agent(tree.returns[g, j].tolist())
        if not bool(tree.stage_child[g, j]):
            rec["reward"] = _per_agent([float(x) for x in tree.rewards[g, j]])
            metrics = tree.leaf_metrics.get((g, j))
            if metrics:
                rec["metrics"] = {k: _num(v) for k, v in metrics.items()}
            if view is not None and item is not None:
                rec["view"] = leaf_view(view, item, leaf_texts(rollout, g, j), metrics or {})
        if (g, j) in tree.next_prompts:
            rec["next_prompts"] = list(tree.next_prompts[(g, j)])
        if values is not None:
            rec["values"] = [_num(v) for v in values[g, j].tolist()]
        joints.append(rec)
    return {"id": local[g], "parent": None, "via": None, "turn": int(tree.turn[g]), "stage": int(tree.stage[g]),
            "agents": acting, "stage_child": bool(tree.stage_child[g, :width].any()) if width else False,
            "prompts": prompts, "samples": samples, "credit": credit, "joints": joints}


def leaf_texts(rollout: Rollout, g: int, j: int) -> tuple[str, ...]:
    """Every agent's text on the branch through joint action ``j`` of node ``g`` ("" for one that did not act)."""
    tree = rollout.tree
    assert tree is not None
    texts = dict(tree.context[g])
    for i in range(tree.groups.shape[1]):
        sample, row = int(tree.joints[g, j, i]), int(tree.groups[g, i])
        if sample >= 0 and row >= 0:
            s = rollout.agents[i]
            texts[i] = s.texts[row * int(s.returns.shape[1]) + sample]
    return tuple(texts.get(i, "") for i in range(tree.groups.shape[1]))


def leaf_view(view: Callable, item: Mapping[str, Any], responses: Sequence[str], metrics: Mapping[str, float]) -> list:
    """The environment's blocks for one leaf, checked (see the module docstring); a failure is a text block."""
    try:
        blocks = view(item, list(responses), dict(metrics))
    except Exception as e:  # an environment's drawing code must never stop training
        return [{"title": "view", "text": f"the environment's sample_view raised {type(e).__name__}: {e}"[:500]}]
    if blocks is None:
        return []
    if not isinstance(blocks, (list, tuple)):
        return [{"title": "view", "text": f"sample_view returned {type(blocks).__name__}, expected a list of blocks"}]
    out = [_block(b) for b in blocks]
    try:
        if len(json.dumps(out, allow_nan=False, default=str)) > VIEW_BYTES:
            return [{"title": "view", "text": f"the environment's view is over {VIEW_BYTES} bytes: not logged"}]
    except ValueError:
        return [{"title": "view", "text": "the environment's view holds a non-finite number: not logged"}]
    return out


def _block(b: Any) -> dict:
    if not isinstance(b, Mapping):
        return {"title": "view", "text": f"a block must be a dict, got {type(b).__name__}"}
    title = str(b.get("title", ""))
    if isinstance(b.get("text"), str):
        return {"title": title, "text": b["text"]}
    table = b.get("table")
    if isinstance(table, Mapping) and isinstance(table.get("rows"), (list, tuple)):
        return {"title": title, "table": {"columns": [str(c) for c in table.get("columns", [])],
                                          "rows": [[_cell(c) for c in row] for row in table["rows"]
                                                   if isinstance(row, (list, tuple))]}}
    checks = b.get("checks")
    if isinstance(checks, (list, tuple)):
        return {"title": title, "checks": [[str(c[0]), bool(c[1])] for c in checks
                                           if isinstance(c, (list, tuple)) and len(c) == 2]}
    return {"title": title or "view", "text": f"unknown block with keys {sorted(map(str, b))} (text, table or checks)"}


def _cell(c: Any) -> Any:
    if isinstance(c, bool) or c is None or isinstance(c, str):
        return c
    if isinstance(c, (int, float)):
        return _num(c)
    return str(c)


def stages_record(graph: StageGraph) -> list[dict]:
    """The team graph for the page: per stage its agents, its kind and (later stages) whom each agent reads."""
    out = []
    for s, st in enumerate(graph.stages):
        kind = "aligned" if st.aligned else ("routed" if st.route is not None else "branch")
        rec: dict[str, Any] = {"agents": list(st.agents), "kind": kind}
        if s > 0:
            rec["reads"] = {str(a): list(graph.reads_of(a)) for a in st.agents}
        if st.route is not None:
            rec["router"] = st.route.router
        out.append(rec)
    return out


def item_id(item: Mapping[str, Any]) -> str | None:
    """The item's id field (``task_id='HumanEval/3'``), else None."""
    for key in ID_KEYS:
        if key in item and isinstance(item[key], (str, int)):
            return f"{key}={item[key]!r}"
    return None


def item_key(item: Mapping[str, Any]) -> str:
    """A short hash of the item's content: equal for the same item in every step and epoch."""
    text = json.dumps(item, sort_keys=True, default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:10]


def fit_texts(rec: dict, max_bytes: int) -> tuple[dict, int]:
    """``rec`` with every text cut to the longest length at which it fits ``max_bytes`` (each cut text ends with
    a marker saying how much was left out; ``cut`` counts them); a stub record when not even ``MIN_TEXT``
    characters per text fit. Returns (record, its size in bytes)."""
    longest = max((len(t) for t in _texts(rec)), default=0)
    limit = longest // 2
    while limit >= MIN_TEXT:
        cut, n = _cut_texts(rec, limit)
        size = _size(cut)
        if size <= max_bytes:
            cut["cut"] = n
            return cut, size
        limit //= 2
    stub = {k: rec[k] for k in ("v", "step", "item", "of", "id", "key", "agents", "stages", "algorithm", "reward",
                                "value")}
    stub.update(nodes=[], cut=0, too_big=_size(rec))
    return stub, _size(stub)


def _texts(x: Any):
    if isinstance(x, str):
        yield x
    elif isinstance(x, Mapping):
        for v in x.values():
            yield from _texts(v)
    elif isinstance(x, list):
        for v in x:
            yield from _texts(v)


def _cut_texts(x: Any, limit: int) -> tuple[Any, int]:
    """``x`` with strings longer than ``limit`` cut (marked); the number cut."""
    if isinstance(x, str):
        if len(x) <= limit:
            return x, 0
        return x[:limit] + f" [... {len(x) - limit} characters cut by train.log_samples_max_kb]", 1
    if isinstance(x, Mapping):
        pairs = [(k, *_cut_texts(v, limit)) for k, v in x.items()]
        return {k: v for k, v, _ in pairs}, sum(c for _, _, c in pairs)
    if isinstance(x, list):
        pairs2 = [_cut_texts(v, limit) for v in x]
        return [v for v, _ in pairs2], sum(c for _, c in pairs2)
    return x, 0


def _subtree(tree: RolloutTree, root: int) -> tuple[list[int], dict[int, int]]:
    """The nodes under ``root`` in breadth-first order (parents first) and their ids in the record."""
    order, local = [root], {root: 0}
    for g in order:
        for j in range(int(tree.width[g])):
            c = int(tree.child[g, j])
            if c >= 0 and c not in local:
                local[c] = len(order)
                order.append(c)
    return order, local


def _per_agent(values: Sequence[float]) -> Any:
    """One number when every agent has it (a team reward), else the list."""
    vals = [float(v) for v in values]
    if vals and all(v == vals[0] for v in vals):
        return _num(vals[0])
    return [_num(v) for v in vals]


def _num(x: Any) -> float | None:
    """A float to 6 significant digits; None for a non-finite one (JSON has no NaN)."""
    v = float(x)
    return float(f"{v:.6g}") if math.isfinite(v) else None


def _size(rec: Mapping) -> int:
    return len(json.dumps(rec, ensure_ascii=False).encode("utf-8")) + 1


__all__ = ["VERSION", "fit_texts", "item_id", "item_key", "item_tree", "leaf_texts", "leaf_view", "node_record",
           "stages_record", "tree_records"]
