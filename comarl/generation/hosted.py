"""A hosted model as a helper: OpenAI Chat Completions, OpenAI Responses or Anthropic Messages, through the official
``openai`` and ``anthropic`` clients (``pip install 'comarl[hosted]'``; imported when a hosted helper is built).

``HostedModel(name, spec)`` is a ``seams.TextGenerator``: ``model(prompts) -> texts``, one request per prompt (the
prompt is the user message; ``system_prompt`` the system message or instructions), at most ``concurrency`` in flight.

- **The key** is read once from the environment variable ``api_key_env`` names and handed to the client; it is
  never stored on this object, written in a config dump, a log line, an error message or a run folder.
- **Retries**: a 429, a 5xx (or 408/409), a timeout or a lost connection is retried ``max_retries`` times, after
  ``backoff_s``, ``2 * backoff_s``, ... (at most 60 s each); the clients' own retries are off so that the count
  is ours (``helpers/<name>/retries``).
- **One-line errors** (``HostedError``, a user error: the CLI prints it and exits with status 2): the endpoint
  refused the key (401/403), does not know the model (404), refused the request (another 4xx), or failed after
  every retry; each names the helper, the API, the URL and the model.
- **Counters**: requests, retries, input and output tokens as the endpoint reports them (``usage``), and their
  cost at ``price_in_per_m`` / ``price_out_per_m`` USD per million tokens: :meth:`HostedModel.metrics`, logged every
  step as ``helpers/<name>/...``.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from ..core.config_io import ConfigError, UserError
from .helper_settings import EndpointSettings, HelperSpec

RETRY_STATUSES = (408, 409, 429)
"""Statuses retried besides every 5xx (request timeout, conflict, rate limit)."""
MAX_BACKOFF_S = 60.0


class HostedError(UserError, RuntimeError):
    """A hosted helper's endpoint refused or failed a request (one line, naming the helper and the endpoint)."""


@dataclass
class Reply:
    """One completion and the tokens the endpoint counted for it."""

    text: str
    tokens_in: int
    tokens_out: int


