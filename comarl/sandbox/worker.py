"""Untrusted side: run the program, then answer the trusted harness's requests.

The worker is a fork of the harness made before the harness read the tests,
isolated (``jail.py``) before it compiles anything. It holds the program's
namespace and a table of the objects it has handed out as references. Each
request ``(op, snippet, budget_s, args)`` runs under ``budget_s`` of wall clock
(SIGALRM, re-fired every 0.1 s); the answer is ``("ok", value)``,
``("err", type name, nearest built-in base, args)`` or ``("timeout",)``.
Values are pickled with exact built-in types kept as they are and everything
else replaced by a reference (``wire.py``). Nothing here decides a verdict:
the worker may lie in any way it likes and the harness still checks plain data.

Standard library only: the harness loads this file by path.
"""
from __future__ import annotations

import builtins
import io
import pickle
import random
import signal
import sys
import types
from typing import Any, Callable


class _Timeout(BaseException):
    pass


_armed = False


def _on_alarm(signum, frame):
    if _armed:
        raise _Timeout()


def describe(e: BaseException, limit: int = 1000) -> str:
    try:
        msg = str(e)
    except BaseException:
        msg = "<unprintable>"
    name = type(e).__name__
    return (f"{name}: {msg}" if msg else name)[:limit]


def builtin_base(e: BaseException) -> str:
    for cls in type(e).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


