"""The expert of feedback mode ``expert_edits``: a helper model that proposes edits for each agent.

The paper asked a hosted model (Claude, DeepSeek, Qwen3-Coder) for a JSON
object ``{"aux": edits, "main": edits}`` about the joint program. Here the
expert is a helper of the run (``helpers:`` in a config, docs/helpers.md): a
Hugging Face causal LM on its own device or a hosted endpoint (OpenAI, Anthropic),
built and placed by the Team and handed to the environment as a
``seams.TextGenerator``; this module only asks and parses. When an answer
holds no JSON object with those keys after ``retries`` tries, the agents get
no edits (as in the paper).
"""
from __future__ import annotations

import json
import re
from typing import Mapping, Sequence

from ...core.seams import TextGenerator

_JSON = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", re.DOTALL)

EXPERT_PROMPT = """You review code that two agents wrote together for this task:
{prompt}
One agent writes the helper `{helper}`, the other the entry point `{entry_point}`.
Propose edits for each agent. If a function is missing, give a short correct version of it; if both exist,
give brief edits that would make the unit tests pass; if nothing needs to change, say "Perfect! No changes needed!".
Answer with JSON only: {{"aux": "<edits for the helper>", "main": "<edits for the main function>"}}
The current code:
{code}
"""


def last_json_edits(text: str) -> tuple[str, str] | None:
    """(helper edits, main edits) from the last JSON object in ``text`` that parses; None if none does."""
    for candidate in reversed(_JSON.findall(text or "")):
        try:
            obj = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return str(obj.get("aux", "")), str(obj.get("main", ""))
    return None


class Expert:
    """The edits an injected helper model writes for each request (see module docstring).

    Args:
        generate: the helper (``seams.TextGenerator``: prompts -> one text each), built and placed by the Team
            from ``helpers:`` (a local model or a hosted endpoint); a test passes any function.
        retries: tries per request until its answer holds the JSON edits (``env.args.expert_retries``).
    """

    def __init__(self, generate: TextGenerator, retries: int = 3):
        if not callable(generate):
            raise ValueError("env.args.expert: the environment takes a built helper (prompts -> texts); in a config, "
                             "name a helper of helpers: (docs/helpers.md)")
        if retries < 1:
            raise ValueError(f"env.args.expert_retries: must be >= 1, got {retries}")
        self.generate, self.retries = generate, retries

    def edits(self, requests: Sequence[Mapping[str, str]]) -> list[tuple[str, str]]:
        """(helper edits, main edits) per request (keys: prompt, helper, entry_point, code)."""
        out: list[tuple[str, str] | None] = [None] * len(requests)
        for _ in range(self.retries):
            todo = [i for i, o in enumerate(out) if o is None]
            if not todo:
                break
            texts = self.generate([EXPERT_PROMPT.format(**requests[i]) for i in todo])
            if len(texts) != len(todo):
                raise RuntimeError(f"the expert helper returned {len(texts)} texts for {len(todo)} prompts")
            for i, text in zip(todo, texts):
                out[i] = last_json_edits(text)
        return [o if o is not None else ("", "") for o in out]
