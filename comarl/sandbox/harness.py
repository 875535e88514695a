"""The sandbox child: isolate itself, then run one job and report on a private fd.

Started by the parent as ``python -I harness.py <result_fd>`` in a new session.
It reads the job (JSON) from stdin, isolates itself (``jail.py``) while still
root, then runs setup, program and test snippets. Results go to ``result_fd``,
a pipe the program's prints never reach; every record starts with a nonce the
program is never given, so blind writes to that fd are ignored by the parent.

Records (one JSON object per line, after the nonce):
    {"k": "compiled", "error": str|None}   program parsed or not
    {"k": "program", "error": str|None}    setup + program body ran
    {"k": "test", "i": int, "error": str|None}
    {"k": "done"}                          the job ended normally
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
# Bound now: the program may later patch builtins.exec, os.write, json.dumps...
_exec, _write, _dumps, _setitimer, _str = builtins.exec, os.write, json.dumps, signal.setitimer, str
_seed = random.seed


class _Timeout(BaseException):
    """Raised by SIGALRM inside a snippet; BaseException so `except Exception` misses it."""


_armed = False


def _on_alarm(signum, frame):
    if _armed:
        raise _Timeout()


def describe(e: BaseException) -> str:
    """'TypeName: message' (or just the type name when there is no message)."""
    try:
        msg = _str(e)
    except Exception:
        msg = "<unprintable>"
    name = type(e).__name__
    text = f"{name}: {msg}" if msg else name
    return text[:MAX_ERROR_CHARS]


def run_snippet(code, ns: dict, timeout_s: float | None) -> str | None:
    """exec ``code`` in ``ns``; None when it raised nothing, else the error text.

    ``random`` is re-seeded with 0 first, so a program that draws random numbers scores the same
    every time (scores are cached by program text, and a reward should not be a coin flip)."""
    global _armed
    _seed(0)
    try:
        try:
            if timeout_s is not None:
                _armed = True  # re-fires every 0.1 s in case the code swallows the first one
                _setitimer(signal.ITIMER_REAL, timeout_s, 0.1)
            _exec(code, ns)
            err = None
        except _Timeout:
            err = "Timeout"
        except BaseException as e:  # SystemExit and KeyboardInterrupt are failures too
            err = describe(e)
        finally:
            _armed = False
            _setitimer(signal.ITIMER_REAL, 0)
    except _Timeout:  # fired while the error was being described
        err = "Timeout"
    return err


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
        data = (self.nonce + " " + _dumps(record) + "\n").encode()
        while data:
            data = data[_write(self.fd, data):]


_PARENT = os.getppid()  # 0 inside the job's pid namespace, else the sandbox runner


def _refuse_outward_signals(event: str, args) -> None:
    """Audit hook: model code may signal its own children, never its parent, its group, init or everyone.

    ``os.kill(os.getppid(), SIGKILL)`` then raises PermissionError, so the test that tried it fails
    (the pid namespace and the unprivileged uid already keep the signal from reaching the trainer).
    Audit hooks cannot be removed once added.
    """
    if event == "os.kill" and (args[0] <= 1 or args[0] == _PARENT):
        raise PermissionError(f"sandbox: os.kill({args[0]}, ...) is not allowed")
    if event == "os.killpg":
        raise PermissionError("sandbox: os.killpg is not allowed")


def run_job(job: dict, out: Reporter) -> None:
    timeout = job["limits"]["test_timeout_s"]
    sys.addaudithook(_refuse_outward_signals)
    code, err = compile_or_error(job["program"], "<program>")
    out.send(k="compiled", error=err)
    if code is None:
        return
    # The program's module; also __main__, so the harness is not reachable by import.
    module = types.ModuleType("__program__")
    sys.modules["__program__"] = sys.modules["__main__"] = module
    ns = module.__dict__
    if job["setup"]:
        setup_code, err = compile_or_error(job["setup"], "<setup>")
        err = err or run_snippet(setup_code, ns, None)
        if err:
            out.send(k="program", error=f"setup: {err}")
            return
    err = run_snippet(code, ns, timeout)
    out.send(k="program", error=err)
    if err:
        return
    for i, test in enumerate(job["tests"]):
        test_code, err = compile_or_error(test, f"<test {i}>")
        if test_code is not None:
            err = run_snippet(test_code, ns, timeout)
        elif not err.startswith("SyntaxError"):
            err = f"SyntaxError: {err}"
        out.send(k="test", i=i, error=err)


def _load_jail():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jail.py")
    spec = importlib.util.spec_from_file_location("_comarl_sandbox_jail", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _needed_paths() -> list[str]:
    """Dirs the interpreter reads from: prefixes and every sys.path entry."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p)
    return sorted(os.path.realpath(p) for p in paths if os.path.exists(p))


def main() -> None:
    result_fd = int(sys.argv[1])
    chunks = []
    while chunk := os.read(0, 1 << 20):
        chunks.append(chunk)
    job = json.loads(b"".join(chunks))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    out = Reporter(result_fd, job.pop("nonce"))
    try:
        jail = _load_jail()
        jail.isolate(job["workdir"], job["uid"], job["gid"], job["limits"], _needed_paths())
    except BaseException as e:
        out.send(k="setup_failed", error=describe(e))
        os._exit(3)
    signal.signal(signal.SIGALRM, _on_alarm)
    run_job(job, out)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    out.send(k="done")
    os._exit(0)  # skip atexit hooks the program may have registered


if __name__ == "__main__":
    main()
