"""Trusted side of a job with two agents' programs: the calls of the helper, brokered by the harness.

The main program's stand-in for the helper (``worker.Worker.outcall``) sends ``("outcall", name, args,
kwargs)`` to the harness; :class:`Broker` checks that only plain data crosses, calls the helper's function in
the helper's worker and answers ``("ok", result, args after, kwargs after)`` or ``("err", type name, built-in
base, args)``. It counts the calls per test and keeps each answer, so that the ablation pass
(:class:`Altered`) can answer a fresh copy of the main program with the same answers altered
(:func:`perturb`) without asking the helper: a test that passed and then fails needed the helper's result.

Standard library only: the harness loads this file by path.
"""
from __future__ import annotations

import builtins

MAX_WALK = 100_000  # values checked per crossing; a deeper or larger value is refused


def foreign(value, kinds: tuple) -> bool:
    """``value`` holds an instance of one of ``kinds`` (program references) anywhere inside, or is too big."""
    stack, seen = [value], 0
    while stack:
        v = stack.pop()
        seen += 1
        if seen > MAX_WALK:
            return True
        t = type(v)
        if t in kinds:
            return True
        if t in (list, tuple, set, frozenset):
            stack.extend(v)
        elif t is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
    return False


def _base_name(e: BaseException) -> str:
    for cls in type(e).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def _error(name: str, base: str, message: str) -> tuple:
    return ("err", name, base, (message,))


class Broker:
    """Answers the main program's calls of the helper with the helper's own answers.

    Args:
        remote: the harness's ``remote`` module; ``client``: the helper's worker (or None when it cannot serve);
        target: the helper's function (a reference) or None; ``error``: why it cannot serve.
    """

    def __init__(self, remote, client, target, name: str, error: str | None):
        self.remote, self.client, self.target, self.name, self.error = remote, client, target, name, error
        self.calls: dict[int, int] = {}
        self.answers: dict[int, list] = {}
        self.kinds = (remote.Remote, remote.RemoteValue)

    def __call__(self, main_client, name, args, kwargs) -> tuple:
        snippet = main_client.snippet
        self.calls[snippet] = self.calls.get(snippet, 0) + 1
        reply = self._answer(main_client, name, args, kwargs)
        self.answers.setdefault(snippet, []).append(reply)
        return reply

    def _answer(self, main_client, name, args, kwargs) -> tuple:
        if name != self.name or type(args) is not tuple or type(kwargs) is not dict:
            return _error("NameError", "NameError", f"name {name!r} is not defined")
        if foreign((args, kwargs), self.kinds):
            return _error("TypeError", "TypeError", f"{self.name}(): only plain data crosses to the other agent's "
                          "code (numbers, strings, lists, dicts...), not an object of this program")
        if self.target is None:
            return _error("NameError", "NameError", f"name {self.name!r} is not defined (the helper's program: "
                          f"{self.error})")
        helper = self.client
        helper.snippet, helper.deadline = main_client.snippet, main_client.deadline
        try:
            result, after = helper.request("call", self.target, args, kwargs)
        except (self.remote.RequestTimeout, self.remote.ProgramGone):
            return _error("TimeoutError", "TimeoutError", f"{self.name}(): the helper did not answer in time"
                          if helper.dead in (None, "killed after a timeout") else f"{self.name}(): the helper died")
        except self.remote.ProgramExit as e:
            return _error("RuntimeError", "RuntimeError", f"{self.name}(): the helper exited ({e})")
        except Exception as e:  # the helper's own exception, as the harness rebuilt it
            return ("err", type(e).__name__, _base_name(e), tuple(str(a) for a in e.args[:1]))
        except BaseException:  # a broken protocol: the helper is killed
            return _error("RuntimeError", "RuntimeError", f"{self.name}(): the helper broke the protocol")
        if foreign((result, after), self.kinds):
            return _error("TypeError", "TypeError", f"{self.name}() returned an object of the helper's program; "
                          "only plain data crosses between the agents' code")
        return ("ok", result) + tuple(after)

    def called(self) -> bool:
        return any(self.calls.values())


def perturb(value):
    """A value of the same kind that differs from ``value`` (what the ablation pass answers instead of it)."""
    t = type(value)
    if t is bool:
        return not value
    if t in (int, float, complex):
        return value + 1
    if t is str:
        return value[:-1] if value else "?"
    if t is bytes or t is bytearray:
        return value[:-1] if value else t(b"?")
    if t is list:
        return value[:-1] if value else [0]
    if t is tuple:
        return value[:-1] if value else (0,)
    if t is dict:
        return dict(list(value.items())[:-1]) if value else {0: 0}
    if t is set or t is frozenset:
        return t(list(value)[:-1]) if value else t({0})
    if value is None:
        return 0
    return None


class Altered:
    """The ablation pass's answers: the main pass's, in the same order per test, each result :func:`perturb`ed
    (errors repeated as they were); a call beyond those recorded answers ``None``."""

    def __init__(self, answers: dict[int, list]):
        self.answers = answers
        self.used: dict[int, int] = {}

    def __call__(self, main_client, name, args, kwargs) -> tuple:
        snippet = main_client.snippet
        k = self.used.get(snippet, 0)
        self.used[snippet] = k + 1
        recorded = self.answers.get(snippet, [])
        if k >= len(recorded):
            return ("ok", None, [None] * len(args) if type(args) is tuple else [], {})
        reply = recorded[k]
        if reply[0] != "ok":
            return reply
        return ("ok", perturb(reply[1])) + tuple(reply[2:])
