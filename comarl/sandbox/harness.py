"""The sandbox child: a trusted test runner and, forked from it, the worker that runs the program.

Started by the parent as ``python -I harness.py <result_fd>`` in a new session.
stdin carries two frames (``wire.py``): first the worker's part (program,
setup, limits, uid, work dir), then the trusted part (test snippets, nonce).
The harness reads the first, takes the isolation steps both processes share
(``jail.prepare_job``) and forks the worker *before* it reads the second, so
the process that runs model code never holds the tests, the expected values,
the nonce or the result fd. The worker isolates itself further, runs setup and
program, and then answers requests (``worker.py``). The harness, as the job's
uid, runs setup and each snippet in a trusted namespace where the program's
top-level names are references (``remote.py``): every assertion, comparison
and verdict is computed here, on plain data.

With a helper program (``TestJob.helper``: another agent's code) the harness forks one worker per program,
each in a pid namespace of its own, and brokers the main program's calls of the helper (``helper_calls.py``);
with ``ablate`` a third worker, a fresh copy of the main program that waits for the harness's go, reruns the
passing tests with the helper's answers altered.

Records to ``result_fd`` (one JSON object per line, after the nonce):
    {"k": "compiled", "error": str|None}   program parsed or not
    {"k": "program", "error": str|None}    setup + program body ran
    {"k": "helper", "error": str|None}     the helper program is ready to serve, or why not
    {"k": "test", "i": int, "error": str|None, "calls": int}   calls: of the helper, during the test
    {"k": "ablated", "i": int, "needed": bool}   a passing test, rerun with the helper's answers altered
    {"k": "rebound", "names": [str]}       pinned methods found bound to code defined elsewhere
    {"k": "done", "crashed": str|None}     the job ended; crashed: how the worker died on its own
    {"k": "setup_failed", "error": str}    isolation failed (an infrastructure error)
"""
import builtins
import importlib.util
import json
import os
import random
import signal
import sys
import types

MAX_ERROR_CHARS = 1000


def _load(name: str):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location("_comarl_sandbox_" + name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"sandbox: cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


wire, remote, worker_mod, jail, seccomp, helper_calls = (
    _load(n) for n in ("wire", "remote", "worker", "jail", "seccomp", "helper_calls"))


class _Timeout(BaseException):
    """SIGALRM in the trusted runner: a snippet ran past its time (backstop for the request timeouts)."""


_armed = False


def _on_alarm(signum, frame):
    if _armed:
        raise _Timeout()


def describe(e: BaseException) -> str:
    """'TypeName: message' (or just the type name when there is no message)."""
    if isinstance(e, remote.ProgramExit):
        return str(e)[:MAX_ERROR_CHARS]
    try:
        msg = str(e)
    except BaseException:
        msg = "<unprintable>"
    name = type(e).__name__
    text = f"{name}: {msg}" if msg else name
    return text[:MAX_ERROR_CHARS]


def compile_or_error(source: str, name: str):
    """(code, None) or (None, 'line N: message')."""
    try:
        return compile(source, name, "exec"), None
    except SyntaxError as e:
        return None, f"line {e.lineno}: {e.msg}"[:MAX_ERROR_CHARS]
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return None, describe(e)


class Reporter:
    def __init__(self, fd: int, nonce: str):
        self.fd, self.nonce = fd, nonce

    def send(self, **record) -> None:
        data = (self.nonce + " " + json.dumps(record) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data):]


def body_mark(nonce: str) -> bytes:
    """Written to stdout between what the program printed while its body ran and the rest (runner.py)."""
    return f"\0{nonce}:body\0".encode()


# Audit events a program never needs and that let code reach or rewrite other code of its process: trace and
# profile hooks (they can swap a function when another's module body returns), forged code objects
# (``CodeType(...)``, ``code.replace``), and the garbage collector's object walks.
REFUSED_EVENTS = frozenset({"sys.setprofile", "sys.settrace", "code.__new__", "gc.get_objects", "gc.get_referrers",
                            "gc.get_referents"})


