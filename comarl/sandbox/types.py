"""The records that go in and out of the sandbox: limits, jobs and reports."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied to every job's child process.

    Attributes:
        test_timeout_s: wall clock per test snippet (and for the program body);
            the job is killed when a phase runs past it by more than 1 s.
        total_timeout_s: wall clock for the whole job (start-up, program and all
            tests); the child's process group is killed after it.
        cpu_time_s: RLIMIT_CPU of the child, in seconds.
        memory_mb: MiB: the job cgroup's memory limit over all its processes
            where cgroups are usable, and RLIMIT_AS of each process.
        file_size_mb: RLIMIT_FSIZE (largest file it may write), in MiB.
        max_processes: the job cgroup's pids.max where cgroups are usable,
            and RLIMIT_NPROC of the job's own uid when privileges are dropped.
        open_files: RLIMIT_NOFILE of every process of the worker; with
            ``max_processes`` it bounds the descriptors of the whole job
            (256 x 64 = 16,384 by default, under 1% of a typical fs.file-max).
        cpus: the job's CPU quota in CPUs (the slot cgroup's ``cpu.max`` /
            ``cpu.cfs_quota_us``): however many processes the job forks, it
            gets at most this much CPU time per 100 ms, so it cannot starve
            another slot's job. Where the cpu controller is not usable the
            job runs without a quota (``Sandbox.cpu_bounded``).
        max_output_bytes: bytes of stdout and of stderr kept; the rest is read
            and discarded.
        drop_privileges: when the trainer runs as root, run the child as an
            unprivileged uid/gid reserved for one worker.
        no_network: best effort: put the child in a new, empty network
            namespace where the OS allows it.
    """

    test_timeout_s: float = 3.0
    total_timeout_s: float = 20.0
    cpu_time_s: int = 20
    memory_mb: int = 1024
    file_size_mb: int = 16
    max_processes: int = 64
    open_files: int = 256
    cpus: float = 1.0
    max_output_bytes: int = 65536
    drop_privileges: bool = True
    no_network: bool = True

    def __post_init__(self) -> None:
        for name in ("test_timeout_s", "total_timeout_s", "cpu_time_s", "memory_mb",
                     "file_size_mb", "max_processes", "open_files", "cpus", "max_output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class HelperProgram:
    """Another agent's code, run in a worker process of its own (docs/sandbox.md, "Programs of several agents").

    Attributes:
        program: the helper agent's code (with the imports and prompt context it needs); the job's ``setup``
            runs before it, as before the main program.
        name: the one name of it the main program sees: a function the helper defines. The main program gets a
            stand-in of that name, bound before its body runs; calling it asks the harness, which calls the
            helper's function in the helper's process and answers with its result. Only plain data crosses, both
            ways (arguments, results, and lists a call changed); nothing of either program can reach, rebind or
            trace the other's code. The harness counts the calls per test (``TestReport.helper_calls``).
        ablate: after the tests, when the helper was called, run the passing tests once more against a fresh copy
            of the main program whose helper calls are answered with altered results (a number plus one, a
            list one shorter, a flipped bool...) without asking the helper, and report which tests needed the
            helper's answers (``TestReport.helper_needed``): its result reached the output.
    """

    __test__ = False

    program: str
    name: str
    ablate: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name.isidentifier() and not self.name.startswith("__")):
            raise ValueError(f"HelperProgram.name: {self.name!r} is not a plain identifier")


@dataclass(frozen=True)
class Pinned:
    """A method of the program's class that must stay the function defined in ``first_line``..``last_line`` of
    the program (one agent's part of a merged class): after the body and after every test the harness asks where
    ``class_name.attribute``'s code was defined; anything else is reported in ``TestReport.rebound``."""

    __test__ = False

    class_name: str
    attribute: str
    first_line: int
    last_line: int


