"""Chat messages -> the prompt ids an agent's policy sees, and tool calls parsed back out of its text.

The prompt is rendered exactly as the rollout renders an environment's prompt (``Agent.encode_prompts``): the
agent's chat template with its ``system_prompt`` first (unless the messages bring their own system message),
``add_generation_prompt``, then the tokenizer without added special tokens. One user message therefore gives
the same ids as ``agent.encode_prompts([text])`` (tested), and training never re-tokenises text: the ids captured
are these.

Tools (Qwen2.5 / Hermes style): the request's ``tools`` go to the template (``apply_chat_template(tools=...)``),
which must render them (its source mentions ``tools``); the completion's ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` blocks come back as OpenAI ``tool_calls`` and the rest of the text as ``content``.
Assistant messages holding ``tool_calls`` and ``tool`` messages are passed to the template as Hugging Face
templates expect them (arguments as a dict).
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Any

from .errors import bad_request

ROLES = ("system", "developer", "user", "assistant", "tool")
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def has_template(agent) -> bool:
    """The agent renders prompts with a chat template (its config asks for one and its tokenizer has one)."""
    return bool(agent.config.chat_template and getattr(agent.tokenizer, "chat_template", None))


def renders_tools(agent) -> bool:
    """The agent's chat template renders a ``tools`` list (Qwen2.5, Hermes and most tool-calling templates)."""
    template = getattr(agent.tokenizer, "chat_template", None)
    return has_template(agent) and isinstance(template, str) and "tools" in template


def content_text(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for n, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request(f"{where}.content[{n}]: only text parts are served (type 'text' with a string "
                                  f"'text')", param=f"{where}.content")
            parts.append(part["text"])
        return "".join(parts)
    raise bad_request(f"{where}.content must be a string or a list of text parts, got {type(content).__name__}",
                      param=f"{where}.content")


def _arguments(raw: Any, where: str) -> Any:
    """A tool call's arguments as the template wants them: a dict from OpenAI's JSON string where it parses."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    if raw is None or isinstance(raw, dict):
        return raw or {}
    raise bad_request(f"{where}: arguments must be a JSON string", param=where)


def template_messages(messages: Any, system_prompt: str | None) -> list[dict]:
    """OpenAI chat messages -> Hugging Face template messages (checked; ``developer`` is a system message)."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list of {role, content} objects", param="messages")
    out: list[dict] = []
    for n, m in enumerate(messages):
        where = f"messages[{n}]"
        if not isinstance(m, dict):
            raise bad_request(f"{where} must be an object with role and content", param=where)
        role = m.get("role")
        if role not in ROLES:
            raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", param=f"{where}.role")
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": content_text(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise bad_request(f"{where}.tool_calls must be a list", param=f"{where}.tool_calls")
            msg["tool_calls"] = []
            for c, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise bad_request(f"{where}.tool_calls[{c}] needs function.name", param=f"{where}.tool_calls")
                msg["tool_calls"].append({"type": "function", "id": call.get("id"), "function": {
                    "name": fn["name"], "arguments": _arguments(fn.get("arguments"), f"{where}.tool_calls[{c}]")}})
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
            if m.get("name") is not None:
                msg["name"] = m["name"]
        out.append(msg)
    if system_prompt and out[0]["role"] != "system":
        out.insert(0, {"role": "system", "content": system_prompt})
    return out


def encode_chat(agent, messages: Any, tools: list | None = None) -> list[int]:
    """The prompt ids of ``messages`` for ``agent`` (module docstring). An agent without a chat template takes
    one user message, as raw text (as the rollout does)."""
    if not has_template(agent):
        msgs = template_messages(messages, None)
        if len(msgs) != 1 or msgs[0]["role"] != "user" or tools:
            raise bad_request(f"model {agent.name!r} has no chat template (agents.{agent.index}.chat_template, or "
                              f"its tokenizer has none): send one user message without tools, or use /v1/completions",
                              param="messages")
        return agent.encode_prompts([msgs[0]["content"]])[0]
    msgs = template_messages(messages, agent.config.system_prompt)
    try:
        text = agent.tokenizer.apply_chat_template(msgs, tools=tools or None, tokenize=False,
                                                   add_generation_prompt=True)
    except Exception as e:  # a template that raises on these messages (jinja's raise_exception: role order...)
        raise bad_request(f"model {agent.name!r}'s chat template refused these messages: {type(e).__name__}: {e}",
                          param="messages") from None
    return list(agent.tokenizer(text, add_special_tokens=False)["input_ids"])


def parse_tool_calls(text: str) -> tuple[str | None, list[dict]]:
    """``(content, tool_calls)`` of a completion: each well-formed ``<tool_call>{json}</tool_call>`` block (an
    object with a string ``name`` and object or string ``arguments``) becomes an OpenAI tool call; the text around
    them (stripped; None when empty and there are calls) is the content. A malformed block stays in the text."""
    calls: list[dict] = []
    kept: list[str] = []
    last = 0
    for m in _TOOL_CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        if not isinstance(args, (dict, str)):
            continue
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": obj["name"], "arguments": args if isinstance(args, str) else
                                   json.dumps(args, ensure_ascii=False)}})
        kept.append(text[last:m.start()])
        last = m.end()
    if not calls:
        return text, []
    kept.append(text[last:])
    content = "".join(kept).strip()
    return (content or None), calls


__all__ = ["content_text", "encode_chat", "has_template", "parse_tool_calls", "renders_tools", "template_messages"]
