"""Benchmark tests -> sandbox test snippets (one snippet = one counted test).

A snippet runs after the program in its namespace and passes if it raises
nothing (the sandbox's ``TestJob`` contract).
"""
from __future__ import annotations

import ast
import sys
import textwrap
from collections.abc import Sequence


def check_snippets(test: str, entry_point: str) -> list[str]:
    """Split a HumanEval-style ``def check(candidate)`` into snippets.

    When the body of ``check`` is only ``assert`` statements (docstrings
    aside), each assert becomes its own snippet:
    ``<module-level test code>; candidate = <entry_point>; assert ...`` so the
    pass fraction counts asserts. Otherwise (loops, local variables) the whole
    test is one snippet that ends with ``check(<entry_point>)``.
    """
    whole = [f"{test.rstrip()}\n\ncheck({entry_point})\n"]
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return whole
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        return whole
    check = checks[0]
    body = [s for s in check.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body or not all(isinstance(s, ast.Assert) for s in body):
        return whole
    arg = check.args.args[0].arg if check.args.args else "candidate"
    lines = test.splitlines()
    module = "\n".join(ast.get_source_segment(test, n) or "" for n in tree.body if n is not check)
    out = []
    for s in body:
        src = textwrap.dedent("\n".join(lines[s.lineno - 1:s.end_lineno]))
        out.append(f"{module}\n{arg} = {entry_point}\n{src}\n".lstrip("\n"))
    return out


def assert_snippets(test_list: list[str], test_imports: list[str] | None = None) -> list[str]:
    """MBPP ``test_list`` asserts (each with the ``test_imports`` lines) as snippets."""
    head = "\n".join(test_imports or [])
    return [f"{head}\n{t}\n".lstrip("\n") for t in test_list]


UNITTEST_SETUP = '''
import io as _io
import unittest as _unittest

__file__ = "test_classeval.py"  # ClassEval tests build paths from the test file's folder


def _run_test_class(cls):
    """Run one unittest.TestCase class; raise AssertionError naming failures.

    An assertion's message is not kept: unittest's ``first != second`` holds the expected value, and feedback
    that quotes it lets the next turn copy it (docs/coding.md, "What the feedback shows")."""
    suite = _unittest.TestLoader().loadTestsFromTestCase(cls)
    result = _unittest.TextTestRunner(stream=_io.StringIO(), verbosity=0).run(suite)
    bad = result.failures + result.errors
    if bad or result.testsRun == 0:
        names = ", ".join(t.id().split(".")[-1] for t, _ in bad[:5])
        first = bad[0][1].strip().splitlines()[-1] if bad else "no tests ran"
        if first.startswith("AssertionError"):
            first = "AssertionError (expected values not shown)"
        raise AssertionError(f"{len(bad)}/{result.testsRun} failed ({names}): {first}")
'''


def unittest_snippets(test: str, test_classes: list[str], imports: Sequence[str] = ()) -> tuple[list[str], str]:
    """ClassEval: one snippet per ``unittest.TestCase`` class, plus the trusted setup.

    Each snippet defines the benchmark's test module and runs one class with
    ``_run_test_class``. The setup (run by the sandbox as trusted code) defines that
    runner and the benchmark's own ``import_statement`` lines: tests read those names
    (``datetime``, ``json``) from the module they ran in, so here they are the harness's,
    never the program's. Returns (snippets, setup).
    """
    return ([f"{test.rstrip()}\n\n_run_test_class({name})\n" for name in test_classes],
            UNITTEST_SETUP + safe_imports(list(imports)))


def prompt_setup(prompt: str, entry_point: str) -> str:
    """The prompt's own code other than the function to write: imports, helpers, constants.

    Benchmark tests call the prompt's helpers (HumanEval/38 checks ``decode_cyclic`` with the
    prompt's ``encode_cyclic``; HumanEval/32 ``find_zero`` with ``poly``). They run as trusted
    setup, so a program that redefines a helper changes only its own copy."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    keep = [n for n in tree.body
            if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point)
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return "\n".join(ast.get_source_segment(prompt, n) or "" for n in keep).strip() + ("\n" if keep else "")


def import_lines(statement) -> list[str]:
    """A benchmark's ``import_statement`` (a string or a list of lines) as import lines."""
    text = "\n".join(statement) if isinstance(statement, (list, tuple)) else str(statement or "")
    return [l.strip() for l in text.splitlines() if l.strip().startswith(("import ", "from "))]


def program_imports(program: str) -> list[str]:
    """The top-level import statements of ``program`` (text only; nothing runs), one per line."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [ast.unparse(n) for n in tree.body
            if isinstance(n, (ast.Import, ast.ImportFrom)) and not getattr(n, "level", 0)]


def third_party(lines: list[str]) -> tuple[str, ...]:
    """Top-level names imported by ``lines`` that are not in the standard library (the packages a job needs)."""
    names: set[str] = set()
    for line in lines:
        try:
            tree = ast.parse(line)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return tuple(sorted(n for n in names if n not in sys.stdlib_module_names))


def safe_imports(lines: list[str]) -> str:
    """The import lines as trusted setup, each guarded: a package missing here fails the tests that need it,
    not the whole job's setup (the reference program imports them too and fails on its own)."""
    return "".join(f"try:\n    {l}\nexcept ImportError:\n    pass\n" for l in lines)
