"""The OpenAI-compatible endpoint over a team generator (FastAPI routes; the server is ``server.py``).

Routes, at the root (serving) or under ``/episodes/<id>`` (a training run's program run, ``episodes.py``)::

    GET  /v1/models                 the agents, by name
    POST /v1/chat/completions       an agent's chat completion (messages rendered with its chat template)
    POST /v1/completions            an agent's text completion (its tokenizer, no template)

A request is parsed (``requests.py``: which sampling fields are honoured, clamped, refused), queued in the
batcher (``batcher.py``: concurrent requests for one agent share one generate call), finished (the request's
``max_tokens`` and stop strings cut the sampled ids) and, in an episode, recorded. Every refusal and failure is
an OpenAI-style error body (``errors.py``). Bounds: the body size (``max_body_bytes``, 413), the time a request
waits for its completion (``request_timeout_s``, 504), an API key on every request when one is set (401). A
client that disconnects while its completion is queued or generated is counted on its episode and its result
is thrown away (the run never saw it, so it is not trained on).
"""
from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Request  # (the gateway extra; route annotations are resolved at module level)
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from .batcher import Batcher, GeneratorFailed, Raw, Slot
from .chat import parse_tool_calls
from .episodes import Call, Episode, Episodes
from .errors import GatewayError, bad_request
from .requests import CallSpec, find_agent, parse_chat, parse_completion

MAX_BODY_BYTES = 4 << 20
"""Default bound on a request body (4 MiB: a long chat history fits; a runaway one is refused with 413)."""


@dataclass
class Finished:
    """A completion after the request's ``max_tokens`` and stop strings."""

    ids: list[int]
    text: str
    truncated: bool
    finish_reason: str
    logprobs: list[float] | None


def finish(tokenizer, raw: Raw, max_tokens: int, stop: tuple[str, ...]) -> Finished:
    """Cut ``raw`` at ``max_tokens`` tokens, then at the first token whose text reaches a stop string (the stop
    string and what follows leave the text; the ids end at that token). Ids are cut, never re-tokenised."""
    ids, lp, text, truncated = raw.ids, raw.logprobs, raw.text, raw.truncated
    reason = "length" if truncated else "stop"
    if len(ids) > max_tokens:
        ids, lp = ids[:max_tokens], (lp[:max_tokens] if lp is not None else None)
        text, truncated, reason = tokenizer.decode(ids, skip_special_tokens=True), True, "length"
    if stop and any(s in text for s in stop):
        for t in range(1, len(ids) + 1):
            part = tokenizer.decode(ids[:t], skip_special_tokens=True)
            hits = [part.find(s) for s in stop if s in part]
            if hits:
                return Finished(ids[:t], part[:min(hits)], False, "stop", lp[:t] if lp is not None else None)
    return Finished(ids, text, truncated, reason, lp)


