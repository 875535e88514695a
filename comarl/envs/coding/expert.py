"""The expert of feedback mode ``expert_edits``: a causal LM that proposes edits for each agent.

The paper asked a hosted model (Claude, DeepSeek, Qwen3-Coder) for a JSON
object ``{"aux": edits, "main": edits}`` about the joint program. Here the
expert is any Hugging Face causal LM given by hub id or local path (or
``"tiny"`` in tests), loaded once, lazily, and sampled at temperature 0.3
as the paper did; when its answer
holds no JSON object with those keys after ``retries`` tries, the agents get
no edits (as in the paper).
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from comarl.models.agents import Agent

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
    """A local or hub causal LM that writes edits (see module docstring).

    Args:
        model: hub id, local path or "tiny" (``AgentConfig.model``).
        max_new_tokens / retries: generation length and tries per request.
        agent: other ``AgentConfig`` fields (dtype, device, chat_template, model_kwargs, ...).
    """

    def __init__(self, model: str, max_new_tokens: int = 512, retries: int = 3, agent: Mapping[str, Any] | None = None):
        if not isinstance(model, str) or not model:
            raise ValueError("env.args.expert.model: a hub id, local path or 'tiny' is required")
        if retries < 1:
            raise ValueError(f"env.args.expert.retries: must be >= 1, got {retries}")
        self.spec = {"model": model, "max_new_tokens": max_new_tokens, "temperature": 0.3, **dict(agent or {})}
        self.retries = retries
        self._agent: Agent | None = None

    def _load(self):
        if self._agent is None:
            from comarl.models.agents import AgentConfig, build_agents
            try:
                cfg = AgentConfig(**self.spec)
            except TypeError as e:
                raise ValueError(f"env.args.expert: {e}") from e
            self._agent = build_agents([cfg])[0]
        return self._agent

    def edits(self, requests: Sequence[Mapping[str, str]]) -> list[tuple[str, str]]:
        """(helper edits, main edits) per request (keys: prompt, helper, entry_point, code)."""
        from comarl.generation.hf import generate
        agent = self._load()
        out: list[tuple[str, str] | None] = [None] * len(requests)
        for _ in range(self.retries):
            todo = [i for i, o in enumerate(out) if o is None]
            if not todo:
                break
            ids = agent.encode_prompts([EXPERT_PROMPT.format(**requests[i]) for i in todo])
            texts = generate(agent, ids, 1).texts
            for i, text in zip(todo, texts):
                out[i] = last_json_edits(text)
        return [o if o is not None else ("", "") for o in out]