@dataclass(frozen=True)
class TestJob:
    """One program and the test snippets that check it.

    Attributes:
        program: the code under test (defines functions/classes).
        tests: trusted code snippets, each exec'd with its own timeout in a
            namespace of the harness where the program's top-level names are
            references to the program's objects (docs/sandbox.md); a snippet
            passes if it raises nothing.
        setup: trusted code run before the program (imports, helpers), in the
            program's process and again in the tests' namespace (after the
            program's names, so it overrides them): the benchmark's own imports
            and the prompt's helpers belong here, never in the program.
        entry_points: the program's names the tests may use (the tested
            function or class), even where one shadows a builtin (MBPP's
            ``def sum(a, b)``); no other name of the program reaches the tests,
            except that a name the program bound to a standard-library module
            becomes the harness's own copy of that module. Empty: every name the
            snippets mention that is not a builtin (fine for tests that import
            what they use; set it for benchmark tests).
        packages: import names of the third-party packages the program may
            import (``numpy``); with their dependencies, these are the only
            site-packages entries the worker sees (docs/sandbox.md).
        helper: another agent's program, run in its own process, whose one
            function the program calls across (:class:`HelperProgram`).
        pinned: methods of the program that must stay the functions one
            agent's part of the program defined (:class:`Pinned`).
    """

    __test__ = False  # not a pytest test class

    program: str
    tests: tuple[str, ...]
    setup: str = ""
    entry_points: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    helper: HelperProgram | None = None
    pinned: tuple[Pinned, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.tests, str):
            raise TypeError("TestJob.tests must be a tuple of snippets, got one str")
        if isinstance(self.entry_points, str):
            raise TypeError("TestJob.entry_points must be a tuple of names, got one str")
        if isinstance(self.packages, str):
            raise TypeError("TestJob.packages must be a tuple of import names, got one str")
        object.__setattr__(self, "tests", tuple(self.tests))
        object.__setattr__(self, "entry_points", tuple(self.entry_points))
        object.__setattr__(self, "packages", tuple(self.packages))
        object.__setattr__(self, "pinned", tuple(self.pinned))
        if self.helper is not None and not isinstance(self.helper, HelperProgram):
            raise TypeError(f"TestJob.helper must be a HelperProgram, got {type(self.helper).__name__}")
        for name in self.entry_points:
            if not (isinstance(name, str) and name.isidentifier() and not name.startswith("__")):
                raise ValueError(f"TestJob.entry_points: {name!r} is not a plain identifier")


@dataclass
class TestReport:
    """What happened to one job.

    Attributes:
        compiled: the program parsed (``compile()`` succeeded).
        syntax_error: e.g. ``"line 3: invalid syntax"`` when not compiled.
        program_error: exception raised by the setup or program body, e.g.
            ``"NameError: name 'x' is not defined"``; also set when the process
            died or timed out before the program body finished.
        passed: one bool per test snippet.
        errors: per test: None when passed, else e.g. ``"AssertionError: msg"``,
            ``"Timeout"``, ``"ZeroDivisionError: division by zero"``.
        timed_out: the total timeout was hit and the process group killed.
        crashed: the child died without reporting the end of the job
            (segfault, ``os._exit``, killed by a resource limit...).
        stdout: the child's stdout, cut at ``max_output_bytes``.
        stderr: the child's stderr, cut at ``max_output_bytes``.
        duration_s: wall clock of the whole job in the parent.
        program_stdout: what the program printed to stdout while its setup
            and body ran, before any test (all of ``stdout`` when the body did
            not finish); the ClassEval paper preset reads it.
        isolation: notes on what isolated the job (``"seccomp: on (...)"``,
            ``"filesystem: private root ..."``, ``"network: new namespace"``);
            a guarantee that could not be had says so here (docs/sandbox.md).
        helper_error: with a ``TestJob.helper``: why its program could not
            serve (``"SyntaxError: ..."``, ``"NameError: the helper program
            defines no 'aux'"``), else None.
        helper_calls: with a helper: per test, how many times the program
            called it (calls while the program body ran are not counted here).
        helper_needed: with a helper that was called and ``ablate``: per test,
            True when it passed and failed once the helper's answers were
            altered; all False otherwise.
        rebound: ``TestJob.pinned`` attributes found bound to code defined
            elsewhere (``"Class.method"``), after the body or any test.
    """

    __test__ = False

    compiled: bool
    syntax_error: str | None
    program_error: str | None
    passed: list[bool]
    errors: list[str | None]
    timed_out: bool
    crashed: bool
    stdout: str
    stderr: str
    duration_s: float
    isolation: tuple[str, ...] = ()
    program_stdout: str = ""
    helper_error: str | None = None
    helper_calls: list[int] = field(default_factory=list)
    helper_needed: list[bool] = field(default_factory=list)
    rebound: list[str] = field(default_factory=list)

    @property
    def pass_fraction(self) -> float:
        """Fraction of test snippets passed; 0.0 for a job without tests."""
        return sum(self.passed) / len(self.passed) if self.passed else 0.0