def _worker_audit(event: str, args) -> None:
    """Audit hook in the worker: it may signal its own children, never its parent, its group, init or everyone;
    no trace or profile hooks, no forged code objects, no ``__code__`` assignment, no gc object walks."""
    if event == "os.kill" and (args[0] <= 1 or args[0] == _PARENT):
        raise PermissionError(f"sandbox: os.kill({args[0]}, ...) is not allowed")
    if event == "os.killpg":
        raise PermissionError("sandbox: os.killpg is not allowed")
    if event in REFUSED_EVENTS or (event == "object.__setattr__" and len(args) > 1 and args[1] == "__code__"):
        raise PermissionError(f"sandbox: {event} is not allowed")


_PARENT = 0


def run_snippet(code, ns: dict, client, index: int, timeout_s: float) -> str | None:
    """exec trusted ``code`` in ``ns``; None when it raised nothing, else the error text.

    Requests to the program share the snippet's deadline; ``random`` is re-seeded with 0 here and
    in the worker, so a program that draws random numbers scores the same every time."""
    global _armed
    random.seed(0)
    client.snippet = index
    client.deadline = remote.time.monotonic() + timeout_s
    try:
        try:
            _armed = True  # backstop for trusted code; re-fires every 0.1 s
            signal.setitimer(signal.ITIMER_REAL, timeout_s + 2 * remote.GRACE_S, 0.1)
            exec(code, ns)
            err = None
        except (_Timeout, remote.RequestTimeout):
            err = "Timeout"
        except remote.ProgramGone:
            err = _gone_text(client)
        except BaseException as e:  # SystemExit and KeyboardInterrupt are failures too
            err = describe(e)
        finally:
            _armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Timeout:
        err = "Timeout"
    if client.dead is not None and err is None:
        err = _gone_text(client)  # passed only because the program's death was swallowed
    return err


def _gone_text(client) -> str:
    if client.dead == "killed after a timeout":
        return "NotRun: program killed after a timeout"
    if not hasattr(client, "exit"):
        client.exit = client.exit_text()
    return f"Crashed: {client.exit}"


def names_read(codes) -> set[str]:
    """Every global or attribute name the compiled snippets (and the functions they define) mention."""
    out: set[str] = set()
    stack = list(codes)
    while stack:
        code = stack.pop()
        out.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return out


def trusted_namespace(names: dict, expose) -> dict:
    """The tests' globals, built here from trusted parts; the program's namespace is only data.

    Trusted builtins always (never a key from the program's side, dunder or not); the
    program's names listed in ``expose`` (the tested function or class: references that run
    in the worker); and, for each program name bound to a module, the harness's own copy of
    that standard-library module (``remote._trusted_module``: nothing of the program's), so a
    test reading ``math`` gets ``math`` or nothing. Every other name of the program (a helper,
    a rebound ``math``, ``__builtins__``) stays out; the trusted setup runs after this and
    overrides what it defines."""
    ns = {"__name__": "__program__", "__builtins__": builtins}
    for k, v in names.items():
        if type(k) is not str or not k.isidentifier() or k.startswith("__"):
            continue
        if type(v) is types.ModuleType:
            if not hasattr(builtins, k):
                ns[k] = v
        elif k in expose:
            ns[k] = v
    return ns


def start_helper(job: dict, client, timeout: float):
    """The helper's worker up to its program's names: (its function, None) or (None, why it cannot serve)."""
    name = job["helper"]["name"]
    try:
        first = client.receive(timeout + remote.GRACE_S)
        if first[0] != "isolated":
            return None, f"setup: {first[1] if len(first) > 1 else first}"
        first = client.receive(timeout + remote.GRACE_S)
        if first[0] != "compiled":
            raise wire.ProtocolError("expected the compile result")
        if first[1] is not None:
            return None, f"SyntaxError: {str(first[1])[:MAX_ERROR_CHARS]}"
        msg = client.receive(timeout + remote.GRACE_S)
    except remote.RequestTimeout:
        return None, "Timeout"
    except (remote.ProgramGone, wire.ProtocolError) as e:
        return None, f"Crashed: {_gone_text(client) if isinstance(e, remote.ProgramGone) else e}"
    if type(msg) is not tuple or len(msg) < 2 or msg[0] != "program":
        return None, "the helper broke the protocol"
    if msg[1] is not None or len(msg) != 3 or type(msg[2]) is not dict:
        return None, str(msg[1])[:MAX_ERROR_CHARS]
    target = msg[2].get(name)
    if type(target) is not remote.Remote:
        what = "defines no" if target is None else "does not define a function"
        return None, f"NameError: the helper program {what} {name!r}"
    return target, None


