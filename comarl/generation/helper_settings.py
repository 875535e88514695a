"""The settings of a helper model (``helpers.<name>`` in a config), one docstring line per field.

A helper is a frozen model the run uses but never trains: the coding expert of ``expert_edits``, the comparator of
the iterative preference rounds, the judge that scores joint responses. It is either a Hugging Face causal LM
(``model``) placed on its own ``device``, or a hosted endpoint (``endpoint``: OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages). ``generation/helpers.py`` builds them; docs/helpers.md shows the keys in use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..core.config_io import ConfigError

APIS = ("chat", "responses", "anthropic")
"""chat: OpenAI Chat Completions (``POST /chat/completions``: OpenAI, vLLM, ``comarl serve`` and most servers that
say "OpenAI-compatible"); responses: OpenAI Responses (``POST /responses``); anthropic: Anthropic Messages
(``POST /v1/messages``)."""

DEFAULT_KEY_ENV = {"chat": "OPENAI_API_KEY", "responses": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


@dataclass
class EndpointSettings:
    """``helpers.<name>.endpoint``: a hosted model, called through the official ``openai`` / ``anthropic`` client
    (``pip install 'comarl[hosted]'``)."""

    api: str = "chat"
    """chat (OpenAI Chat Completions) | responses (OpenAI Responses) | anthropic (Anthropic Messages)."""
    model: str = ""
    """The model name the endpoint knows (gpt-4o-mini, claude-sonnet-4-5, an agent of comarl serve...)."""
    base_url: str | None = None
    """The API's base URL (None: the client's default, api.openai.com / api.anthropic.com); e.g.
    http://127.0.0.1:8000/v1 for comarl serve or vllm serve."""
    api_key_env: str | None = ""
    """The environment variable holding the API key ("" = OPENAI_API_KEY, or ANTHROPIC_API_KEY for anthropic;
    null = no key, for a local server). The key itself is never written in a config, a log or a run folder."""
    timeout_s: float = 60.0
    """Seconds one request may take before it counts as failed (and is retried)."""
    max_retries: int = 4
    """Retries of a request after a 429, a 5xx, a timeout or a lost connection, waiting backoff_s, 2*backoff_s, ...
    in between (auth errors and unknown models are never retried)."""
    backoff_s: float = 1.0
    """The wait before the first retry; doubled for each further one (at most 60 s)."""
    concurrency: int = 4
    """Requests in flight at once (threads); one call's prompts are spread over them."""
    price_in_per_m: float = 0.0
    """USD per million input tokens (helpers/<name>/cost_usd; 0 = not counted)."""
    price_out_per_m: float = 0.0
    """USD per million output tokens."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Fields added to every request body as written (e.g. {top_k: 20} for a vLLM server); Anthropic Messages gets
    no temperature or top_p unless given here."""

    def validate(self, where: str) -> None:
        if self.api not in APIS:
            raise ConfigError(f"{where}.api: must be one of {list(APIS)}, got {self.api!r}")
        if not self.model:
            raise ConfigError(f"{where}.model: name the endpoint's model (e.g. gpt-4o-mini)")
        for key in ("timeout_s", "backoff_s", "price_in_per_m", "price_out_per_m"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0 or (key == "timeout_s" and value == 0):
                raise ConfigError(f"{where}.{key}: must be a {'positive' if key == 'timeout_s' else 'non-negative'} "
                                  f"number, got {value}")
        if self.max_retries < 0:
            raise ConfigError(f"{where}.max_retries: must be >= 0, got {self.max_retries}")
        if self.concurrency < 1:
            raise ConfigError(f"{where}.concurrency: must be >= 1, got {self.concurrency}")

    @property
    def key_variable(self) -> str | None:
        """The environment variable the key is read from (None: no key)."""
        if self.api_key_env is None:
            return None
        return self.api_key_env or DEFAULT_KEY_ENV[self.api]


@dataclass
class HelperSpec:
    """``helpers.<name>``: one frozen helper model, a local one (``model``) or a hosted one (``endpoint``)."""

    model: str | None = None
    """A local model: hub id, local path or "tiny" (a random test model); built like an agent, never trained."""
    endpoint: EndpointSettings | None = None
    """A hosted model instead of ``model`` (docs/helpers.md)."""
    device: str = "cpu"
    """Device of a local helper's model (cpu, cuda, cuda:1, ...): its own GPU keeps it out of the agents' memory."""
    dtype: str = "float32"
    """Weights dtype of a local helper: float32 | bfloat16 | float16."""
    free_between_uses: bool = False
    """Release a local helper's model after each use (a round's sampling, one batch of expert requests) and read
    it again at the next; false keeps it loaded for the run."""
    max_new_tokens: int = 512
    """Longest completion, in tokens (a hosted endpoint: its max_tokens / max_output_tokens)."""
    temperature: float = 0.3
    """Sampling temperature (0 = greedy; 0.3 is the coding paper's expert's)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off)."""
    system_prompt: str | None = None
    """A system message before every prompt (a local helper: with its chat template)."""
    chat_template: bool = True
    """A local helper wraps each prompt in its tokenizer's chat template when it has one."""
    seed: int = 0
    """A local helper's random stream: a tiny model's weights and its sampling are drawn from it, not from the
    run's stream."""
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of a local helper's from_pretrained (or of the tiny model)."""

    def validate(self, where: str) -> None:
        if (self.model is None) == (self.endpoint is None):
            raise ConfigError(f"{where}: give either model (a local model) or endpoint (a hosted one), "
                              f"{'not both' if self.model is not None else 'one of them'}")
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigError(f"{where}.model: a hub id, local path or 'tiny' is required")
        if self.endpoint is not None:
            self.endpoint.validate(f"{where}.endpoint")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"{where}.dtype: must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"{where}.max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"{where}.temperature: must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"{where}.top_p: must be in (0, 1], got {self.top_p}")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"{where}.device: a device string (cpu, cuda, cuda:1), got {self.device!r}")


def check_helper_names(helpers: dict, where: str = "helpers") -> None:
    """Helper names are plain words (they appear in metric keys: ``helpers/<name>/tokens_in``)."""
    import re

    for name in helpers:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ConfigError(f"{where}: helper name {name!r} must be letters, digits, '_', '-' or '.'")


__all__ = ["APIS", "EndpointSettings", "HelperSpec", "check_helper_names"]
