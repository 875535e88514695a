"""A small HTTP server on 127.0.0.1 that speaks the wire format of OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages, for the hosted-helper tests: the official clients talk to it as to the real APIs.

It answers each request from a script (a status per request, in order, then 200s), echoes a reply that names the
prompt, reports fixed token counts, records every request (path, headers, body) and the most requests it held at
once. It binds 127.0.0.1 on a free port, bounds request bodies and lives in a ``with`` block (stopped on exit).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS_IN, TOKENS_OUT = 11, 7
MAX_BODY = 1 << 20

ERRORS = {401: ("authentication_error", "invalid x-api-key / Incorrect API key provided"),
          403: ("permission_error", "this key may not use this model"),
          404: ("not_found_error", "The model `no-such-model` does not exist"),
          429: ("rate_limit_error", "Rate limit reached, retry later"),
          500: ("api_error", "internal error"),
          503: ("overloaded_error", "the server is overloaded")}


def prompt_of(path: str, body: dict) -> str:
    if path.endswith("/responses"):
        return str(body.get("input"))
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content", "")
    return content if isinstance(content, str) else json.dumps(content)


def reply_body(path: str, body: dict, text: str) -> dict:
    model = body.get("model", "")
    if path.endswith("/chat/completions"):
        return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": TOKENS_IN, "completion_tokens": TOKENS_OUT,
                          "total_tokens": TOKENS_IN + TOKENS_OUT}}
    if path.endswith("/responses"):
        return {"id": "resp_1", "object": "response", "created_at": 0, "model": model, "status": "completed",
                "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "usage": {"input_tokens": TOKENS_IN, "output_tokens": TOKENS_OUT,
                          "total_tokens": TOKENS_IN + TOKENS_OUT, "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "stop_reason": "end_turn",
            "stop_sequence": None, "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": TOKENS_IN, "output_tokens": TOKENS_OUT}}


def error_body(path: str, status: int) -> dict:
    kind, message = ERRORS.get(status, ("api_error", f"status {status}"))
    if path.endswith("/messages"):
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class FakeAPI:
    """The fake endpoint (module docstring).

    Args:
        statuses: the status of the first requests, in order (e.g. ``[429, 503]``: two failures, then 200s);
            ``always``: every request gets this status instead.
        reply: ``prompt -> text`` of a 200.
        hold_s: how long each request is held (to see how many are in flight at once).
    """

    def __init__(self, statuses=(), always: int | None = None, reply=None, hold_s: float = 0.0):
        self.statuses, self.always = list(statuses), always
        self.reply = reply or (lambda prompt: f"echo: {prompt}")
        self.hold_s = hold_s
        self.requests: list[dict] = []
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # a connection that says nothing is dropped

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n > MAX_BODY:
                    return self._send(413, {"error": {"message": "too large"}})
                body = json.loads(self.rfile.read(n) or b"{}")
                with api._lock:
                    api.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    status = api.always or (api.statuses.pop(0) if api.statuses else 200)
                    api.in_flight += 1
                    api.most_in_flight = max(api.most_in_flight, api.in_flight)
                try:
                    time.sleep(api.hold_s)
                    if status != 200:
                        return self._send(status, error_body(self.path, status))
                    self._send(200, reply_body(self.path, body, api.reply(prompt_of(self.path, body))))
                finally:
                    with api._lock:
                        api.in_flight -= 1

            def _send(self, status: int, obj: dict):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def __enter__(self) -> "FakeAPI":
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-hosted-api", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
