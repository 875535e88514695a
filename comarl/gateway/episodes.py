"""Episodes: one per program run, each with its own base URL and its own record of calls.

A run's client talks to ``/episodes/<id>/v1``; every call the gateway answers there is recorded token by token
(:class:`Call`: the agent, the prompt ids the policy saw, the completion ids it sampled, the engine's log-probs).
Ids are random (``secrets.token_hex``), so one run cannot reach another's record by guessing; a closed episode
(its program returned, timed out or failed) answers 404, so nothing a late request does reaches a record that
was already read. The registry is shared by the server's loop and the trainer's thread (one lock).
"""
from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field

from .errors import GatewayError


@dataclass
class Call:
    """One completion of one call, as the policy sampled it.

    Attributes:
        agent: the agent's index.
        prompt_ids: the prompt ids exactly as the policy saw them (chat template applied by comarl).
        ids: the completion ids (through EOS, or cut at the request's ``max_tokens`` / stop string).
        text: the completion's text as the program received it (before tool calls were parsed out).
        truncated: it ended at a token limit (no EOS, no stop string).
        logprobs: per completion token, the engine's log-prob (vLLM), else None.
        seq: the order of the call within its run (arrival; choices of one request in a row).
    """

    agent: int
    prompt_ids: list[int]
    ids: list[int]
    text: str
    truncated: bool
    logprobs: list[float] | None
    seq: tuple


@dataclass
class Episode:
    """One program run: its key (item, run), its calls, and whether it still takes requests."""

    id: str
    key: tuple
    calls: list[Call] = field(default_factory=list)
    open: bool = True
    disconnects: int = 0
    failure: BaseException | None = None
    """The team generator failed while serving this run (the machine, not the program)."""
    _seq: int = 0

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq


class Episodes:
    """Open and closed episodes of one gateway (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_id: dict[str, Episode] = {}
        self.on_change = lambda: None  # the gateway pokes its batcher when a run ends

    def open(self, key: tuple) -> Episode:
        with self._lock:
            ep = Episode(secrets.token_hex(16), key)
            self._by_id[ep.id] = ep
            return ep

    def get(self, eid: str) -> Episode:
        """The open episode ``eid``; 404 for an unknown or closed one."""
        with self._lock:
            ep = self._by_id.get(eid)
            if ep is None or not ep.open:
                raise GatewayError(404, f"episode {eid[:8]}... is {'closed (its run ended)' if ep else 'unknown'}",
                                   "invalid_request_error", None, "episode_not_found")
            return ep

    def next_seq(self, ep: Episode) -> int:
        with self._lock:
            return ep.next_seq()

    def record(self, ep: Episode, calls: list[Call]) -> bool:
        """Add ``calls`` to an open episode; False when it closed meanwhile (nothing recorded)."""
        with self._lock:
            if not ep.open:
                return False
            ep.calls.extend(calls)
            return True

    def note(self, ep: Episode, disconnect: bool = False, failure: BaseException | None = None) -> None:
        with self._lock:
            ep.disconnects += int(disconnect)
            if failure is not None and ep.failure is None:
                ep.failure = failure

    def close(self, ep: Episode) -> None:
        with self._lock:
            ep.open = False
        self.on_change()

    def forget(self, ep: Episode) -> None:
        """Drop a closed episode (its record was read): a later request for it is answered 404 unknown."""
        with self._lock:
            ep.open = False
            self._by_id.pop(ep.id, None)

    def live(self) -> int:
        """Runs still running (open episodes)."""
        with self._lock:
            return sum(ep.open for ep in self._by_id.values())

    def close_all(self) -> None:
        with self._lock:
            for ep in self._by_id.values():
                ep.open = False


__all__ = ["Call", "Episode", "Episodes"]
