"""Rescore a grid v2 row's kept samples three ways (issue 45), and measure their lengths.

The paper's reward of a single writer depends on where its one response is split into the short and the detailed
part: at a ``---`` line when it writes one, else at the reference's fallback cut (a 1:2.5 length ratio), which lands
inside the length band the reward pays. So every TL;DR row is scored three ways:

- ``reward``: the paper reward as the reference computes it (the single writer split by the fallback when it wrote
  no ``---``). The grid's headline.
- ``marker``: the paper reward, counted 0 for a single-writer response without a ``---`` line. A team needs no
  marker (each agent writes its own part), so for a team this is its reward.
- ``rouge``: a split-independent quality score: ROUGE-L F1 (``rouge-score``, Porter stemming) of the *summary
  sentence* against the post's reference TL;DR. The summary sentence is the first sentence of at least 3 words in
  the opening text (the single writer's response; a team's first agent's completion) before any ``---`` line:
  sentences end at a ``.``, ``!`` or ``?`` followed by a space or the end, or at a line break; a leading label
  such as ``TITLE:`` or ``Summary:`` is dropped first (the 135M writers often echo the post's ``SUBREDDIT:`` /
  ``TITLE:`` / ``POST:`` lines, and a bare label line is not a sentence); no such sentence scores 0. The same rule
  for every condition, so no length ratio decides it.
"""
from __future__ import annotations

import re
from functools import lru_cache

from .tasks import MARKER

SCORINGS = ("reward", "marker", "rouge")
SCORING_LABELS = {"reward": "paper reward (single writer: the reference's fallback split)",
                  "marker": "paper reward, `---` required (0 without it)",
                  "rouge": "ROUGE-L F1 of the summary sentence vs the reference TL;DR"}
SCORING_SHORT = {"reward": "reward (fallback split)", "marker": "reward (`---` required)",
                 "rouge": "ROUGE-L (summary sentence)"}

_END = re.compile(r"[.!?](?=\s|$)|\n")
_LABEL = re.compile(r"^[A-Za-z][A-Za-z ;/'-]{0,24}:\s*")
MIN_WORDS = 3


def summary_sentence(text: str, marker: str = MARKER) -> str:
    """The summary sentence of ``text`` (see the module docstring).

    ``summary_sentence("The cat naps. It sleeps.") == "The cat naps."``;
    ``summary_sentence("SUBREDDIT: r/cats\\nTITLE: My cat naps here\\nPOST: x") == "My cat naps here"``;
    ``summary_sentence("A b --- c d e.") == ""`` (two words before the marker).
    """
    text = text.split(marker, 1)[0]
    pos = 0
    while pos < len(text):
        m = _END.search(text, pos)
        end = m.end() if m else len(text)
        sentence = _LABEL.sub("", text[pos:end].strip(), count=1).strip()
        if len(sentence.split()) >= MIN_WORDS:
            return sentence
        pos = end
    return ""


@lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 of ``candidate`` against ``reference`` (``rouge-score``, stemmed; 0 when either is empty).

    ``rouge_l("the cat sat", "the cat sat on the mat")``: LCS 3 words, precision 3/3, recall 3/6, F1 2/3."""
    if not candidate.strip() or not reference.strip():
        return 0.0
    return float(_scorer().score(reference, candidate)["rougeL"].fmeasure)


def sample_scores(sample: dict, reference: str, num_agents: int) -> dict[str, float]:
    """The three scores of one kept sample (``score.team_score(keep=True)``'s record, one turn)."""
    opening = sample["turns"][0]["texts"][0]
    marker = sample["reward_marker_only"] if num_agents == 1 else sample["reward"]
    return {"reward": float(sample["reward"]), "marker": float(marker),
            "rouge": rouge_l(summary_sentence(opening), reference or "")}


def row_cells(row: dict) -> dict[str, dict[str, float]]:
    """``{scoring: {post: mean over the post's samples}}`` of one row with kept samples."""
    out: dict[str, dict[str, float]] = {s: {} for s in SCORINGS}
    for rec in row["records"]:
        scores = [sample_scores(s, rec.get("reference") or "", row["num_agents"]) for s in rec["samples"]]
        for name in SCORINGS:
            out[name][rec["id"]] = sum(sc[name] for sc in scores) / len(scores)
    return out


def lengths(rows: list[dict]) -> dict:
    """Per agent over every kept sample of ``rows`` (first turn): mean completion length in new tokens, the share
    at the token cap, and (one writer) the share that wrote the ``---`` line. ``{}`` without kept samples."""
    per_agent: dict[int, list[tuple[int, bool]]] = {}
    marker = []
    for r in rows:
        for rec in r.get("records") or []:
            for s in rec["samples"]:
                t = s["turns"][0]
                for j, (n, capped) in enumerate(zip(t["tokens"], t["capped"])):
                    per_agent.setdefault(j, []).append((n, capped))
                if "marker_found" in s:
                    marker.append(s["marker_found"])
    if not per_agent:
        return {}
    out = {"mean_tokens": [sum(n for n, _ in v) / len(v) for _, v in sorted(per_agent.items())],
           "capped": [sum(c for _, c in v) / len(v) for _, v in sorted(per_agent.items())],
           "cap": rows[0]["max_new_tokens"], "n": len(per_agent[0])}
    if marker:
        out["marker_found"] = sum(marker) / len(marker)
    return out