def check_pins(client, names: dict, pins: list, found: set) -> None:
    """Add to ``found`` the pinned methods (class, attribute, first line, last line) bound to code defined outside
    their lines of the program (asked of the worker: ``worker._origin``)."""
    by_class: dict[str, list] = {}
    for cls_name, attr, lo, hi in pins:
        by_class.setdefault(cls_name, []).append((attr, lo, hi))
    for cls_name, wanted in by_class.items():
        cls = names.get(cls_name)
        where = client.request("origins", cls, [a for a, _, _ in wanted]) if type(cls) is remote.Remote else None
        if type(where) is not list or len(where) != len(wanted):
            where = [None] * len(wanted)
        for (attr, lo, hi), w in zip(wanted, where):
            if not (type(w) is tuple and len(w) == 2 and w[0] == "<program>" and type(w[1]) is int
                    and lo <= w[1] <= hi):
                found.add(f"{cls_name}.{attr}")


def run_tests(job: dict, client, out: Reporter, tests: list, entry_points: list, notes: list, pins: list | None = None,
              broker=None) -> tuple | None:
    """The main program's job: startup records, setup, every snippet; returns what an ablation pass needs
    (compiled snippets, expose, passed indices) or None when no snippet ran."""
    timeout = job["limits"]["test_timeout_s"]
    client.on_outcall = broker
    first = client.receive(timeout + remote.GRACE_S)
    if first[0] == "setup_failed":
        out.send(k="setup_failed", error=str(first[1]))
        return None
    if first[0] != "isolated" or type(first[1]) is not list:
        raise wire.ProtocolError("expected the isolation notes")
    out.send(k="isolation", notes=[str(n) for n in notes + first[1]])
    first = client.receive(timeout + remote.GRACE_S)
    if first[0] != "compiled":
        raise wire.ProtocolError("expected the compile result")
    out.send(k="compiled", error=first[1] if first[1] is None else str(first[1])[:MAX_ERROR_CHARS])
    if first[1] is not None:
        return None
    try:
        msg = client.receive(timeout + remote.GRACE_S)
    except remote.RequestTimeout:
        out.send(k="program", error="Timeout")
        return None
    except remote.ProgramGone:
        out.send(k="program", error=_gone_text(client))
        return None
    # the worker flushed its stdout before it answered: what it printed so far precedes this mark
    os.write(1, body_mark(out.nonce))
    if type(msg) is not tuple or len(msg) < 2 or msg[0] != "program":
        raise wire.ProtocolError("expected the program result")
    if msg[1] is not None or len(msg) != 3 or type(msg[2]) is not dict:
        out.send(k="program", error=str(msg[1])[:MAX_ERROR_CHARS])
        return None
    compiled = [compile_or_error(test, f"<test {i}>") for i, test in enumerate(tests)]
    if entry_points:
        expose = set(entry_points)
    else:
        expose = names_read(c for c, _ in compiled if c is not None) - set(dir(builtins))
    ns = trusted_namespace(msg[2], expose)
    if job["setup"]:
        code, err = compile_or_error(job["setup"], "<setup>")
        err = err or run_snippet(code, ns, client, -1, timeout)
        if err:
            out.send(k="program", error=f"setup: {err}")
            return None
    rebound: set[str] = set()
    pins = pins or []
    if pins:
        _pin_check(client, msg[2], pins, rebound, out)
    out.send(k="program", error=None)
    passed = []
    for i, (code, err) in enumerate(compiled):
        if code is not None:
            err = run_snippet(code, ns, client, i, timeout)
            if pins and client.dead is None:
                _pin_check(client, msg[2], pins, rebound, out)
        elif not err.startswith("SyntaxError"):
            err = f"SyntaxError: {err}"
        if broker is not None:
            out.send(k="test", i=i, error=err, calls=broker.calls.get(i, 0))
        else:
            out.send(k="test", i=i, error=err)
        if err is None:
            passed.append(i)
    return compiled, expose, passed


