"""The small local server of ``comarl view`` (the standard library's threading HTTP server).

It binds 127.0.0.1 only and answers three kinds of GET: the page (``/``), its assets (``/assets/<name>``) and
what is new in the runs (``/api/poll?cursor=...``, ``runs.poll``). Every request is bounded: a URL of at most
``MAX_URL`` bytes, no body, a ``Host`` naming this server (a web page elsewhere cannot reach it through a DNS name
that points here), at most ``MAX_BUSY`` requests at once, ``REQUEST_TIMEOUT_S`` per connection, and an answer of
at most ``runs.BUDGET`` bytes of rows (the page asks again while there is more). The server stops itself when no
request came for ``idle_timeout`` seconds (an open page polls every few seconds, so this is after its last tab
closed) or after ``max_lifetime`` seconds in all.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from . import page
from .runs import Run, check_cursor, new_cursor, poll, run_info

HOST = "127.0.0.1"
MAX_URL = 8192
MAX_BUSY = 8
REQUEST_TIMEOUT_S = 15
IDLE_TIMEOUT_S = 900
"""Default: stop after 15 minutes without a request."""
MAX_LIFETIME_S = 12 * 3600
"""Default: stop after 12 hours whatever happens."""


class ViewServer(ThreadingHTTPServer):
    """The server: the runs it shows, its limits, and when it was last asked something."""

    daemon_threads = True

    def __init__(self, runs: list[Run], port: int = 0, idle_timeout: float = IDLE_TIMEOUT_S,
                 max_lifetime: float = MAX_LIFETIME_S):
        super().__init__((HOST, port), Handler)
        self.runs, self.idle_timeout, self.max_lifetime = runs, idle_timeout, max_lifetime
        self.started = self.last_request = time.monotonic()
        self.busy = threading.BoundedSemaphore(MAX_BUSY)
        self.stopped_because: str | None = None
        self._page = page.served_page()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"

    def allowed_hosts(self) -> set[str]:
        return {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    def serve(self) -> str:
        """Serve until the idle timeout or the lifetime ends (or :meth:`stop`); returns why it stopped."""
        watch = threading.Thread(target=self._watch, daemon=True)
        watch.start()
        try:
            self.serve_forever(poll_interval=0.25)
        finally:
            self.server_close()
        return self.stopped_because or "stopped"

    def stop(self, why: str = "stopped") -> None:
        self.stopped_because = self.stopped_because or why
        self.shutdown()

    def _watch(self) -> None:
        while self.stopped_because is None:
            now = time.monotonic()
            if now - self.last_request > self.idle_timeout:
                threading.Thread(target=self.stop, args=(f"no request for {self.idle_timeout:g} s",)).start()
                return
            if now - self.started > self.max_lifetime:
                threading.Thread(target=self.stop, args=(f"lifetime of {self.max_lifetime:g} s reached",)).start()
                return
            time.sleep(0.2)


class Handler(BaseHTTPRequestHandler):
    """GET only, bounded (see the module docstring); quiet."""

    server: ViewServer
    timeout = REQUEST_TIMEOUT_S
    server_version = "comarl-view"
    sys_version = ""

    def log_message(self, format, *args) -> None:  # noqa: A002 (the standard library's name)
        pass

    def do_GET(self) -> None:
        if not self.server.busy.acquire(blocking=False):
            return self._send(503, b"busy", "text/plain")
        try:
            self.server.last_request = time.monotonic()
            self._get()
        finally:
            self.server.busy.release()

    def do_HEAD(self) -> None:
        self._send(405, b"", "text/plain")

    def do_POST(self) -> None:
        self._send(405, b"GET only", "text/plain")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

    def _get(self) -> None:
        if len(self.path) > MAX_URL:
            return self._send(414, b"URL too long", "text/plain")
        if self.headers.get("Host", "") not in self.server.allowed_hosts():
            return self._send(403, b"unknown Host", "text/plain")
        if self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get("Transfer-Encoding"):
            return self._send(413, b"no body expected", "text/plain")
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            return self._send(200, self.server._page, "text/html; charset=utf-8")
        if url.path.startswith("/assets/"):
            name = url.path[len("/assets/"):]
            if name not in page.ASSETS:
                return self._send(404, b"no such asset", "text/plain")
            return self._send(200, page.asset(name), page.ASSETS[name] + "; charset=utf-8")
        if url.path == "/api/poll":
            return self._poll(parse_qs(url.query).get("cursor", [None])[0])
        self._send(404, b"not found", "text/plain")

    def _poll(self, raw: str | None) -> None:
        runs = self.server.runs
        try:
            cursor = check_cursor(json.loads(raw), runs) if raw else new_cursor(runs)
        except ValueError:
            return self._send(400, b"bad cursor", "text/plain")
        data = poll(runs, cursor)
        data["runs"] = [run_info(r) for r in runs]
        data["live"] = True
        body = json.dumps(data, ensure_ascii=False, allow_nan=False).encode("utf-8")
        self._send(200, body, "application/json; charset=utf-8")

    def _send(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' "
                                                    "'unsafe-inline'; img-src 'self' data:; connect-src 'self'")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def start(runs: list[Run], port: int = 0, idle_timeout: float = IDLE_TIMEOUT_S,
          max_lifetime: float = MAX_LIFETIME_S) -> tuple[ViewServer, threading.Thread]:
    """A server serving in a background thread (tests, notebooks); ``server.stop()`` ends it."""
    server = ViewServer(runs, port, idle_timeout, max_lifetime)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    return server, thread


__all__ = ["HOST", "Handler", "ViewServer", "start"]
