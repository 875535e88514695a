"""One turn of a coding environment, the same for every preset and benchmark (``presets/records.py``)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..base import EnvState, Transition
from .presets.records import Branch, NextTurn


def step_batch(preset: Any, settings: Any, runner: Any, num_agents: int, states: Sequence[EnvState],
               responses: Sequence[Sequence[str]],
               followups: Callable[[Any, Sequence[Branch]], list[NextTurn]] | None = None) -> list[Transition]:
    """Score ``len(states)`` joint actions with ``preset`` (a ``FunctionPreset`` or ``ClassPreset``): attempts,
    their jobs in one ``runner.run`` call, scores, and one ``followups(settings, branches)`` call (default
    ``preset.followups``) for the branches that go on.

    A branch ends (``done``, no next state) when every test passed or ``settings.max_turns`` is reached.
    """
    if len(states) != len(responses):
        raise ValueError(f"step_batch got {len(states)} states and {len(responses)} joint responses")
    for resp in responses:
        if len(resp) != num_agents:
            raise ValueError(f"joint action has {len(resp)} responses, environment has {num_agents} agents")
    attempts = [preset.attempt(settings, s.item, r) for s, r in zip(states, responses)]
    reports = runner.run([preset.job(settings, s.item, a) for s, a in zip(states, attempts)])
    scored = [preset.score(settings, s.item, a, rep) for s, a, rep in zip(states, attempts, reports)]
    out: list[Transition | None] = [
        Transition(sc.reward, True, None, sc.metrics) if sc.passed_all or s.turn + 1 >= settings.max_turns else None
        for s, sc in zip(states, scored)]
    cont = [i for i, t in enumerate(out) if t is None]
    if cont:
        branches = [Branch(states[i], tuple(responses[i]), attempts[i], reports[i], scored[i]) for i in cont]
        nexts = (followups or preset.followups)(settings, branches)
        for i, b, (prompts, info) in zip(cont, branches, nexts, strict=True):
            out[i] = Transition(b.scored.reward, False, b.state.advanced(b.responses, prompts, info), b.scored.metrics)
    return out  # type: ignore[return-value]
