"""Helpers of the gateway and program tests: tiny agents (one with a Hermes-style tool template) and a team
generator that records its calls and answers with scripted texts."""
from __future__ import annotations

import threading

from comarl.models.agents import AgentConfig, build_agents
from comarl.generation.hf import Completions

TOOL_TEMPLATE = (
    "{%- if tools %}<|system|>\nYou may call these functions:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "Call one as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|endoftext|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}<|assistant|>\n{% for c in m.tool_calls %}<tool_call>"
    "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}</tool_call>"
    "{% endfor %}<|endoftext|>\n"
    "{%- elif m.role == 'tool' %}<|user|>\n<tool_response>{{ m.content }}</tool_response><|endoftext|>\n"
    "{%- else %}<|{{ m.role }}|>\n{{ m.content }}<|endoftext|>\n{% endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>\n{% endif %}")


def team(names=("writer", "critic"), tools: bool = False, **kw):
    """Tiny agents named ``names`` (the last one renders tools when ``tools``)."""
    agents = build_agents([AgentConfig(model="tiny", name=n, max_new_tokens=kw.get("max_new_tokens", 16),
                                       system_prompt=kw.get("system_prompt") if n == "critic" else None)
                           for n in names])
    if tools:
        agents[-1].tokenizer.chat_template = TOOL_TEMPLATE
    return agents


class FakeTeam:
    """A team generator (``generation/team.py`` contract): records every call and answers
    ``reply(agent, prompt_text, j)`` for sample j of each prompt; ``gate`` (an Event) holds a call until set."""

    def __init__(self, reply=None, gate: threading.Event | None = None, fail: Exception | None = None):
        self.reply = reply or (lambda agent, prompt, j: f"{agent.name} says {j}")
        self.gate, self.fail = gate, fail
        self.calls: list[dict] = []
        self.entered = threading.Event()

    def __call__(self, agents, prompt_ids, k, greedy=False, **kwargs):
        self.calls.append({"prompts": [list(map(list, p)) for p in prompt_ids], "k": k, "greedy": greedy, **kwargs})
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(20)
        if self.fail is not None:
            raise self.fail
        out = []
        for agent, prompts in zip(agents, prompt_ids):
            tok = agent.tokenizer
            ids, texts, cut = [], [], []
            for p in prompts:
                for j in range(k):
                    c = tok(self.reply(agent, tok.decode(p), j), add_special_tokens=False)["input_ids"]
                    c = c + [tok.eos_token_id]
                    cut.append(len(c) > agent.config.max_new_tokens)
                    ids.append(c[:agent.config.max_new_tokens])
                    texts.append(tok.decode(ids[-1], skip_special_tokens=True))
            out.append(Completions(prompts, ids, cut, texts, k))
        return out
