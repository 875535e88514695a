"""TL;DR: two agents summarise a Reddit post, one concisely, one in detail.

Hub data ``trl-lib/tldr``: rows with ``prompt`` (``"SUBREDDIT: r/...\\nTITLE:
...\\nPOST: ...\\nTL;DR:"``) and ``completion`` (the reference TL;DR). Items get
``text`` (the prompt without the trailing ``TL;DR:``) for the templates; the
``completion`` is the ROUGE reference in :meth:`WritingEnv.summarize`.

Agents: 2 (concise, detailed) or 1 (both parts, split at ``marker``).
"""
from __future__ import annotations

from importlib import resources
from typing import Any

from ..registry import EnvEntry, register_env
from . import paper_reward as PR
from . import reward as R
from ..loading import load_rows
from .env import WritingEnv, WritingTask, build_env
from .presets import DefaultPreset, PaperPreset

HUB_ID = "trl-lib/tldr"

PROMPT_CONCISE = (
    "Summarize the Reddit post below in one or two short sentences. Keep only its main point.\n\n"
    "{text}\n\nConcise summary:"
)
PROMPT_DETAILED = (
    "Write a detailed summary of the Reddit post below. Another writer gives a one-sentence summary; "
    "yours should be two to three times as long, add the context, reasons and details that a short "
    "summary leaves out, and use your own words rather than repeating its phrasing.\n\n"
    "{text}\n\nDetailed summary:"
)
PROMPT_SINGLE = (
    "Summarize the Reddit post below in two parts. First write a concise summary in one or two "
    "sentences. Then write a line containing only {marker}. Then write a detailed summary, two to three "
    "times as long, that adds the context and details in different words.\n\n"
    "{text}\n\nConcise summary:"
)

# preset "paper": the reference's two roles, constraints and output format, in our own words
# (the verbatim prompts are the formatters in OpenMLRL/LLM_Collab_Writing train_magrpo.py)
PAPER_PROMPT_CONCISE = (
    "Summarize the post below concisely.\n\nPost:\n{text}\n\nGuidelines:\n"
    "- Keep it short and focused: one sentence, or a few at most.\n"
    "- Stay factual and informative.\n"
)
PAPER_PROMPT_DETAILED = (
    "Write a detailed summary of the post below.\n\nPost:\n{text}\n\nGuidelines:\n"
    "- Use a rich vocabulary with many different words.\n"
    "- Link your sentences with transition words so that the text flows.\n"
)

DEFAULT_REWARD = R.RewardConfig(
    min_words=8, max_words=256,
    length_ratio=R.Band(low=2.0, high=3.0, zero_below=1.2, zero_above=5.0),
    unique_ratio=R.Band(low=1.5, high=3.0, zero_below=1.0, zero_above=5.0),
    overlap=R.Band(low=0.1, high=0.4, zero_below=0.0, zero_above=0.7),
)

TASK = WritingTask(
    name="tldr",
    roles={2: ("concise", "detailed")},
    presets={
        "default": DefaultPreset(prompts={2: (PROMPT_CONCISE, PROMPT_DETAILED)},
                                 single_prompt=PROMPT_SINGLE, reward=DEFAULT_REWARD),
        "paper": PaperPreset(prompts=(PAPER_PROMPT_CONCISE, PAPER_PROMPT_DETAILED), reward=PR.TLDR),
    },
    reference_field="completion",
)


def normalize(index: int, row: dict[str, Any], source: str) -> dict[str, Any]:
    """A TL;DR row -> item with ``prompt``, ``completion`` and ``text``."""
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{source}: row {index} has no text field 'prompt' (fields: {sorted(row)})")
    completion = row.get("completion") or ""
    if not isinstance(completion, str):
        raise ValueError(f"{source}: row {index}: 'completion' must be text, got {type(completion).__name__}")
    text = prompt.rstrip()
    if text.endswith("TL;DR:"):
        text = text[: -len("TL;DR:")].rstrip()
    return {**row, "prompt": prompt, "completion": completion.strip(), "text": text}


def load_items(source: str | None, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """TL;DR items from ``source`` (hub id or local JSON/JSONL; None -> ``trl-lib/tldr``)."""
    return load_rows(source or HUB_ID, split, limit, normalize, "fields 'prompt' and 'completion'")


def build(num_agents: int = 2, **args: Any) -> WritingEnv:
    """The TL;DR environment; ``args`` are ``env.args`` (preset, prompts, single_prompt, marker, reward)."""
    return build_env(TASK, num_agents, args)


def demo_items() -> list[dict[str, Any]]:
    """The 24 short posts bundled with the package (``demo_tldr.jsonl``), as items."""
    path = resources.files(__package__) / "demo_tldr.jsonl"
    with resources.as_file(path) as p:
        return load_items(str(p), "train", None)


register_env("tldr", EnvEntry(build, load_items,
                              "TL;DR: concise + detailed summaries of a Reddit post (2 agents, or 1 with a marker)"))