class Worker:
    def __init__(self, rfd: int, wfd: int, wire):
        self.rfd, self.wfd, self.wire = rfd, wfd, wire
        self.objects: dict[int, object] = {}
        self.ns: dict = {}
        self.snippet = None

    # ---- encoding ----
    def _ref(self, obj) -> int:
        self.objects[id(obj)] = obj  # kept alive: the id stays unique while referenced
        return id(obj)

    def encode(self, value, live=None) -> bytes:
        """Pickle ``value``: exact plain types as they are, subclasses of them (Counter, a namedtuple,
        an IntEnum) as their plain value, anything else as a reference. ``live``: the one
        list/dict/set/bytearray inside ``value`` that goes as a live reference instead."""
        plain = self.wire.PLAIN_TYPES
        convert: list[bool] = []

        def persistent_id(obj):
            t = type(obj)
            if t in plain:
                if obj is live and live is not None and t.__name__ in self.wire.LIVE_KINDS:
                    return (self._ref(obj), t.__name__)
                return None
            if (getattr(t, "__module__", None), t.__name__) in self.wire.VALUE_CLASSES and _is_std(t):
                return None  # pickled by value (datetime, Decimal, deque...)
            if type(obj) is type and (obj.__module__, obj.__name__) in self.wire.VALUE_CLASSES and _is_std(obj):
                return None  # the class itself, named in the value's reduce
            if t is type and obj in plain:
                return None  # int, str, dict... by name: the harness's own classes
            if t.__module__ == "numpy" and hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0 and not convert:
                raise _Convert()
            if t is types.ModuleType:
                return (self._ref(obj), "module:" + str(getattr(obj, "__name__", "")))
            image = _image_state(obj)
            if image is not None:
                return (0, "value:image", image)
            if not convert and isinstance(obj, _BASES):
                raise _Convert()
            return (self._ref(obj), "obj")

        def dump(v):
            buf = io.BytesIO()
            p = pickle.Pickler(buf, protocol=5)
            p.persistent_id = persistent_id  # type: ignore[method-assign]  # pickle's documented hook
            p.dump(v)
            return buf.getvalue()

        try:
            return dump(value)
        except _Convert:
            convert.append(True)
            return dump(_plain_copy(value, {}))

    def decode(self, data: bytes):
        objects = self.objects

        class _U(pickle.Unpickler):
            def persistent_load(self, pid):
                return objects[pid[0]]

        return _U(io.BytesIO(data)).load()

    def send(self, message) -> None:
        try:
            data = self.encode(message)
        except _Timeout:
            raise
        except BaseException as e:  # e.g. a recursive structure too deep to pickle
            data = self.encode(("err", type(e).__name__, builtin_base(e), (describe(e),)))
        self.wire.write_frame(self.wfd, data)

    # ---- running ----
    def timed(self, fn, budget: float | None):
        """(True, result) or (False, error message tuple), under ``budget`` seconds."""
        global _armed
        try:
            try:
                if budget is not None:
                    _armed = True
                    signal.setitimer(signal.ITIMER_REAL, max(budget, 0.001), 0.1)
                return True, fn()
            except _Timeout:
                return False, ("timeout",)
            except BaseException as e:
                args = e.args if type(e.args) is tuple else ()
                return False, ("err", type(e).__name__, builtin_base(e), args)
            finally:
                _armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Timeout:
            return False, ("timeout",)

    def outcall(self, name: str, args: tuple, kwargs: dict):
        """Call ``name``, a function of another agent's program (another process), through the harness.

        Only plain data crosses (the harness refuses the rest); lists, dicts and sets the call changed are
        changed here too; the other program's exception is raised as one of the same name and built-in base."""
        self.wire.write_frame(self.wfd, self.encode(("outcall", name, args, kwargs)))
        reply = self.decode(self.wire.read_frame(self.rfd))
        if reply[0] == "ok":
            _, result, after, kw_after = reply
            for old, new in list(zip(args, after)) + [(kwargs[k], v) for k, v in kw_after.items() if k in kwargs]:
                _copy_back(old, new)
            return result
        _, ename, base, eargs = reply
        base_cls = getattr(builtins, base, Exception)
        if not (isinstance(base_cls, type) and issubclass(base_cls, Exception)):
            base_cls = Exception
        raise type(ename, (base_cls,), {})(*eargs)

    def _stand_in(self, name: str):
        worker = self

        def stand_in(*args, **kwargs):
            return worker.outcall(name, args, kwargs)

        stand_in.__name__ = stand_in.__qualname__ = name
        return stand_in

    def run_program(self, job: dict) -> None:
        """Compile, run setup and body; report ``compiled`` and ``program``; then serve.

        ``job["wait_start"]``: wait for the harness's go (one frame) first (the ablation copy of a job with a
        helper); ``job["outcalls"]``: names bound, before the body runs, to stand-ins that call another agent's
        program through the harness (:meth:`outcall`)."""
        signal.signal(signal.SIGALRM, _on_alarm)
        _give_headroom()
        if job.get("wait_start"):
            try:
                self.wire.read_frame(self.rfd)
            except EOFError:
                return
        try:
            code = compile(job["program"], "<program>", "exec")
            self.send(("compiled", None))
        except SyntaxError as e:
            self.send(("compiled", f"line {e.lineno}: {e.msg}"[:1000]))
            return
        except BaseException as e:
            self.send(("compiled", describe(e)))
            return
        module = types.ModuleType("__program__")
        sys.modules["__program__"] = sys.modules["__main__"] = module
        self.ns = module.__dict__
        random.seed(0)
        if job["setup"]:
            ok, res = self.timed(lambda: exec(compile(job["setup"], "<setup>", "exec"), self.ns), None)
            if not ok:
                self.send(("program", "setup: " + _err_text(res)))
                return
        for name in job.get("outcalls", ()):
            self.ns[name] = self._stand_in(name)
        random.seed(0)
        ok, res = self.timed(lambda: exec(code, self.ns), job["limits"]["test_timeout_s"])
        _flush()
        if not ok:
            self.send(("program", _err_text(res)))
            return
        names = {k: v for k, v in self.ns.items() if not (k.startswith("__") and k.endswith("__"))}
        self.wire.write_frame(self.wfd, self.encode(("program", None, names)))
        self.serve()

    def serve(self) -> None:
        while True:
            try:
                data = self.wire.read_frame(self.rfd)
            except EOFError:
                return
            op, snippet, budget, args = self.decode(data)
            if snippet != self.snippet:
                self.snippet = snippet
                random.seed(0)
            ok, res = self.timed(lambda op=op, args=args: OPS[op](*args), budget)
            _flush()
            if ok:
                value, live = res
                ok, data = self.timed(lambda v=value, keep=live: self.encode(("ok", v), live=v if keep else None),
                                      budget)
                if ok:
                    self.wire.write_frame(self.wfd, data)
                    continue
                res = data
            self.send(res)


PYTHON_RECURSION_LIMIT = 1000  # what a program gets in plain Python: sys.getrecursionlimit()'s default
OWN_FRAMES = 8  # the worker's frames between run_program/serve and the program's code (timed, its lambda, OPS...)


def _give_headroom() -> None:
    """Raise the recursion limit by the worker's own frames, so a program can recurse as deep as in plain
    Python (990 levels pass there, and must here)."""
    depth = 0
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back
    sys.setrecursionlimit(PYTHON_RECURSION_LIMIT + depth + OWN_FRAMES)


def _image_state(obj):
    """A PIL image as plain data (mode, width, height, pixels, format, filename), or None.

    Images cross by value: the harness rebuilds them with its own PIL (``wire.trusted_image``),
    so a test can compare the program's image with one it made itself (ClassEval_45)."""
    pil = sys.modules.get("PIL.Image")
    if pil is None or not isinstance(obj, pil.Image):
        return None
    try:
        obj.load()
        w, h = obj.size
        return (str(obj.mode), int(w), int(h), bytes(obj.tobytes()), getattr(obj, "format", None) or "",
                str(getattr(obj, "filename", "") or ""))
    except Exception:
        return None


