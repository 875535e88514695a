"""Trusted side of the worker channel: references to the program's objects.

A :class:`Remote` stands in the trusted test namespace for an object that lives
in the worker (a function, a class, an instance). Calling it, reading or
setting an attribute, ``str``, ``repr``, ``len``, ``bool``, iteration,
indexing, ``in``, ``isinstance`` and ``issubclass`` go across; what comes back is
plain data (``wire.PLAIN_TYPES``) or another reference. A reference equals only
itself, hashes by identity and supports no arithmetic or ordering, so an object
of the program can never stand in for an expected value: every comparison a
test makes runs here, on plain data. (Its truth value is the object's own
``bool()``, an exact bool: no more than a function returning a plain bool
gets.) A :class:`RemoteValue` is a list/dict/set/bytearray attribute
that stays mutable in the worker (``obj.items.append(x)`` changes the
program's list); comparing or reading it fetches a plain copy.

Exceptions raised by the program come back as a class named like the
program's, derived from its nearest built-in base (``except ValueError`` and
``assertRaises(ValueError)`` work); an exit (``SystemExit``...) becomes
:class:`ProgramExit`, which ``except Exception`` does not catch.

Standard library only: the harness loads this file by path.
"""
from __future__ import annotations

import builtins
import io
import os
import pickle
import select
import signal
import time

GRACE_S = 0.3  # after a request's budget, how long the worker may take to answer before it is killed


class ProgramGone(BaseException):
    """The worker is dead (crashed, or killed after ignoring a timeout); nothing more can run."""


class RequestTimeout(BaseException):
    """The snippet's time ran out while the program computed."""


class ProgramExit(BaseException):
    """The program raised SystemExit/KeyboardInterrupt/GeneratorExit during a call."""