class Gateway:
    """What the routes serve: the team, its generator (through the batcher), and the episodes of a training
    rollout (None: serving a team, no record kept).

    Args:
        agents: the team; ``model`` names an agent.
        generator: the team generator (``generation/team.py``).
        episodes: a training rollout's episodes: only ``/episodes/<id>/v1`` answers completions, and each
            call is recorded; None: ``/v1`` serves.
        generate_kwargs: passed to every generator call (batch size, adapters, shared prefixes).
        window_s: the batcher's window (``batcher.py``).
        api_key: checked on every request (``Authorization: Bearer <key>``) when set.
        max_body_bytes: the largest request body.
        request_timeout_s: the longest a request waits for its completion.
    """

    def __init__(self, agents: Sequence, generator: Callable, episodes: Episodes | None = None,
                 generate_kwargs: dict | None = None, window_s: float = 0.01, api_key: str | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES, request_timeout_s: float = 600.0):
        self.agents, self.episodes = list(agents), episodes
        self.batcher = Batcher(self.agents, generator, generate_kwargs, window_s,
                               live=episodes.live if episodes is not None else None)
        self.api_key, self.max_body_bytes, self.request_timeout_s = api_key, max_body_bytes, request_timeout_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closing = False
        self.requests = 0
        self.disconnects = 0
        self._seq = 0
        if episodes is not None:
            episodes.on_change = self.poke

    def poke(self) -> None:
        """From any thread: let the batcher look again (a run ended, so fewer runs may be left to wait for)."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.batcher.poke)
            except RuntimeError:  # the loop stopped meanwhile
                pass

    def shut(self) -> None:
        """From any thread: refuse new requests and fail the waiting ones (503)."""
        self.closing = True
        if self.episodes is not None:
            self.episodes.close_all()
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.batcher.cancel_all,
                                          GatewayError(503, "the gateway is shutting down", "server_error"))
            except RuntimeError:
                pass

    # ------------------------------------------------------------- one request
    async def complete(self, request, eid: str | None, chat: bool) -> dict:
        self.loop = asyncio.get_running_loop()
        if self.closing:
            raise GatewayError(503, "the gateway is shutting down", "server_error")
        ep = self._episode(eid)
        body = await read_json(request, self.max_body_bytes)
        spec = (parse_chat if chat else parse_completion)(body, self.agents, training=ep is not None)
        self.requests += 1
        self._seq += 1
        seq = (self.episodes.next_seq(ep) if ep is not None and self.episodes is not None else self._seq,)
        key = ep.key if ep is not None else ()
        slots = [Slot(spec.agent, p, spec.greedy, key + seq + (c,), ep.id if ep else None, self.loop.create_future())
                 for c, p in enumerate(pr for pr in spec.prompts for _ in range(spec.n))]
        self.batcher.submit(slots)
        raws = await self._wait(request, slots, ep)
        tok = self.agents[spec.agent].tokenizer
        done = [finish(tok, r, spec.max_tokens, spec.stop) for r in raws]
        if ep is not None and self.episodes is not None:
            calls = [Call(spec.agent, s.prompt, f.ids, f.text, f.truncated, f.logprobs, s.order[len(key):])
                     for s, f in zip(slots, done)]
            if not self.episodes.record(ep, calls):
                raise GatewayError(404, f"episode {ep.id[:8]}... closed while this call was served (its run ended "
                                        f"or timed out); the call is not recorded", code="episode_not_found")
        return (chat_body if chat else completion_body)(spec, self.agents[spec.agent].name, done)

    def _episode(self, eid: str | None) -> Episode | None:
        if self.episodes is None:
            if eid is not None:
                raise GatewayError(404, "this endpoint serves a team, not training episodes: use /v1",
                                   code="episode_not_found")
            return None
        if eid is None:
            raise GatewayError(404, "this endpoint serves a training run: call the program run's own base URL "
                                    "(/episodes/<id>/v1), so the call is recorded", code="episode_not_found")
        return self.episodes.get(eid)

    async def _wait(self, request, slots: list[Slot], ep: Episode | None) -> list[Raw]:
        gathered: asyncio.Future = asyncio.gather(*[s.future for s in slots])
        watch: asyncio.Future = asyncio.ensure_future(disconnected(request))
        try:
            done, _ = await asyncio.wait({gathered, watch}, timeout=self.request_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if gathered in done:
            try:
                return list(gathered.result())
            except GeneratorFailed as e:
                if ep is not None and self.episodes is not None:
                    self.episodes.note(ep, failure=e)
                raise GatewayError(500, str(e), "server_error") from None
        for s in slots:  # not generated yet: dropped from the queue; being generated: thrown away
            s.future.cancel()
        gathered.cancel()
        if watch in done:
            self.disconnects += 1
            if ep is not None and self.episodes is not None:
                self.episodes.note(ep, disconnect=True)
            raise GatewayError(499, "the client closed the request before its completion", code="client_closed")
        raise GatewayError(504, f"no completion within {self.request_timeout_s:g} s", "server_error",
                           code="timeout")

    def models(self) -> dict:
        return {"object": "list", "data": [model_card(a.name) for a in self.agents]}


def model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "comarl"}


async def disconnected(request) -> None:
    """Returns when the client goes away (the body was read; the next ASGI message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def read_json(request, limit: int) -> Any:
    """The request body as JSON (400 when it is not; 413 past ``limit`` bytes, counted as it streams in)."""
    size = 0
    chunks = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise GatewayError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from None


def _usage(spec: CallSpec, done: list[Finished]) -> dict:
    prompt = sum(len(p) for p in spec.prompts)
    completion = sum(len(f.ids) for f in done)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_body(spec: CallSpec, model: str, done: list[Finished]) -> dict:
    choices = []
    for c, f in enumerate(done):
        message: dict[str, Any] = {"role": "assistant", "content": f.text}
        reason = f.finish_reason
        if spec.tools:
            content, calls = parse_tool_calls(f.text)
            if calls:
                message = {"role": "assistant", "content": content, "tool_calls": calls}
                reason = "tool_calls"
        choices.append({"index": c, "message": message, "finish_reason": reason, "logprobs": None})
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": _usage(spec, done)}


def completion_body(spec: CallSpec, model: str, done: list[Finished]) -> dict:
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": [{"index": c, "text": f.text, "finish_reason": f.finish_reason,
                                         "logprobs": None} for c, f in enumerate(done)],
            "usage": _usage(spec, done)}


