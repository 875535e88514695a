"""Request bodies -> validated calls, and what each OpenAI sampling field does here.

=====================  ===========================================================================================
field                  here
=====================  ===========================================================================================
``model``              an agent's name (``agents.<i>.name``); another is 404 ``model_not_found``
``temperature``        honoured when absent or equal to the agent's ``temperature``; ``0`` decodes greedily (serving
                       only: a training run's log-probs assume the agent's temperature); any other value is refused
``top_p``              honoured when absent or equal to the agent's ``top_p``; refused otherwise
``max_tokens``         clamped: at most the agent's ``max_new_tokens`` (``max_completion_tokens`` alike); the
                       completion is cut there (``finish_reason: length``)
``n``                  honoured, 1..16 (each choice is one more sample)
``stop``               honoured: a string or up to 4; the completion ends at the first token whose text reaches a
                       stop string, which is left out of the content (``finish_reason: stop``)
``seed``               refused unless null: a batch shares one random stream (the run's ``train.run.seed``)
``tools``              honoured for templates that render them (``tool_choice`` auto or none)
``stream``, ``logprobs``, ``logit_bias``, non-zero penalties, a non-text ``response_format``: refused
=====================  ===========================================================================================

Other fields (``user``, ``metadata``, ``store``, ``parallel_tool_calls``...) are ignored. A prompt that leaves
no room for the agent's ``max_new_tokens`` in its context is 400 ``context_length_exceeded``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .chat import encode_chat, renders_tools
from .errors import GatewayError, bad_request

MAX_N = 16
MAX_STOP = 4


@dataclass
class CallSpec:
    """One validated request.

    Attributes:
        agent: the agent's index.
        prompts: the prompt ids (one per prompt; chat: one).
        n: choices per prompt.
        max_tokens: tokens kept of each completion (<= the agent's ``max_new_tokens``).
        stop: stop strings.
        greedy: decode greedily (``temperature: 0`` when serving).
        tools: the request's tools (chat; tool calls are parsed back), or None.
        chat: a chat completion (else a text completion).
    """

    agent: int
    prompts: list[list[int]]
    n: int = 1
    max_tokens: int = 0
    stop: tuple[str, ...] = ()
    greedy: bool = False
    tools: list | None = None
    chat: bool = True
    prompt_texts: list[str] = field(default_factory=list)


def find_agent(agents, model: Any) -> int:
    if not isinstance(model, str) or not model:
        raise bad_request("model must name an agent (a string); GET /v1/models lists them", param="model")
    for i, a in enumerate(agents):
        if a.name == model:
            return i
    raise GatewayError(404, f"The model `{model}` does not exist; this team has "
                            f"{', '.join(repr(a.name) for a in agents)}", "invalid_request_error", "model",
                       "model_not_found")


def _int(body: dict, key: str, lo: int, hi: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise bad_request(f"{key} must be an integer {span}, got {v!r}", param=key)
    return v


def _sampling(body: dict, agent, training: bool) -> tuple[bool, int, int, tuple[str, ...]]:
    """(greedy, n, max_tokens, stop) of a request for ``agent`` (module docstring); refusals name the field."""
    cfg, where = agent.config, f"agents.{agent.index}"
    greedy = False
    t = body.get("temperature")
    if t is not None:
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise bad_request(f"temperature must be a number, got {t!r}", param="temperature")
        if t == 0 and cfg.temperature != 0:
            if training:
                raise bad_request(f"temperature 0: a training run samples {agent.name!r} at {where}.temperature "
                                  f"({cfg.temperature}), which its log-probs assume; leave temperature out",
                                  param="temperature")
            greedy = True
        elif abs(float(t) - cfg.temperature) > 1e-9:
            raise bad_request(f"temperature {t}: {agent.name!r} samples at {where}.temperature ({cfg.temperature}) "
                              f"{'' if training else 'or 0 (greedy) '}; leave it out or change {where}.temperature",
                              param="temperature")
    p = body.get("top_p")
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or abs(float(p) - cfg.top_p) > 1e-9):
        raise bad_request(f"top_p {p!r}: {agent.name!r} samples with {where}.top_p ({cfg.top_p}); leave it out",
                          param="top_p")
    n = _int(body, "n", 1, MAX_N) or 1
    asked = _int(body, "max_completion_tokens", 1)
    asked = asked if asked is not None else _int(body, "max_tokens", 1)
    max_tokens = min(asked, cfg.max_new_tokens) if asked is not None else cfg.max_new_tokens
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str) and stop:
        stops = (stop,)
    elif isinstance(stop, list) and 0 < len(stop) <= MAX_STOP and all(isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise bad_request(f"stop must be a non-empty string or a list of 1..{MAX_STOP} of them", param="stop")
    if body.get("seed") is not None:
        raise bad_request("seed: requests are sampled in batches from one random stream (the run's train.run.seed); "
                          "leave seed out", param="seed")
    for key in ("stream", "logprobs", "echo"):
        if body.get(key):
            raise bad_request(f"{key} is not served by the comarl gateway; leave it out or false", param=key)
    if body.get("top_logprobs"):
        raise bad_request("top_logprobs is not served", param="top_logprobs")
    if body.get("logit_bias"):
        raise bad_request("logit_bias is not served", param="logit_bias")
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise bad_request(f"{key} is not served (only 0): the policy's distribution is what the loss assumes",
                              param=key)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad_request("response_format: only {'type': 'text'} is served", param="response_format")
    return greedy, n, max_tokens, stops


def check_context(agent, prompt: list[int]) -> None:
    """400 ``context_length_exceeded`` when the prompt and the agent's ``max_new_tokens`` do not fit its context."""
    limit = getattr(getattr(agent.model, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and len(prompt) + agent.config.max_new_tokens > limit:
        raise bad_request(f"This model's maximum context length is {limit} tokens. However, you requested "
                          f"{len(prompt) + agent.config.max_new_tokens} tokens ({len(prompt)} in the prompt, "
                          f"{agent.config.max_new_tokens} for the completion: agents.{agent.index}.max_new_tokens). "
                          f"Please reduce the length of the messages.", param="messages",
                          code="context_length_exceeded")


def parse_chat(body: Any, agents, training: bool) -> CallSpec:
    """A ``/v1/chat/completions`` body -> :class:`CallSpec`; ``training``: inside an episode of a training run."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    i = find_agent(agents, body.get("model"))
    agent = agents[i]
    greedy, n, max_tokens, stop = _sampling(body, agent, training)
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise bad_request("tool_choice: only 'auto' and 'none' are served", param="tool_choice")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") == "function" and
                                                  isinstance(t.get("function"), dict) for t in tools):
            raise bad_request("tools must be a list of {type: 'function', function: {...}}", param="tools")
        if not renders_tools(agent):
            raise bad_request(f"model {agent.name!r}'s chat template does not render tools (a Qwen2.5 or Hermes style "
                              f"template does)", param="tools")
        if choice == "none" or not tools:
            tools = None
    prompt = encode_chat(agent, body.get("messages"), tools)
    check_context(agent, prompt)
    return CallSpec(i, [prompt], n, max_tokens, stop, greedy, tools, chat=True)


def parse_completion(body: Any, agents, training: bool) -> CallSpec:
    """A ``/v1/completions`` body (``prompt``: a string, a list of strings, or a list of token ids) ->
    :class:`CallSpec`; the text is tokenised as the rollout does for an agent without a chat template."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    i = find_agent(agents, body.get("model"))
    agent = agents[i]
    greedy, n, max_tokens, stop = _sampling(body, agent, training)
    raw = body.get("prompt")
    tok = agent.tokenizer
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, list) and raw and all(isinstance(t, int) and not isinstance(t, bool) for t in raw):
        if any(t < 0 or t >= len(tok) for t in raw):
            raise bad_request(f"prompt: token ids must be in 0..{len(tok) - 1}", param="prompt")
        prompts = [list(raw)]
    elif isinstance(raw, list) and raw and all(isinstance(t, str) for t in raw) and len(raw) * n <= MAX_N:
        prompts = [list(tok(t, add_special_tokens=True)["input_ids"]) for t in raw]
    else:
        raise bad_request(f"prompt must be a string, a list of strings (at most {MAX_N} completions per request "
                          f"with n) or a list of token ids", param="prompt")
    if any(not p for p in prompts):
        raise bad_request("prompt is empty", param="prompt")
    for p in prompts:
        check_context(agent, p)
    return CallSpec(i, prompts, n, max_tokens, stop, greedy, None, chat=False)


__all__ = ["CallSpec", "MAX_N", "check_context", "find_agent", "parse_chat", "parse_completion"]