class Client:
    """One worker: its pid, its two pipe ends, and the current snippet's deadline."""

    def __init__(self, pid: int, rfd: int, wfd: int, wire):
        self.pid, self.rfd, self.wfd, self.wire = pid, rfd, wfd, wire
        self.dead: str | None = None  # why the worker is gone
        self.deadline = float("inf")
        self.snippet = -1
        self._decoding = False
        self._exc_classes: dict = {}
        self.on_outcall = None  # (client, name, args, kwargs) -> reply: answers calls of another agent's code

    # ---- lifecycle ----
    def kill(self, why: str) -> None:
        if self.dead is None:
            self.dead = why
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def exit_text(self) -> str:
        """How the worker ended (waits for it; call after it died or was killed)."""
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            return "exit status lost"
        if os.WIFSIGNALED(status):
            try:
                return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
            except ValueError:
                return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit code {os.waitstatus_to_exitcode(status)}"

    # ---- frames ----
    def receive(self, wait_s: float):
        """The next message from the worker, waiting at most ``wait_s``; kills it on any failure.

        A call of another agent's function (``("outcall", name, args, kwargs)``, a job with a helper) that
        arrives meanwhile is answered by ``on_outcall(self, name, args, kwargs)`` and the wait goes on."""
        end = time.monotonic() + wait_s
        while True:
            msg = self._next(end)
            if (self.on_outcall is not None and type(msg) is tuple and len(msg) == 4 and msg[0] == "outcall"):
                self._answer(self.on_outcall(self, msg[1], msg[2], msg[3]))
                continue
            return msg

    def _next(self, end: float):
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    self.kill("killed after a timeout")
                    raise RequestTimeout()
                ready, _, _ = select.select([self.rfd], [], [], left)
                if ready:
                    break
            data = self.wire.read_frame(self.rfd)
            self._decoding = True
            try:
                return self.wire.loads_plain(data, self._make_ref)
            finally:
                self._decoding = False
        except EOFError:
            self.dead = self.dead or "program died"
            raise ProgramGone(self.dead) from None
        except BaseException:
            self.kill("protocol broken")  # the channel is out of step now
            raise

    def _answer(self, reply: tuple) -> None:
        """Send the answer to an outcall: plain data only (``helper_calls.Broker`` checked it)."""
        try:
            self.wire.write_frame(self.wfd, pickle.dumps(reply, protocol=5))
        except OSError:
            self.dead = self.dead or "program died"
            raise ProgramGone(self.dead) from None

    def request(self, op: str, *args):
        """Send one request for the current snippet and return its plain answer (or raise)."""
        if self.dead is not None:
            raise ProgramGone(self.dead)
        if self._decoding:
            raise self.wire.ProtocolError("a reference was used while a frame was decoded")
        budget = self.deadline - time.monotonic()
        if budget <= 0:
            raise RequestTimeout()
        buf = io.BytesIO()
        p = pickle.Pickler(buf, protocol=5)
        p.persistent_id = _outgoing_id  # type: ignore[method-assign]  # pickle's documented hook, set per pickler
        try:
            p.dump((op, self.snippet, budget, args))
        except Exception as e:
            raise TypeError(f"a test passed something that cannot be sent to the program ({e})") from None
        try:
            self.wire.write_frame(self.wfd, buf.getvalue())
        except OSError:
            self.dead = self.dead or "program died"
            raise ProgramGone(self.dead) from None
        reply = self.receive(budget + GRACE_S)
        if type(reply) is not tuple or not reply or type(reply[0]) is not str:
            self.kill("protocol broken")
            raise self.wire.ProtocolError("malformed reply")
        if reply[0] == "ok" and len(reply) == 2:
            return reply[1]
        if reply[0] == "timeout":
            raise RequestTimeout()
        if reply[0] == "err" and len(reply) == 4:
            raise self._exception(*reply[1:])
        self.kill("protocol broken")
        raise self.wire.ProtocolError("malformed reply")

    def _make_ref(self, ref: int, kind: str):
        if kind.startswith("module:"):
            return _trusted_module(kind[7:]) or Remote(self, ref)
        if kind in self.wire.LIVE_KINDS:
            return RemoteValue(self, ref)
        return Remote(self, ref)

    def _exception(self, name, base, args) -> BaseException:
        """A trusted exception standing for the program's: name kept, nearest built-in base."""
        if type(name) is not str or not name.isidentifier() or len(name) > 100:
            name = "ProgramError"
        base_cls = getattr(builtins, base, None) if type(base) is str else None
        if not (isinstance(base_cls, type) and issubclass(base_cls, Exception)):
            cls = ProgramExit if isinstance(base_cls, type) and issubclass(base_cls, BaseException) else Exception
            return cls(f"{name}: {args[0]}" if type(args) is tuple and args else name)
        key = (name, base_cls)
        if key not in self._exc_classes:
            self._exc_classes[key] = type(name, (base_cls,), {"__module__": "program"})
        cls = self._exc_classes[key]
        args = args if type(args) is tuple else ()
        try:
            return cls(*args)
        except Exception:
            return cls(*(str(a) for a in args[:1]))


def _outgoing_id(obj):
    """Pickler hook (trusted -> worker): the program's objects by reference, the rest pickled as usual."""
    t = type(obj)
    if t is Remote or t is RemoteValue:
        return (object.__getattribute__(obj, "_ref"), "r")
    return None


PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset})
_UNSAFE_MODULES = frozenset({"antigravity", "this", "idlelib", "turtledemo", "__hello__", "__phello__", "tkinter",
                             "turtle", "webbrowser", "ensurepip", "venv", "lib2to3", "pydoc"})


def _trusted_module(name: str):
    """The harness's own copy of a standard-library module the program imported (never the program's).

    The name is the worker's claim: modules with import-time effects (``this``, ``antigravity``,
    any ``__main__``) are never imported for it; they stay references."""
    import sys
    top = name.partition(".")[0]
    if top in _UNSAFE_MODULES or "__main__" in name or top not in sys.stdlib_module_names:
        return None
    if name in sys.modules:
        return sys.modules[name]
    try:
        import importlib
        return importlib.import_module(name)
    except Exception:
        return None


def _copy_back(old, new) -> None:
    """Put the program's changes to a list/dict/set/bytearray argument into the test's own object."""
    if type(old) is not type(new) or type(old) not in (list, dict, set, bytearray):
        return
    if type(old) is dict or type(old) is set:
        old.clear()
        old.update(new)
    else:
        old[:] = new