def build_app(gateway: Gateway):
    """The FastAPI application of ``gateway`` (no docs pages; every error in the OpenAI shape)."""
    app = FastAPI(title="comarl gateway", docs_url=None, redoc_url=None, openapi_url=None)

    def error(e: GatewayError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        return JSONResponse(e.body(), status_code=e.status, headers=headers)

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, e: GatewayError):
        return error(e)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, e: HTTPException):
        kind = "not_found" if e.status_code == 404 else "method_not_allowed" if e.status_code == 405 else None
        return error(GatewayError(e.status_code, f"{request.method} {request.url.path}: {e.detail}", code=kind))

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        if gateway.api_key is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {gateway.api_key}".encode()):
                return error(GatewayError(401, "missing or wrong API key (Authorization: Bearer <key>)",
                                          "authentication_error", code="invalid_api_key"))
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > gateway.max_body_bytes:
            return error(GatewayError(413, f"the request body is larger than {gateway.max_body_bytes} bytes",
                                      code="request_too_large"))
        return await call_next(request)

    async def run(request: Request, eid: str | None, chat: bool):
        try:
            return JSONResponse(await gateway.complete(request, eid, chat))
        except GatewayError as e:
            return error(e)
        except Exception as e:  # a bug here must still answer, and say what it was
            return error(GatewayError(500, f"{type(e).__name__}: {e}", "server_error"))

    def models(eid: str | None) -> dict:
        gateway._episode(eid) if eid is not None else None  # an episode's listing: the episode must be open
        return gateway.models()

    def model(eid: str | None, name: str) -> dict:
        models(eid)
        return model_card(gateway.agents[find_agent(gateway.agents, name)].name)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await run(request, None, True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await run(request, None, False)

    @app.post("/episodes/{eid}/v1/chat/completions")
    async def episode_chat(request: Request, eid: str):
        return await run(request, eid, True)

    @app.post("/episodes/{eid}/v1/completions")
    async def episode_completions(request: Request, eid: str):
        return await run(request, eid, False)

    @app.get("/v1/models")
    async def list_models():
        return models(None)

    @app.get("/v1/models/{name:path}")
    async def get_model(name: str):
        return model(None, name)

    @app.get("/episodes/{eid}/v1/models")
    async def episode_models(eid: str):
        return models(eid)

    @app.get("/episodes/{eid}/v1/models/{name:path}")
    async def episode_model(eid: str, name: str):
        return model(eid, name)

    return app


__all__ = ["Finished", "Gateway", "MAX_BODY_BYTES", "build_app", "chat_body", "completion_body", "finish"]
