"""arXiv expansion: agents expand a paper abstract into an introduction.

Hub data ``OpenMLRL/arXiv_abstract``: rows with ``abstract_text``, a list of
sentences (``<S>``/``</S>`` tags are removed) or one string; a plain
``abstract`` string field is accepted too. Items get ``text`` (the abstract).

Agents: 2 (background & motivation | method & implications), 3 (background
& motivation | method | results & implications), or 1 (the two parts of N=2,
split at ``marker``).
"""
from __future__ import annotations

import re
from typing import Any

from ..registry import EnvEntry, register_env
from . import paper_reward as PR
from . import reward as R
from ..loading import load_rows
from .env import WritingEnv, WritingTask, build_env
from .presets import DefaultPreset, PaperPreset

HUB_ID = "OpenMLRL/arXiv_abstract"

_HEAD = "Below is the abstract of a research paper. "
_TAIL = "\n\nAbstract: {text}\n\n"

PROMPT_BACKGROUND = (
    _HEAD + "Write the opening of its introduction: the background and the motivation, that is, the problem, "
    "why it matters and what earlier work leaves open. Do not describe the proposed method or its results; "
    "another writer covers those. Write 128 to 256 words." + _TAIL + "Introduction (background and motivation):"
)
PROMPT_METHOD_IMPLICATIONS = (
    _HEAD + "Write the second half of its introduction: the proposed method, its main results and their "
    "implications. Do not repeat the background or the motivation; another writer covers those. Write 128 "
    "to 256 words, a little longer than the first half." + _TAIL + "Introduction (method and implications):"
)
PROMPT_METHOD = (
    _HEAD + "Write the middle part of its introduction: the proposed method and how it works. Do not repeat "
    "the background or discuss the results; other writers cover those. Write 128 to 256 words."
    + _TAIL + "Introduction (method):"
)
PROMPT_IMPLICATIONS = (
    _HEAD + "Write the last part of its introduction: the main results and their implications, and the "
    "contributions in brief. Do not repeat the background or the description of the method; other writers "
    "cover those. Write 128 to 256 words." + _TAIL + "Introduction (results and implications):"
)
PROMPT_SINGLE = (
    _HEAD + "Expand it into an introduction in two parts. First write the background and the motivation "
    "(128 to 256 words). Then write a line containing only {marker}. Then write the proposed method and its "
    "implications (128 to 256 words, a little longer), without repeating the first part."
    + _TAIL + "Introduction (background and motivation):"
)

# preset "paper": the reference's two roles, constraints and output format, in our own words
# (the verbatim prompts are the formatters in OpenMLRL/LLM_Collab_Writing train_magrpo.py)
_PAPER_HEAD = ("Expand the scientific abstract below into content for the introduction section of the paper.\n\n"
               "Abstract:\n{text}\n\nGuidelines:\n")
PAPER_PROMPT_BACKGROUND = (
    _PAPER_HEAD + "- Another writer covers the methodology and the implications.\n"
    "- Write only about the background and the motivation.\n"
    "- Do not repeat material on the methodology or the implications.\n"
)
PAPER_PROMPT_METHOD = (
    _PAPER_HEAD + "- Another writer covers the background and the motivation.\n"
    "- Write only about the methodology and the implications.\n"
    "- Do not repeat material on the background or the motivation.\n"
)

DEFAULT_REWARD = R.RewardConfig(
    min_words=128, max_words=256,
    length_ratio=R.Band(low=1.0, high=1.6, zero_below=0.7, zero_above=2.2),
    unique_ratio=R.Band(low=0.8, high=1.5, zero_below=0.5, zero_above=2.0),
    overlap=R.Band(low=0.05, high=0.3, zero_below=0.0, zero_above=0.6),
)

TASK = WritingTask(
    name="arxiv",
    roles={2: ("background", "method"), 3: ("background", "method", "implications")},
    presets={
        "default": DefaultPreset(prompts={2: (PROMPT_BACKGROUND, PROMPT_METHOD_IMPLICATIONS),
                                          3: (PROMPT_BACKGROUND, PROMPT_METHOD, PROMPT_IMPLICATIONS)},
                                 single_prompt=PROMPT_SINGLE, reward=DEFAULT_REWARD),
        "paper": PaperPreset(prompts=(PAPER_PROMPT_BACKGROUND, PAPER_PROMPT_METHOD), reward=PR.ARXIV),
    },
    reference_field=None,
)

_TAGS = re.compile(r"</?S>")


def normalize(index: int, row: dict[str, Any], source: str) -> dict[str, Any]:
    """An arXiv row -> item with ``abstract`` and ``text`` (the same string)."""
    value = row.get("abstract_text")
    if value is None:  # datasets fills a column missing from a row with None
        value = row.get("abstract")
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        sentences = [_TAGS.sub("", s).strip() for s in value]
        text = " ".join(s for s in sentences if s)
    elif isinstance(value, str):
        text = _TAGS.sub("", value).strip()
    else:
        raise ValueError(f"{source}: row {index} needs 'abstract_text' (list of sentences or text) or 'abstract' "
                         f"(fields: {sorted(row)})")
    if not text:
        raise ValueError(f"{source}: row {index} has an empty abstract")
    return {**row, "abstract": text, "text": text}


def load_items(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """arXiv items from ``source`` (hub id or local JSON/JSONL; None -> ``OpenMLRL/arXiv_abstract``)."""
    return load_rows(source or HUB_ID, split, limit, normalize, "field 'abstract_text' (list of sentences or text)")


def build(num_agents: int = 2, **args: Any) -> WritingEnv:
    """The arXiv environment; ``args`` are ``env.args`` (preset, prompts, single_prompt, marker, reward)."""
    return build_env(TASK, num_agents, args)


register_env("arxiv", EnvEntry(build, load_items,
                               "arXiv: expand an abstract into an introduction (1-3 agents, one section each)"))
