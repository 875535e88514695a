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

Records to ``result_fd`` (one JSON object per line, after the nonce):
    {"k": "compiled", "error": str|None}   program parsed or not
    {"k": "program", "error": str|None}    setup + program body ran
    {"k": "test", "i": int, "error": str|None}
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


wire, remote, worker_mod, jail, seccomp = (_load(n) for n in ("wire", "remote", "worker", "jail", "seccomp"))


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


def _refuse_outward_signals(event: str, args) -> None:
    """Audit hook in the worker: it may signal its own children, never its parent, its group, init or everyone."""
    if event == "os.kill" and (args[0] <= 1 or args[0] == _PARENT):
        raise PermissionError(f"sandbox: os.kill({args[0]}, ...) is not allowed")
    if event == "os.killpg":
        raise PermissionError("sandbox: os.killpg is not allowed")


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


def run_tests(job: dict, client, out: Reporter, tests: list, entry_points: list, notes: list) -> None:
    timeout = job["limits"]["test_timeout_s"]
    first = client.receive(timeout + remote.GRACE_S)
    if first[0] == "setup_failed":
        out.send(k="setup_failed", error=str(first[1]))
        return
    if first[0] != "isolated" or type(first[1]) is not list:
        raise wire.ProtocolError("expected the isolation notes")
    out.send(k="isolation", notes=[str(n) for n in notes + first[1]])
    first = client.receive(timeout + remote.GRACE_S)
    if first[0] != "compiled":
        raise wire.ProtocolError("expected the compile result")
    out.send(k="compiled", error=first[1] if first[1] is None else str(first[1])[:MAX_ERROR_CHARS])
    if first[1] is not None:
        return
    try:
        msg = client.receive(timeout + remote.GRACE_S)
    except remote.RequestTimeout:
        out.send(k="program", error="Timeout")
        return
    except remote.ProgramGone:
        out.send(k="program", error=_gone_text(client))
        return
    # the worker flushed its stdout before it answered: what it printed so far precedes this mark
    os.write(1, body_mark(out.nonce))
    if type(msg) is not tuple or len(msg) < 2 or msg[0] != "program":
        raise wire.ProtocolError("expected the program result")
    if msg[1] is not None or len(msg) != 3 or type(msg[2]) is not dict:
        out.send(k="program", error=str(msg[1])[:MAX_ERROR_CHARS])
        return
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
            return
    out.send(k="program", error=None)
    for i, (code, err) in enumerate(compiled):
        if code is not None:
            err = run_snippet(code, ns, client, i, timeout)
        elif not err.startswith("SyntaxError"):
            err = f"SyntaxError: {err}"
        out.send(k="test", i=i, error=err)


def _worker(job: dict, prepared: dict, rfd: int, wfd: int) -> None:
    """The forked worker: isolate, run the program, serve; never returns."""
    global _PARENT
    try:
        notes = jail.isolate_worker(job["workdir"], job["uid"], job["gid"], job["limits"], prepared,
                                    job.get("view"), seccomp)
        _PARENT = os.getppid()  # 0 inside the pid namespace
        sys.addaudithook(_refuse_outward_signals)
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


def main() -> None:
    result_fd = int(sys.argv[1])
    job = _read_stdin_frame()
    _site_free_start(job.get("sys_path"))
    pid = None
    try:
        prepared = jail.prepare_job(job["workdir"], job["uid"], job["gid"], job["limits"], _needed_paths())
        to_worker, from_worker = os.pipe(), os.pipe()
        pid = os.fork()
    except BaseException as e:
        failure = describe(e)
    if pid == 0:  # the worker: drop stdin (the tests are still unread in it), the result fd, our pipe ends
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd in (devnull, result_fd, to_worker[1], from_worker[0]):
            os.close(fd)
        _worker(job, prepared, to_worker[0], from_worker[1])
    trusted = _read_stdin_frame()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    out = Reporter(result_fd, trusted["nonce"])
    if pid is None:
        out.send(k="setup_failed", error=failure)
        os._exit(3)
    os.close(to_worker[0])
    os.close(from_worker[1])
    client = remote.Client(pid, from_worker[0], to_worker[1], wire)
    try:
        jail.become_trusted_runner(job["workdir"], job["uid"], job["gid"])
        signal.signal(signal.SIGALRM, _on_alarm)
        run_tests(job, client, out, trusted["tests"], trusted["entry_points"], prepared["notes"])
    except (remote.ProgramGone, remote.RequestTimeout, wire.ProtocolError):
        pass  # records not sent mark the rest as crashed
    crashed = None
    if client.dead is not None and client.dead not in ("killed after a timeout", "protocol broken"):
        crashed = client.exit if hasattr(client, "exit") else client.exit_text()
    client.kill("job over")
    out.send(k="done", crashed=crashed)
    os._exit(0)


if __name__ == "__main__":
    main()