def _err_text(res: tuple) -> str:
    if res[0] == "timeout":
        return "Timeout"
    name, _, args = res[1:]
    try:
        msg = str(args[0]) if len(args) == 1 else (str(args) if args else "")
    except BaseException:
        msg = "<unprintable>"
    return (f"{name}: {msg}" if msg else name)[:1000]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _call(obj, args, kwargs):
    """The result and, for arguments that are plain mutable containers, their contents afterwards
    (the harness copies them back, so ``f(lst)`` that appends to ``lst`` works as in one process)."""
    result = obj(*args, **kwargs)
    after = ([a if type(a) in _MUTABLE else None for a in args],
             {k: v for k, v in kwargs.items() if type(v) in _MUTABLE})
    return (result, after), False


_MUTABLE = (list, dict, set, bytearray)


def _list(obj):
    return list(obj)


def _copy_back(old, new) -> None:
    """Put the other agent's changes to a list/dict/set/bytearray argument into this program's own object."""
    if type(old) is not type(new) or type(old) not in _MUTABLE:
        return
    if type(old) is dict or type(old) is set:
        old.clear()
        old.update(new)
    else:
        old[:] = new


def _origin(cls, name):
    """(file, first line) of the code that ``cls``'s own attribute ``name`` runs, or None (not code)."""
    try:
        fn = type.__getattribute__(cls, "__dict__").get(name) if isinstance(cls, type) else None
    except Exception:
        return None
    fn = getattr(fn, "fget", None) or getattr(fn, "__func__", None) or fn
    code = getattr(fn, "__code__", None)
    if type(code) is not types.CodeType:
        return None
    return (str(code.co_filename), int(code.co_firstlineno))


class _Convert(Exception):
    pass


# the plain type a subclass instance turns into, most specific first (bool cannot be subclassed)
_BASES = (int, float, complex, str, bytes, bytearray, dict, list, tuple, frozenset, set)


def _is_std(cls) -> bool:
    """``cls`` is the standard library's class of that name (not one the program made up)."""
    mod = sys.modules.get(cls.__module__)
    return mod is not None and getattr(mod, cls.__name__, None) is cls


def _plain_copy(value, memo: dict):
    """``value`` with every instance of a subclass of a plain type replaced by its plain value
    (and numpy scalars by Python numbers)."""
    t = type(value)
    if id(value) in memo:
        return memo[id(value)]
    if t.__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if t in (dict,) or (t not in _EXACT and isinstance(value, dict)):
        out: dict = {}
        memo[id(value)] = out
        for k, v in dict.items(value):
            out[_plain_copy(k, memo)] = _plain_copy(v, memo)
        return out
    if t is list or (t not in _EXACT and isinstance(value, list)):
        items: list = []
        memo[id(value)] = items
        items.extend(_plain_copy(v, memo) for v in list.__iter__(value))
        return items
    for base, copy in _SCALARS:
        if t is not base and t not in _EXACT and isinstance(value, base):
            return copy(value)
    if t in (tuple, set, frozenset) or (t not in _EXACT and isinstance(value, (tuple, set, frozenset))):
        kind: Any = tuple if isinstance(value, tuple) else set if isinstance(value, set) else frozenset
        return kind(_plain_copy(v, memo) for v in kind.__iter__(value))
    return value


_EXACT = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset})
_SCALARS: tuple[tuple[type, Callable[[Any], Any]], ...] = ((int, int.__index__), (float, float.__float__),
            (complex, complex.__complex__ if hasattr(complex, "__complex__") else complex),
            (str, str.__str__), (bytes, bytes), (bytearray, bytearray))


# op -> function(args...) returning (value, live)
OPS: dict[str, Callable[..., tuple[Any, bool]]] = {
    "call": lambda obj, args, kwargs: _call(obj, args, kwargs),
    "getattr": lambda obj, name: (getattr(obj, name), True),
    # setattr and delattr answer None (the value the program's statement has)
    "setattr": lambda obj, name, value: (setattr(obj, name, value), False),  # type: ignore[func-returns-value]
    "delattr": lambda obj, name: (delattr(obj, name), False),  # type: ignore[func-returns-value]
    "str": lambda obj: (str(obj), False),
    "repr": lambda obj: (repr(obj), False),
    "len": lambda obj: (len(obj), False),
    "bool": lambda obj: (bool(obj), False),
    "list": lambda obj: (_list(obj), False),
    "getitem": lambda obj, key: (obj[key], True),
    "setitem": lambda obj, key, value: (obj.__setitem__(key, value), False),
    "delitem": lambda obj, key: (obj.__delitem__(key), False),
    "contains": lambda obj, item: (item in obj, False),
    "isinstance": lambda cls, obj: (isinstance(obj, cls), False),
    "issubclass": lambda cls, sub: (issubclass(sub, cls), False),
    "value": lambda obj: (obj, False),
    "origins": lambda cls, names: ([_origin(cls, n) for n in names], False),
}