def _typed(value, t, what):
    if type(value) is not t:
        raise TypeError(f"{what} of a program object must be a {t.__name__}, got a program object")
    return value


# The dunder names a test may read from a program object; every other dunder is refused here, before a
# request is sent. A protocol dunder looked up on the instance (numpy's ``__array_interface__`` /
# ``__array_struct__``, ``__array__``, ``__dlpack__``, ``__index__``...) would otherwise hand a value the
# worker chose to C code in the harness: a crafted ``__array_interface__`` makes numpy read the address in it.
# (``__doc__`` and ``__module__`` are the reference class's own, never the program's.)
ATTRIBUTE_DUNDERS = frozenset({"__name__", "__qualname__", "__dict__"})


def _attribute(name):
    if type(name) is str and name.startswith("__") and name.endswith("__") and name not in ATTRIBUTE_DUNDERS:
        raise AttributeError(f"{name}: a program object's dunder attributes other than "
                             f"{', '.join(sorted(ATTRIBUTE_DUNDERS))} do not reach the tests")
    return name


class Remote:
    """An object of the program (see module docstring)."""

    __slots__ = ("_client", "_ref")

    def __init__(self, client: Client, ref: int):
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_ref", ref)

    def _req(self, op, *args):
        return object.__getattribute__(self, "_client").request(op, self, *args)

    def __getattr__(self, name):
        return self._req("getattr", _attribute(name))

    def __setattr__(self, name, value):
        self._req("setattr", _attribute(name), value)

    def __delattr__(self, name):
        self._req("delattr", _attribute(name))

    def __call__(self, *args, **kwargs):
        result, (after, kw_after) = self._req("call", args, kwargs)
        for old, new in list(zip(args, after)) + [(kwargs[k], v) for k, v in kw_after.items() if k in kwargs]:
            _copy_back(old, new)
        return result

    def __eq__(self, other):
        return type(other) is type(self) and other._ref == self._ref

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(("comarl-remote", object.__getattribute__(self, "_ref")))

    def __bool__(self):  # the object's own bool(): no more than returning a plain bool would give
        return _typed(self._req("bool"), bool, "bool()")

    def __str__(self):
        return _typed(self._req("str"), str, "str()")

    def __repr__(self):
        return _typed(self._req("repr"), str, "repr()")

    def __len__(self):
        return _typed(self._req("len"), int, "len()")

    def __iter__(self):
        return iter(_typed(self._req("list"), list, "list()"))

    def __getitem__(self, key):
        return self._req("getitem", key)

    def __setitem__(self, key, value):
        self._req("setitem", key, value)

    def __delitem__(self, key):
        self._req("delitem", key)

    def __contains__(self, item):
        return _typed(self._req("contains", item), bool, "'in'")

    def __instancecheck__(self, instance):
        return _typed(self._req("isinstance", instance), bool, "isinstance()")

    def __subclasscheck__(self, cls):
        if type(cls) is not Remote:
            return False  # a trusted class is never a subclass of the program's
        return _typed(self._req("issubclass", cls), bool, "issubclass()")


class RemoteValue(Remote):
    """A list/dict/set/bytearray attribute of a program object: mutations go across, reads take a plain copy."""

    __slots__ = ()

    def value(self):
        return self._req("value")

    def __eq__(self, other):
        return self.value() == (other.value() if isinstance(other, RemoteValue) else other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a mutable list/dict/set is

    def __bool__(self):
        return bool(self.value())

    def __str__(self):
        return str(self.value())

    def __repr__(self):
        return repr(self.value())

    def __len__(self):
        return len(self.value())

    def __iter__(self):
        return iter(self.value())

    def __getitem__(self, key):  # nested lists/dicts stay live: obj.menu[2]["count"] = 7 changes the program's
        return self._req("getitem", key)

    def __contains__(self, item):
        return item in self.value()

    def __lt__(self, other):
        return self.value() < other

    def __le__(self, other):
        return self.value() <= other

    def __gt__(self, other):
        return self.value() > other

    def __ge__(self, other):
        return self.value() >= other

    def __add__(self, other):
        return self.value() + other

    def __radd__(self, other):
        return other + self.value()