def _pin_check(client, names: dict, pins: list, rebound: set, out: Reporter) -> None:
    before = len(rebound)
    client.snippet, client.deadline = -2, remote.time.monotonic() + 2.0
    try:
        check_pins(client, names, pins, rebound)
    except (remote.ProgramGone, remote.RequestTimeout, wire.ProtocolError):
        rebound.update(f"{c}.{a}" for c, a, _, _ in pins)  # a worker that cannot say where its code is from
    except Exception:  # the program's exception while answering
        rebound.update(f"{c}.{a}" for c, a, _, _ in pins)
    if len(rebound) > before:
        out.send(k="rebound", names=sorted(rebound))


def ablate(job: dict, client, out: Reporter, ran: tuple, answers: dict) -> None:
    """Rerun the passing snippets against ``client`` (the fresh copy of the main program, waiting for its go),
    its helper calls answered by ``helper_calls.Altered``; one ``ablated`` record per snippet."""
    compiled, expose, passed = ran
    timeout = job["limits"]["test_timeout_s"]
    client.on_outcall = helper_calls.Altered(answers)
    try:
        wire.write_frame(client.wfd, b"go")
        for want in ("isolated", "compiled"):
            first = client.receive(timeout + remote.GRACE_S)
            if first[0] != want or (want == "compiled" and first[1] is not None):
                return
        msg = client.receive(timeout + remote.GRACE_S)
    except (remote.ProgramGone, remote.RequestTimeout, wire.ProtocolError, OSError):
        return  # the copy did not start: no test is counted as needing the helper
    if type(msg) is not tuple or len(msg) != 3 or msg[1] is not None or type(msg[2]) is not dict:
        return
    ns = trusted_namespace(msg[2], expose)
    if job["setup"]:
        code, err = compile_or_error(job["setup"], "<setup>")
        if err or run_snippet(code, ns, client, -1, timeout):
            return
    for i in passed:
        err = run_snippet(compiled[i][0], ns, client, i, timeout)
        out.send(k="ablated", i=i, needed=err is not None)
        if client.dead is not None:
            return


def _worker(job: dict, prepared: dict, rfd: int, wfd: int) -> None:
    """The forked worker: isolate, run the program, serve; never returns."""
    global _PARENT
    try:
        notes = jail.isolate_worker(job["workdir"], job["uid"], job["gid"], job["limits"], prepared,
                                    job.get("view"), seccomp)
        _PARENT = os.getppid()  # 0 inside the pid namespace
        sys.addaudithook(_worker_audit)
        for name in [n for n in sys.modules if n.startswith("_comarl_sandbox_")]:
            del sys.modules[name]  # the program finds the harness's modules by no name
        wire.write_frame(wfd, worker_mod.pickle.dumps(("isolated", notes)))
    except BaseException as e:
        try:
            wire.write_frame(wfd, worker_mod.pickle.dumps(("setup_failed", describe(e))))
        finally:
            os._exit(3)
    try:
        worker_mod.Worker(rfd, wfd, wire).run_program(job)
    finally:
        worker_mod._flush()
        os._exit(0)  # skip atexit hooks the program may have registered


