"""The demo's writing task with one fault injected at a chosen step, for the restart tests (test_restarts*.py).

A config names it by import path (``env.name: faulty_env:build``, with ``tests/e2e`` on ``PYTHONPATH``) and reads
its items from a JSON-lines file (``data.train.source``, each item numbered ``i``), so the runs go through the real
``comarl train`` command line, under ``--max-restarts`` and torchrun. The items come in order (no shuffle) and each
is trained on once in the test runs, so the step that holds item ``item`` (and the rank it falls to) is fixed;
when ``step_batch`` gets it, the environment:

* ``kill``: kills its own process with SIGKILL (kill -9 of one rank);
* ``hang``: sleeps for an hour (a hung step: the watchdog must stop the run);
* ``crash``: raises :class:`InjectedCrash`, a ``BaseException`` that no error policy catches (a crash with a
  traceback, as a bug in the trainer would give).

With ``marker`` (a file path) the fault fires once: the first time, it creates the marker; a restarted run finds
it and runs on. Without a marker it fires every time (a run that fails the same way again).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path


class InjectedCrash(BaseException):
    """A crash no ``env.on_error`` policy catches (those catch ``Exception``)."""


class FaultyEnv:
    def __init__(self, inner, fault: str, item: int, marker: str | None):
        self.inner, self.fault, self.item, self.marker = inner, fault, item, marker
        self.num_agents = inner.num_agents

    def __getattr__(self, name):  # the rest of the task (its stages, its metrics) is the writing task's
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def reset(self, item):
        return self.inner.reset(item)

    def step_batch(self, states, responses):
        if any(st.item["i"] == self.item for st in states) and self._fires():
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "crash":
                raise InjectedCrash(f"injected crash on item {self.item}")
        return self.inner.step_batch(states, responses)

    def _fires(self) -> bool:
        if self.marker is None:
            return True
        if Path(self.marker).exists():
            return False
        Path(self.marker).write_text(f"{self.fault} on item {self.item}\n")
        return True


def build(num_agents: int, fault: str = "none", item: int = -1, marker: str | None = None):
    from comarl.envs.registry import get_env

    return FaultyEnv(get_env("demo_writing").build(num_agents=num_agents), fault, item, marker)
