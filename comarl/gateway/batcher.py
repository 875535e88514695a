"""Concurrent requests -> one team-generator call: the gateway's batching.

Every request becomes one *slot* per completion it asks for (``n`` choices, several prompts). Slots wait in one
queue; a *flush* takes every waiting slot and makes one team-generator call (``generation/team.py``:
``generator(agents, prompt_ids, k, greedy=...) -> [Completions per agent]``) per sampling kind (sampled,
greedy), in a worker thread so the server goes on accepting requests meanwhile. A flush starts

- at once (after ``SETTLE_S``) when every live program run of a training rollout is waiting on a call
  (``live()``: the open episodes; no run can send more until it hears back, so waiting longer only costs time), or
- ``window_s`` after the first waiting slot (serving; a run busy with a tool), or
- when ``max_slots`` are waiting.

Within a flush, slots are ordered by their key (item, run, call) and each agent's identical prompts are grouped:
when every group of the flush has the same size c (K runs of B items asking one agent the same prompt), the call
is ``generator(agents, unique prompts, k=c)``, exactly the rollout's call (one prompt, K samples; shared
prefixes prefilled once); otherwise every slot is a prompt of its own with k = 1. Greedy slots with one prompt
share one greedy decode. A slot whose request was cancelled (client gone, episode closed) before its flush is
dropped; one cancelled during its flush is generated and thrown away.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

SETTLE_S = 0.002
"""How long a due flush waits for calls already on their way (every run waiting: a run that asked two agents at
once may have one call still in flight)."""


@dataclass
class Raw:
    """One completion as the generator returned it: ids through the first EOS, truncation, text, engine log-probs."""

    ids: list[int]
    truncated: bool
    text: str
    logprobs: list[float] | None = None


@dataclass
class Slot:
    """One completion waiting to be generated."""

    agent: int
    prompt: list[int]
    greedy: bool
    order: tuple
    episode: str | None
    future: asyncio.Future


class GeneratorFailed(RuntimeError):
    """The team generator raised while serving a flush (the machine or the engine, not the request)."""


class Batcher:
    """The queue and its flushes (module docstring); lives on the server's event loop.

    Args:
        agents: the team, in order.
        generator: the team generator.
        generate_kwargs: passed to every generator call (``batch_size``, ``batch_adapters``, ``share_prefix``).
        window_s: the longest a slot waits for others before its flush.
        live: number of program runs still running (None: serving, no runs).
        max_slots: a flush starts once this many slots wait.
    """

    def __init__(self, agents: Sequence, generator: Callable, generate_kwargs: dict | None = None,
                 window_s: float = 0.01, live: Callable[[], int] | None = None, max_slots: int = 1024):
        self.agents, self.generator = list(agents), generator
        self.kwargs = dict(generate_kwargs or {})
        self.window_s, self.live, self.max_slots = window_s, live, max_slots
        self.pending: list[Slot] = []
        self.flushing = self.settling = False
        self.timer: asyncio.TimerHandle | None = None
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="comarl-gateway-generate")
        self.calls = 0  # team-generator calls made
        self.slots_generated = 0
        self.loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------- on the server's loop
    def submit(self, slots: list[Slot]) -> None:
        self.loop = asyncio.get_running_loop()
        self.pending.extend(slots)
        self.poke()

    def poke(self) -> None:
        """Start a flush if one is due; else make sure the window's timer runs."""
        if self.flushing or not self.pending or self.loop is None:
            return
        waiting = [s for s in self.pending if not s.future.done()]
        if len(waiting) >= self.max_slots:
            self._start()
        elif self._all_runs_wait(waiting):
            if not self.settling:  # a moment for calls already on their way (a run asking two agents at once)
                if self.timer is not None:
                    self.timer.cancel()
                self.settling = True
                self.timer = self.loop.call_later(SETTLE_S, self._on_timer)
        elif self.timer is None:
            self.timer = self.loop.call_later(self.window_s, self._on_timer)

    def _all_runs_wait(self, waiting: list[Slot]) -> bool:
        live = self.live() if self.live is not None else 0
        return live > 0 and len({s.episode for s in waiting if s.episode is not None}) >= live

    def _on_timer(self) -> None:
        self.timer = None
        if self.pending and not self.flushing:
            self._start()

    def _start(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.settling = False
        self.flushing = True
        assert self.loop is not None
        self.loop.create_task(self._flush())

    async def _flush(self) -> None:
        batch, self.pending = [s for s in self.pending if not s.future.done()], []
        try:
            if batch:
                batch.sort(key=lambda s: s.order)
                assert self.loop is not None
                try:
                    results = await self.loop.run_in_executor(self.executor, self._generate, batch)
                except Exception as e:
                    failure = GeneratorFailed(f"the team generator failed: {type(e).__name__}: {e}")
                    failure.__cause__ = e
                    for s in batch:
                        if not s.future.done():
                            s.future.set_exception(failure)
                else:
                    for s, r in zip(batch, results):
                        if not s.future.done():
                            s.future.set_result(r)
        finally:
            self.flushing = False
            self.poke()

    def cancel_all(self, reason: BaseException) -> None:
        """Fail every waiting slot (shutting down)."""
        for s in self.pending:
            if not s.future.done():
                s.future.set_exception(reason)
        self.pending = []

    # ------------------------------------------------------------- in the worker thread
    def _generate(self, batch: list[Slot]) -> list[Raw]:
        out: list[Any] = [None] * len(batch)
        for greedy in (False, True):
            chosen = [b for b, s in enumerate(batch) if s.greedy == greedy]
            if chosen:
                self._call(batch, chosen, greedy, out)
        return out

    def _call(self, batch: list[Slot], chosen: list[int], greedy: bool, out: list) -> None:
        n = len(self.agents)
        groups: list[dict[tuple, list[int]]] = [{} for _ in range(n)]  # agent -> prompt -> its slots, in order
        for b in chosen:
            groups[batch[b].agent].setdefault(tuple(batch[b].prompt), []).append(b)
        sizes = {len(members) for g in groups for members in g.values()}
        shared = greedy or len(sizes) == 1  # one prompt per group (k = the common size, or 1 greedy)
        k = 1 if greedy or not shared else sizes.pop()
        rows: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # agent -> (slot, row of its Completions)
        prompts: list[list[list[int]]] = [[] for _ in range(n)]
        for i in range(n):
            for p, (prompt, members) in enumerate(groups[i].items()):
                if shared:
                    prompts[i].append(list(prompt))
                    rows[i] += [(b, p if greedy else p * k + j) for j, b in enumerate(members)]
                else:
                    for b in members:
                        rows[i].append((b, len(prompts[i])))
                        prompts[i].append(list(prompt))
        comps = self.generator(self.agents, prompts, k, greedy=greedy, **self.kwargs)
        self.calls += 1
        for i in range(n):
            engine = getattr(comps[i], "logprobs", None) if prompts[i] else None
            for b, r in rows[i]:
                out[b] = Raw(list(comps[i].ids[r]), bool(comps[i].truncated[r]), comps[i].texts[r],
                             list(engine[r]) if engine is not None else None)
                self.slots_generated += 1

    def close(self, wait_s: float = 10.0) -> None:
        """Stop the worker thread: at once when idle, after the generate call in flight (at most ``wait_s``)."""
        closer = threading.Thread(target=self.executor.shutdown, kwargs={"wait": True, "cancel_futures": True},
                                  name="comarl-gateway-close", daemon=True)
        closer.start()
        closer.join(wait_s)


__all__ = ["Batcher", "GeneratorFailed", "Raw", "Slot"]