def _chat(client: Any, s: EndpointSettings, spec: HelperSpec, prompt: str) -> Reply:
    messages = ([{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []) + \
        [{"role": "user", "content": prompt}]
    extra = {"top_p": spec.top_p} if spec.top_p < 1 else {}
    r = client.chat.completions.create(model=s.model, messages=messages, max_tokens=spec.max_new_tokens,
                                       temperature=spec.temperature, extra_body=s.extra_body or None, **extra)
    text = (r.choices[0].message.content or "") if r.choices else ""
    u = r.usage
    return Reply(text, int(getattr(u, "prompt_tokens", 0) or 0), int(getattr(u, "completion_tokens", 0) or 0))


def _responses(client: Any, s: EndpointSettings, spec: HelperSpec, prompt: str) -> Reply:
    extra: dict[str, Any] = {"top_p": spec.top_p} if spec.top_p < 1 else {}
    if spec.system_prompt:
        extra["instructions"] = spec.system_prompt
    r = client.responses.create(model=s.model, input=prompt, max_output_tokens=spec.max_new_tokens,
                                temperature=spec.temperature, extra_body=s.extra_body or None, **extra)
    u = r.usage
    return Reply(r.output_text or "", int(getattr(u, "input_tokens", 0) or 0), int(getattr(u, "output_tokens", 0) or 0))


def _anthropic(client: Any, s: EndpointSettings, spec: HelperSpec, prompt: str) -> Reply:
    """Anthropic Messages: no temperature or top_p is sent (the current client and API have none; a model that
    takes them gets them from ``extra_body``)."""
    extra: dict[str, Any] = {"system": spec.system_prompt} if spec.system_prompt else {}
    r = client.messages.create(model=s.model, max_tokens=spec.max_new_tokens,
                               messages=[{"role": "user", "content": prompt}], extra_body=s.extra_body or None, **extra)
    text = "".join(getattr(b, "text", "") for b in r.content if getattr(b, "type", "") == "text")
    u = r.usage
    return Reply(text, int(getattr(u, "input_tokens", 0) or 0), int(getattr(u, "output_tokens", 0) or 0))


CALLS: dict[str, Callable[[Any, EndpointSettings, HelperSpec, str], Reply]] = {
    "chat": _chat, "responses": _responses, "anthropic": _anthropic}


def read_key(s: EndpointSettings, where: str, environ=os.environ) -> str:
    """The API key from the variable ``s.api_key_env`` names ("none" when it is null: a local server)."""
    var = s.key_variable
    if var is None:
        return "none"
    key = environ.get(var)
    if not key:
        raise ConfigError(f"{where}.api_key_env: the environment variable {var} is not set (it holds the "
                          f"{s.api} endpoint's API key; null for a local server without one)")
    return key


def make_client(s: EndpointSettings, key: str) -> Any:
    """The official client of ``s.api``, its own retries off (ours are counted)."""
    if s.api == "anthropic":
        try:
            import anthropic
        except ImportError:
            raise ConfigError("helpers: endpoint api anthropic needs the anthropic client: "
                              "pip install 'comarl[hosted]'") from None
        return anthropic.Anthropic(api_key=key, base_url=s.base_url, timeout=s.timeout_s, max_retries=0)
    try:
        import openai
    except ImportError:
        raise ConfigError(f"helpers: endpoint api {s.api} needs the openai client: pip install 'comarl[hosted]'") \
            from None
    return openai.OpenAI(api_key=key, base_url=s.base_url, timeout=s.timeout_s, max_retries=0)


def _first_line(e: BaseException) -> str:
    body = getattr(e, "body", None)
    msg = None
    if isinstance(body, dict):  # OpenAI: {"message": ...} or {"error": {"message": ...}}; Anthropic: {"error": {...}}
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        msg = inner.get("message") if isinstance(inner, dict) else None
    text = str(msg or e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def _is_connection_error(e: BaseException) -> bool:
    """A client's lost connection or timeout (``APIConnectionError`` and its ``APITimeoutError``, in both clients)."""
    return any(c.__name__ == "APIConnectionError" for c in type(e).__mro__)


class HostedModel:
    """A hosted helper (module docstring).

    Args:
        name: the helper's name (``helpers.<name>``; errors and metric keys carry it).
        spec: its settings (``spec.endpoint`` set).
        environ: where the key is read (the process environment).
        sleep: how a retry waits (a test's records the waits).
    """

    def __init__(self, name: str, spec: HelperSpec, environ=os.environ, sleep: Callable[[float], None] = time.sleep):
        if spec.endpoint is None:
            raise ConfigError(f"helpers.{name}: a hosted helper needs endpoint")
        self.name, self.spec, self.settings = name, spec, spec.endpoint
        self.where = f"helpers.{name}.endpoint"
        self._call = CALLS[self.settings.api]
        self._client = make_client(self.settings, read_key(self.settings, self.where, environ))  # holds the key
        self._sleep = sleep
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.counts = {"requests": 0, "retries": 0, "tokens_in": 0, "tokens_out": 0}

    def __repr__(self) -> str:  # never the client (it holds the key)
        return f"HostedModel({self.name!r}, api={self.settings.api!r}, model={self.settings.model!r})"

    @property
    def url(self) -> str:
        return str(getattr(self._client, "base_url", self.settings.base_url or "(default)"))

    def __call__(self, prompts: Sequence[str]) -> list[str]:
        """One completion per prompt, ``concurrency`` requests at a time; the first request that fails for good
        raises (``HostedError``)."""
        if not prompts:
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix=f"comarl-helper-{self.name}")
        return list(self._pool.map(self._one, prompts))

    def _one(self, prompt: str) -> str:
        s = self.settings
        what = f"{self.where}: {s.api} endpoint {self.url}, model {s.model!r}"
        for attempt in range(s.max_retries + 1):
            try:
                reply = self._call(self._client, s, self.spec, prompt)
            except Exception as e:  # the clients' errors, classified by status (both clients name them alike)
                status = getattr(e, "status_code", None)
                if status in (401, 403):
                    raise HostedError(f"{what}: the key was refused ({status}: {_first_line(e)}); check the key in "
                                      f"{s.key_variable or '(no key given)'}") from None
                if status == 404:
                    raise HostedError(f"{what}: unknown model or URL (404: {_first_line(e)}); check "
                                      f"{self.where}.model and {self.where}.base_url") from None
                retriable = (status is not None and (status >= 500 or status in RETRY_STATUSES)) or \
                    (status is None and _is_connection_error(e))
                if not retriable:
                    if status is None:
                        raise
                    raise HostedError(f"{what}: request refused ({status}: {_first_line(e)})") from None
                if attempt == s.max_retries:
                    why = f"{status if status is not None else type(e).__name__}: {_first_line(e)}"
                    raise HostedError(f"{what}: failed after {attempt + 1} tries (last: {why}); raise "
                                      f"{self.where}.max_retries or timeout_s, or check the server") from None
                with self._lock:
                    self.counts["retries"] += 1
                self._sleep(min(s.backoff_s * 2 ** attempt, MAX_BACKOFF_S))
                continue
            with self._lock:
                self.counts["requests"] += 1
                self.counts["tokens_in"] += reply.tokens_in
                self.counts["tokens_out"] += reply.tokens_out
            return reply.text
        raise AssertionError("unreachable")

    @property
    def cost_usd(self) -> float:
        s = self.settings
        return (self.counts["tokens_in"] * s.price_in_per_m + self.counts["tokens_out"] * s.price_out_per_m) / 1e6

    def metrics(self) -> dict[str, float]:
        """The run's totals so far: ``helpers/<name>/{requests, retries, tokens_in, tokens_out, cost_usd}``."""
        with self._lock:
            c = dict(self.counts)
        return {f"helpers/{self.name}/requests": float(c["requests"]),
                f"helpers/{self.name}/retries": float(c["retries"]),
                f"helpers/{self.name}/tokens_in": float(c["tokens_in"]),
                f"helpers/{self.name}/tokens_out": float(c["tokens_out"]),
                f"helpers/{self.name}/cost_usd": self.cost_usd}

    @contextlib.contextmanager
    def use(self) -> Iterator["HostedModel"]:
        """Nothing to keep loaded: the endpoint holds the model."""
        yield self

    def release(self) -> None:
        """Nothing is held between uses."""

    def close(self) -> None:
        """Stop the request threads and close the client's connections."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        close = getattr(self._client, "close", None)
        if close is not None:
            close()


__all__ = ["CALLS", "HostedError", "HostedModel", "Reply", "make_client", "read_key"]
