"""Writer -> editor on TL;DR: the writer's concise summary, then the editor's detailed one written from it.

The TL;DR environment's reward scores the pair (concise, detailed) as it does for two parallel writers
(length ratio, unique words, overlap bands; ``env.args.preset``), so the editor, who reads the concise
summary, can keep the two parts in proportion and say more in other words. Registered as
``tldr_editor``; ``env.args`` are TL;DR's, plus ``editor_prompt`` (``{text}``: the post, ``{draft}``: the
writer's summary).
"""
from __future__ import annotations

from typing import Any, Mapping

from ...core.stages import Stage, StageGraph
from ..base import EnvState
from ..registry import EnvEntry, register_env
from ..writing import tldr

EDITOR = (
    "Write a detailed summary of the Reddit post below. A colleague wrote the concise summary shown after it; "
    "yours should be two to three times as long, add the context, reasons and details that it leaves out, "
    "and use your own words rather than repeating its phrasing.\n\n{text}\n\nConcise summary by your "
    "colleague:\n{draft}\n\nDetailed summary:"
)


class WriterEditorEnv:
    """TL;DR with the detailed writer (agent 1) reading the concise writer's summary (agent 0)."""

    num_agents = 2
    max_turns = 1

    def __init__(self, num_agents: int = 2, editor_prompt: str = EDITOR, **args: Any):
        if num_agents != 2:
            raise ValueError(f"tldr_editor needs 2 agents (writer, editor), the config has {num_agents}")
        if "{draft}" not in editor_prompt or "{text}" not in editor_prompt:
            raise ValueError("env.args.editor_prompt must contain {text} (the post) and {draft} (the writer's summary)")
        self.env = tldr.build(2, **args)
        self.editor_prompt = editor_prompt
        self.stages = StageGraph((Stage((0,)), Stage((1,))), names=("Writer", "Editor"))

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        return self.env.reset(item)

    def stage_prompt(self, state: EnvState, agent: int, inputs: Mapping[int, str]) -> str:
        return self.editor_prompt.replace("{text}", state.item["text"]).replace("{draft}", inputs[0].strip())

    def step_batch(self, states, responses):
        return self.env.step_batch(states, responses)

    def summarize(self, records) -> dict[str, Any]:
        return self.env.summarize(records)

    def render_table(self, summary: dict[str, Any]) -> str:
        import json

        return json.dumps(summary, indent=2, default=str)[:4000]


register_env("tldr_editor", EnvEntry(lambda num_agents=2, **args: WriterEditorEnv(num_agents, **args), tldr.load_items,
                                     "TL;DR: a writer's concise summary, then an editor's detailed one (2 stages)"))