def _needed_paths() -> list[str]:
    """Dirs the interpreter reads from: prefixes and every sys.path entry."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p)
    return sorted(os.path.realpath(p) for p in paths if os.path.exists(p))


def _site_free_start(path: list[str] | None) -> None:
    """The harness runs with ``-S`` (no ``site``: a third of a job's start-up); take the trainer's import
    path instead, and the ``exit``/``quit`` builtins that ``site`` would have added."""
    if path:
        sys.path[:] = path

    def _quit(code=None):
        raise SystemExit(code)

    for name in ("exit", "quit"):
        if not hasattr(builtins, name):
            setattr(builtins, name, _quit)


def _read_stdin_frame():
    return json.loads(wire.read_frame(0))


def _relay_exit(pid: int) -> None:
    """In a worker's intermediate parent: wait for it and end the same way (its exit code or signal)."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def spawn_worker(job: dict, prepared: dict, close: list, own_ns: bool, intermediate: bool) -> tuple:
    """Fork a worker for ``job``; returns (pid, read fd, write fd) of its channel. ``close``: the harness's fds
    the child must not keep (the result fd, other workers' channels); this worker's harness ends are added.

    ``intermediate``: fork a parent that takes a pid namespace of its own for the worker (``own_ns``) and waits
    for it, relaying how it ended: a second worker cannot share the first's namespace (it would see and signal
    it), and one process can give its children only one new pid namespace. Otherwise the caller has already
    taken the namespace (``prepared["pidns"]``) and the worker is forked directly."""
    to_worker, from_worker = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)  # the tests are still unread in stdin
            for fd in [devnull, to_worker[1], from_worker[0]] + close:
                os.close(fd)
            if intermediate:
                part = dict(prepared, pidns=jail.new_pid_namespace() if own_ns else False)
                child = os.fork()
                if child == 0:
                    _worker(job, part, to_worker[0], from_worker[1])
                os.close(to_worker[0])
                os.close(from_worker[1])
                if job["uid"] is not None:  # the harness, as the job's uid, must be able to kill this parent
                    jail.drop_privileges(job["uid"], jail.paired_gid(job["uid"], job["gid"]))
                _relay_exit(child)
            _worker(job, prepared, to_worker[0], from_worker[1])
        finally:
            os._exit(3)
    os.close(to_worker[0])
    os.close(from_worker[1])
    close += [to_worker[1], from_worker[0]]
    return pid, from_worker[0], to_worker[1]


def main() -> None:
    result_fd = int(sys.argv[1])
    job = _read_stdin_frame()
    _site_free_start(job.get("sys_path"))
    helper = job.get("helper")
    spawned: dict = {}
    failure = None
    try:
        jail.become_subreaper()
        prepared = jail.prepare_job(job["workdir"], job["uid"], job["gid"], job["limits"], _needed_paths())
        own_ns = job["uid"] is not None
        close = [result_fd]
        if helper:
            spawned["helper"] = spawn_worker(dict(job, program=helper["program"]), prepared, close, own_ns, True)
            if helper["ablate"]:
                spawned["ablation"] = spawn_worker(dict(job, outcalls=[helper["name"]], wait_start=True), prepared,
                                                   close, own_ns, True)
        main_job = dict(job, outcalls=[helper["name"]]) if helper else job
        main_prepared = dict(prepared, pidns=jail.new_pid_namespace() if own_ns else False)
        spawned["main"] = spawn_worker(main_job, main_prepared, close, own_ns, False)
    except BaseException as e:
        failure = describe(e)
    trusted = _read_stdin_frame()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    out = Reporter(result_fd, trusted["nonce"])
    if failure is not None:
        for pid, _, _ in spawned.values():
            os.kill(pid, signal.SIGKILL)
        out.send(k="setup_failed", error=failure)
        jail.reap_children(1.0)
        os._exit(3)
    clients = {role: remote.Client(pid, rfd, wfd, wire) for role, (pid, rfd, wfd) in spawned.items()}
    client = clients["main"]
    try:
        jail.become_trusted_runner(job["workdir"], job["uid"], job["gid"])
        signal.signal(signal.SIGALRM, _on_alarm)
        timeout = job["limits"]["test_timeout_s"]
        broker = None
        if helper:
            target, error = start_helper(job, clients["helper"], timeout)
            out.send(k="helper", error=error)
            broker = helper_calls.Broker(remote, clients["helper"], target, helper["name"], error)
        ran = run_tests(job, client, out, trusted["tests"], trusted["entry_points"], prepared["notes"],
                        [tuple(p) for p in trusted.get("pinned", [])], broker)
        if "ablation" in clients and ran is not None and ran[2] and broker is not None and broker.called():
            clients["helper"].kill("job over")  # nothing of the helper runs while its answers are altered
            ablate(job, clients["ablation"], out, ran, broker.answers)
    except (remote.ProgramGone, remote.RequestTimeout, wire.ProtocolError):
        pass  # records not sent mark the rest as crashed
    crashed = None
    if client.dead is not None and client.dead not in ("killed after a timeout", "protocol broken", "job over"):
        crashed = client.exit if hasattr(client, "exit") else client.exit_text()
    for c in clients.values():
        c.kill("job over")
    out.send(k="done", crashed=crashed)
    jail.reap_children(1.0)
    os._exit(0)


if __name__ == "__main__":
    main()
