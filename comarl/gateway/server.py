"""The gateway's HTTP server: uvicorn in a thread of its own (training) or in the foreground (``comarl serve``).

It binds 127.0.0.1 unless told otherwise, and another host needs an API key (checked on every request).
:meth:`GatewayServer.stop` refuses new requests, fails the waiting ones, closes every connection (uvicorn's
graceful shutdown, bounded to ``shutdown_s``) and joins the thread; a server is also a context manager.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from .app import Gateway, build_app

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_host(host: str, api_key: str | None) -> None:
    """Refuse a non-loopback host without an API key."""
    if host not in LOOPBACK and not api_key:
        raise ValueError(f"host {host!r} is reachable from other machines: give an API key (--api-key, or "
                         f"COMARL_API_KEY) so that every request is checked, or bind 127.0.0.1")


def uvicorn_config(app: Any, host: str, port: int, shutdown_s: float):
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                          timeout_keep_alive=5, timeout_graceful_shutdown=max(1, int(round(shutdown_s))),
                          h11_max_incomplete_event_size=64 * 1024)


class GatewayServer:
    """``gateway`` served over HTTP from a background thread.

    Args:
        gateway: what to serve.
        host: the address to bind (127.0.0.1 by default; another needs ``gateway.api_key``).
        port: the port (0: a free one, read back from :attr:`port`).
        shutdown_s: how long :meth:`stop` lets open requests finish before closing their connections.
    """

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0, shutdown_s: float = 2.0):
        check_host(host, gateway.api_key)
        self.gateway, self.host = gateway, host
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._config = uvicorn_config(build_app(gateway), host, port, shutdown_s)
        self.port = port
        self.shutdown_s = shutdown_s

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "GatewayServer":
        import uvicorn

        self._server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self._server.run, name="comarl-gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the gateway could not start on {self.host}:{self.port} (is the port in use?)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the gateway did not start within {timeout_s:g} s")
            time.sleep(0.005)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Refuse new requests, fail the waiting ones, close the connections, join the thread (idempotent)."""
        self.gateway.shut()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(self.shutdown_s + 10)
            if self._thread.is_alive():  # a connection that would not close: force it
                self._server.force_exit = True
                self._thread.join(5)
        self.gateway.batcher.close()
        self._server, self._thread = None, None

    def __enter__(self) -> "GatewayServer":
        return self.start() if self._server is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["GatewayServer", "LOOPBACK", "check_host", "uvicorn_config"]
