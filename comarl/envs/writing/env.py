"""The writing environment: N agents each write one part of a joint text.

One turn. Agent ``i`` gets its role's prompt (a template with ``{text}``
replaced by the item's source text); the parts are scored together by the
preset's reward (``env.args.preset``; the presets are in ``presets.py``, each
task lists its own in ``WritingTask.presets``). With one agent (the
single-agent baseline) the agent writes all parts in one response separated by
``marker``, which the environment splits before scoring.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from ..base import EnvState, EvalRecord, Transition, mean_or_none, scalar_reward
from . import paper_reward as PR
from . import reward as R
from . import words


class WritingPreset(Protocol):
    """A writing preset: the prompts and the reward of one way to run a task (``presets.py``).

    ``build(task, num_agents, args)`` checks the ``env.args`` it reads (``args`` holds only keys of
    :data:`ARG_KEYS`, ``num_agents`` is 1 or a key of ``task.roles``) and returns the environment; errors name
    the bad key (``env.args.<key>``).
    """

    def build(self, task: "WritingTask", num_agents: int, args: Mapping[str, Any]) -> "WritingEnv": ...


@dataclass(frozen=True)
class WritingTask:
    """What a writing task defines (TL;DR, arXiv...).

    Attributes:
        name: registered environment name.
        roles: agent count -> role names, for every supported N >= 2 (one agent writes the parts of ``roles[2]``).
        presets: preset name -> :class:`WritingPreset` (``default`` is comarl's; the alias ``comarl`` names it).
        reference_field: item field holding a reference text for ROUGE, or None.
    """

    name: str
    roles: Mapping[int, tuple[str, ...]]
    presets: Mapping[str, WritingPreset]
    reference_field: str | None = None


ARG_KEYS = ("preset", "prompts", "single_prompt", "marker", "reward")  # every key a writing preset reads
ALIASES = {"comarl": "default"}  # comarl's preset was called "comarl" before it was called "default"


def split_marker(text: str, marker: str, parts: int) -> tuple[list[str], bool]:
    """Split one response into ``parts`` pieces at ``marker`` (stripped).

    Missing pieces are empty strings (scored as degenerate); text after a
    surplus marker stays in the last piece. Returns ``(pieces, all_markers_found)``.

    ``split_marker("a b\\n---\\nc d", "---", 2) -> (["a b", "c d"], True)``.
    """
    pieces = [p.strip() for p in text.split(marker.strip(), parts - 1)]
    found = len(pieces) == parts
    return pieces + [""] * (parts - len(pieces)), found


class WritingEnv:
    """A one-turn cooperative writing environment (see module docstring).

    Args:
        task: the task definition.
        num_agents: 1 (single-agent baseline) or a key of ``task.roles``.
        prompts: one template per agent (each contains ``{text}``); empty with one agent.
        single_prompt: template for ``num_agents == 1`` (``{text}``, ``{marker}``).
        marker: separator between parts in the single-agent response.
        reward: the preset's reward configuration (``RewardConfig``, ``PaperRewardConfig``), kept as ``reward_cfg``.
        score: ``parts -> (reward, metrics)``, the preset's reward of the role-ordered parts.
        max_reward: the highest reward ``score`` gives.
    """

    max_turns = 1

    def __init__(self, task: WritingTask, num_agents: int, prompts: Sequence[str], single_prompt: str,
                 marker: str, reward: R.RewardConfig | PR.PaperRewardConfig,
                 score: Callable[[Sequence[str]], tuple[float, dict[str, float]]], max_reward: float):
        self.task = task
        self.num_agents = num_agents
        self.roles = task.roles[2] if num_agents == 1 else task.roles[num_agents]
        self.prompts = tuple(prompts)
        self.single_prompt = single_prompt
        self.marker = marker
        self.reward_cfg = reward
        self.score = score
        self.max_reward = max_reward

    # -- protocol
    def reset(self, item: Mapping[str, Any]) -> EnvState:
        text = item.get("text")
        if not isinstance(text, str):
            raise KeyError(f"{self.task.name}: item has no 'text' field; use the task's load_items() to build items "
                           f"(fields: {sorted(item)})")
        if self.num_agents == 1:
            prompts: tuple[str, ...] = (self.single_prompt.replace("{marker}", self.marker).replace("{text}", text),)
        else:
            prompts = tuple(t.replace("{text}", text) for t in self.prompts)
        return EnvState(item=item, prompts=prompts)

    def parts(self, responses: Sequence[str]) -> tuple[list[str], bool]:
        """The role-ordered parts of one joint response, and whether the single
        agent's markers were all found (always True with N >= 2)."""
        if len(responses) != self.num_agents:
            raise ValueError(f"{self.task.name}: joint action has {len(responses)} responses, "
                             f"environment has {self.num_agents} agents")
        if self.num_agents == 1:
            return split_marker(responses[0], self.marker, len(self.roles))
        return list(responses), True

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        out = []
        for _state, resp in zip(states, responses, strict=True):
            parts, found = self.parts(resp)
            value, metrics = self.score(parts)
            if self.num_agents == 1:
                metrics["marker_found"] = float(found)
            out.append(Transition(value, True, None, metrics))
        return out

    # -- evaluation
    def summarize(self, records: Sequence[EvalRecord]) -> dict[str, Any]:
        """Aggregate ``comarl eval`` records into a JSON-able dict.

        Keys: ``items``, ``samples``, ``num_agents``, ``roles``, ``reward``
        (mean, min, max, max_possible), ``levels`` (share of samples passing
        each level, ``mean_level``, ``degenerate`` share), ``length_ratio``
        (n, mean, q10/q25/q50/q75/q90 over samples where every part has words;
        for P > 2 parts the mean over pairs), and ``rouge`` (when items carry a
        non-empty reference: mean F1 of rouge1/rouge2/rougeL of each role's part
        and of all parts joined, against the reference).
        """
        rewards, levels, ratios = [], [], []
        level_hits = {f"level{k}": 0 for k in range(1, 5)}
        degenerate = 0
        pairs: list[tuple[list[str], str]] = []
        ref_field = self.task.reference_field
        for rec in records:
            ref = str(rec.item.get(ref_field) or "").strip() if ref_field else ""
            for resp, tr in zip(rec.responses, rec.transitions, strict=True):
                rewards.append(scalar_reward(tr.reward, self.task.name))
                m = tr.metrics
                levels.append(float(m.get("level", 0.0)))
                degenerate += int(m.get("degenerate", 0.0) > 0)
                for k in level_hits:
                    level_hits[k] += int(m.get(k, 0.0) > 0)
                parts, _ = self.parts(resp)
                lengths = [words.length_words(p) for p in parts]
                rs = R.pair_ratios(lengths)
                defined = [r for r in rs if r is not None]
                if len(defined) == len(rs):
                    ratios.append(sum(defined) / len(rs))
                if ref:
                    pairs.append((parts, ref))
        n = len(rewards)
        out: dict[str, Any] = {
            "items": len(records), "samples": n, "num_agents": self.num_agents, "roles": list(self.roles),
            "reward": {"mean": mean_or_none(rewards), "min": min(rewards) if n else None,
                       "max": max(rewards) if n else None, "max_possible": self.max_reward},
            "levels": {**{k: (v / n if n else None) for k, v in level_hits.items()},
                       "mean_level": mean_or_none(levels), "degenerate": degenerate / n if n else None},
            "length_ratio": _distribution(ratios),
        }
        if pairs:
            out["rouge"] = rouge_summary(pairs, self.roles)
        return out


def _distribution(xs: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean and the 10/25/50/75/90 % quantiles (linear interpolation)."""
    if not xs:
        return {"n": 0, "mean": None, "q10": None, "q25": None, "q50": None, "q75": None, "q90": None}
    q = np.quantile(np.asarray(xs, dtype=float), [0.1, 0.25, 0.5, 0.75, 0.9])
    return {"n": len(xs), "mean": float(np.mean(xs)), **{f"q{p}": float(v) for p, v in zip((10, 25, 50, 75, 90), q)}}


def rouge_summary(pairs: Sequence[tuple[Sequence[str], str]], roles: Sequence[str]) -> dict[str, Any]:
    """Mean ROUGE F1 (``rouge-score``, Porter stemming) of each role's part and
    of the parts joined by a space, against the reference.

    Args:
        pairs: ``(parts, reference)`` per sample, parts in role order.
        roles: role names (the keys of the result besides ``"joint"``).
    Returns:
        ``{role: {"rouge1", "rouge2", "rougeL"}, ..., "joint": {...}, "n": samples}``.
    """
    from rouge_score import rouge_scorer

    kinds = ("rouge1", "rouge2", "rougeL")
    scorer = rouge_scorer.RougeScorer(list(kinds), use_stemmer=True)
    names = list(roles) + ["joint"]
    sums = {name: dict.fromkeys(kinds, 0.0) for name in names}
    for parts, ref in pairs:
        for name, text in zip(names, list(parts) + [" ".join(parts)]):
            scores = scorer.score(ref, text)
            for kind in kinds:
                sums[name][kind] += scores[kind].fmeasure
    n = len(pairs)
    return {**{name: {k: v / n for k, v in s.items()} for name, s in sums.items()}, "n": n}


def build_env(task: WritingTask, num_agents: int, args: Mapping[str, Any]) -> WritingEnv:
    """Check ``env.args``, choose the preset (``env.args.preset``, default ``default``) and let it build the
    environment.

    Raises:
        ValueError: naming the bad key (``env.args.<key>``) or ``num_agents``.
    """
    if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
        raise ValueError(f"{task.name}: num_agents must be a positive integer, got {num_agents!r}")
    supported = [1] + sorted(task.roles)
    if num_agents not in supported:
        raise ValueError(f"{task.name}: {num_agents} agents not supported (number of agents = len(agents)); "
                         f"this task defines roles for {supported} agents: "
                         + "; ".join(f"{n}: {', '.join(task.roles[n])}" for n in sorted(task.roles)))
    unknown = set(args) - set(ARG_KEYS)
    if unknown:
        raise ValueError(f"env.args: unknown key(s) {sorted(unknown)} for {task.name}; known: {', '.join(ARG_KEYS)}")
    return choose_preset(task, args.get("preset", "default")).build(task, num_agents, args)


def choose_preset(task: WritingTask, name: Any) -> WritingPreset:
    """``task.presets[name]`` (``comarl`` = ``default``); any other name is an error naming ``env.args.preset``."""
    preset = task.presets.get(ALIASES.get(name, name)) if isinstance(name, str) else None
    if preset is None:
        known = list(task.presets) + [f"{a} (= {t})" for a, t in ALIASES.items() if t in task.presets]
        raise ValueError(f"env.args.preset: {task.name} has presets {', '.join(known)}; got {name!r}")
    return preset
