"""ClassEval as the MAGRPO paper scored it (preset ``paper``): method split, merge, reward inputs.

Steps, each matching the paper's code on every input (quirks kept, because
they change rewards):

- ``incomplete_methods``: methods of the skeleton's first class (a class
  written ``class Name:``, without bases) whose body is empty, ``pass`` or
  ``raise NotImplementedError(...)`` after an optional docstring.
- ``param_split``: a method with exactly one parameter (``self``) goes to
  agent 0, every other to agent 1; agents 2.. get nothing; one agent gets all.
- ``method_snippets``: ``def name(`` blocks of the first fenced block (or the
  whole text), each running to the next ``def`` line at any indent, so a
  nested function cuts its method short and trailing code joins the last one.
- ``merge_into_skeleton``: each chosen method replaces its stub in the
  skeleton by line regions (decorators above a stub are replaced, the stub
  itself is not); then tabs are expanded, lines right-stripped and the file
  reformatted with ``autopep8`` (aggressive level 1), which can repair
  indentation. With no method chosen the skeleton is used as it is.
- The program under test is the merged class followed by the benchmark's test
  module; the test count is the number of ``test*`` methods of its
  ``TestCase`` classes.

Nothing here runs model code; ``autopep8`` only rewrites text.
"""
from __future__ import annotations

import ast
import re
from typing import Mapping, Sequence

_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'", "\u2013": "-", "\u2014": "-",
                        "\u2026": "...", "\u00a0": " ", "\u200b": None})
_ANY_DEF = re.compile(r"^\s*def\s+[A-Za-z_]")
_NAMED_DEF = re.compile(r"^\s*def\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(.*")


def ascii_punctuation(text: str) -> str:
    """Smart quotes, dashes, ellipsis and odd spaces -> ASCII (what the paper did before parsing skeletons)."""
    return text.translate(_SMART) if isinstance(text, str) and text else text


def class_name(skeleton: str) -> str | None:
    """Name of the first ``class Name:`` (no bases) in the skeleton."""
    m = re.search(r"\bclass\s+([A-Za-z_][A-Za-z0-9_]*)\s*:\s*", ascii_punctuation(skeleton))
    return m.group(1) if m else None


def _first_class(skeleton: str) -> ast.ClassDef | None:
    text = ascii_punctuation(skeleton)
    name = class_name(text)
    if not name:
        return None
    try:
        tree = ast.parse(text)
    except Exception:
        return None
    # the first top-level class of that name
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _is_stub(fn: ast.FunctionDef) -> bool:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return True
    if len(body) != 1:
        return False
    s = body[0]
    if isinstance(s, ast.Pass):
        return True
    return (isinstance(s, ast.Raise) and isinstance(s.exc, ast.Call)
            and getattr(s.exc.func, "id", None) == "NotImplementedError")


def incomplete_methods(skeleton: str) -> list[str]:
    """Methods the agents must write, in skeleton order (see module docstring)."""
    cls = _first_class(skeleton)
    if cls is None:
        return []
    return [n.name for n in cls.body if isinstance(n, ast.FunctionDef) and _is_stub(n)]


def _param_count(args: ast.arguments) -> int:
    return (len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
            + (args.vararg is not None) + (args.kwarg is not None))


def param_split(skeleton: str, num_agents: int) -> dict[str, int]:
    """Method -> agent: one parameter (``self`` alone) -> 0, else -> 1; one agent takes all."""
    cls = _first_class(skeleton)
    if cls is None:
        return {}
    counts = {n.name: _param_count(n.args) for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {m: 0 if num_agents <= 1 or counts.get(m, -1) == 1 else 1 for m in incomplete_methods(skeleton)}


def _unfence(text: str) -> str:
    s = (text or "").replace("\r\n", "\n").strip()
    start = s.find("```")
    if start == -1:
        return s
    newline = s.find("\n", start + 3)
    if newline == -1:
        return ""
    end = s.find("```", newline + 1)
    return (s[newline + 1:end] if end != -1 else s[newline + 1:]).strip()


def method_snippets(text: str, allowed: set[str] | frozenset[str]) -> dict[str, str]:
    """``name -> "def name(...)..."`` for the allowed names found in ``text`` (the last one wins)."""
    if not allowed:
        return {}
    lines = _unfence(text or "").splitlines()
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        m = _NAMED_DEF.match(lines[i])
        if not m or m.group(1) not in allowed:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not _ANY_DEF.match(lines[j]):
            j += 1
        out[m.group(1)] = "\n".join(l.rstrip() for l in lines[i:j]).strip()
        i = j
    return out


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except Exception:
        return False


def chosen_methods(texts: Sequence[str], methods: Sequence[str], split: Mapping[str, int]) -> dict[str, str]:
    """Each method as written by the agent it is assigned to, if that text parses on its own."""
    wanted = set(methods)
    out: dict[str, str] = {}
    for agent, text in enumerate(texts):
        mine = {m for m, a in split.items() if a == agent and m in wanted}
        for name, code in method_snippets(text or "", mine).items():
            if _parses(code):
                out[name] = code
    return out


def overlap_count(texts: Sequence[str], methods: Sequence[str]) -> int:
    """Methods that two or more agents wrote (whatever the split says)."""
    hits: dict[str, int] = {}
    for text in texts:
        for name in method_snippets(text or "", set(methods)):
            hits[name] = hits.get(name, 0) + 1
    return sum(1 for n in hits.values() if n > 1)


def _spaces(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _class_region(lines: list[str], name: str) -> tuple[int, int, int]:
    """(header line, end exclusive, body indent) of ``class name:``; header -1 if absent."""
    header = re.compile(rf"^\s*class\s+{re.escape(name)}\s*:\s*")
    start = next((i for i, l in enumerate(lines) if header.match(l)), -1)
    if start == -1:
        return -1, -1, 0
    indent = next((_spaces(l) for l in lines[start + 1:] if l.strip()), 4)
    end = next((k for k in range(start + 1, len(lines))
                if lines[k].strip() and _spaces(lines[k]) < indent and not lines[k].lstrip().startswith("@")),
               len(lines))
    return start, end, indent


def _method_region(lines: list[str], cstart: int, cend: int, cindent: int, name: str) -> tuple[int, int, int]:
    """(first line incl. decorators above, end exclusive, def indent); first -1 if absent."""
    pat = re.compile(r"^\s*def\s+" + re.escape(name) + r"\s*\(")
    for i in range(cstart + 1, cend):
        if pat.match(lines[i]):
            indent = _spaces(lines[i])
            start = i
            while start - 1 > cstart and lines[start - 1].lstrip().startswith("@"):
                start -= 1
            # the end search starts after the first line of the region, so with decorators
            # it stops at the stub's own def line (the paper's behaviour)
            end = next((j for j in range(start + 1, cend) if _ANY_DEF.match(lines[j]) and _spaces(lines[j]) == indent),
                       cend)
            return start, end, indent
    return -1, -1, cindent + 4


def _indented(block: str, n: int) -> list[str]:
    return [(" " * n + l) if l.strip() else l for l in block.splitlines()]


def reformat(text: str) -> str:
    """The paper's normalisation: LF line ends, tabs -> 4 spaces, right-stripped lines, autopep8 (aggressive 1)."""
    try:
        import autopep8
    except ImportError as e:  # pragma: no cover - autopep8 is a dependency of the coding extra
        raise ImportError("env.args.preset=paper on classeval needs autopep8 (pip install autopep8)") from e
    s = (text or "").replace("\r\n", "\n").replace("\r", "\n").expandtabs(4)
    s = "\n".join(l.rstrip() for l in s.splitlines())
    fixed = autopep8.fix_code(s, options={"aggressive": 1})
    return fixed if isinstance(fixed, str) and fixed else s


def merge_into_skeleton(skeleton: str, name: str, methods: Mapping[str, str]) -> str:
    """The skeleton with each stub replaced by its method (see module docstring)."""
    if not methods:
        return skeleton
    lines = skeleton.splitlines()
    cstart, cend, cindent = _class_region(lines, name)
    if cstart < 0:
        return skeleton
    starts = {m: _method_region(lines, cstart, cend, cindent, m)[0] for m in methods}
    order = sorted((s if s >= 0 else 10 ** 9, m) for m, s in starts.items())  # skeleton order, new ones last
    for _, m in order:
        code = methods[m]
        if not code:
            continue
        cstart, cend, cindent = _class_region(lines, name)
        s, e, indent = _method_region(lines, cstart, cend, cindent, m)
        if s < 0:
            lines[cend:cend] = _indented(code.strip(), cindent + 4) + [""]
        else:
            lines[s:e] = _indented(code.strip(), indent)
    merged = "\n".join(lines)
    formatted = reformat(merged if merged.endswith("\n") else merged + "\n")
    return formatted if formatted.endswith("\n") else formatted + "\n"


def program_with_tests(merged: str, test: str) -> str:
    """The module the paper ran: the merged class, a blank line, then the test module."""
    return (merged or "").rstrip() + "\n\n" + (test or "").lstrip()


def compiles(source: str) -> bool:
    """``compile()`` succeeds (stricter than parsing: e.g. ``return`` outside a function fails)."""
    try:
        compile(source, "<combined>", "exec")
        return True
    except Exception:
        return False


def test_methods(test: str) -> list[tuple[str, str]]:
    """(TestCase class, test method) pairs in the order the reference ran them.

    ``unittest.defaultTestLoader.loadTestsFromModule`` walks ``dir(module)``, so the classes come in
    alphabetical order (not source order), each with its test methods sorted by name. Order matters
    where tests share state: files in the work dir, class attributes (ClassEval_67)."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return []
    out: list[tuple[str, str]] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [ast.unparse(b) for b in node.bases]
        if not any(b == "TestCase" or b.endswith(".TestCase") for b in bases):
            continue
        names = sorted(n.name for n in node.body
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test"))
        out.extend((node.name, n) for n in names)
    return sorted(out, key=lambda pair: pair[0])  # stable: methods stay sorted within a class


RUN_ONE_SETUP = '''
import unittest as _unittest

__file__ = "task_module_payload.py"


class _PaperVerdict(AssertionError):
    """A test method that did not pass, with how many failures, errors and skips it produced."""


def _paper_run_one(cls, name):
    """Run one test method; raise _PaperVerdict unless it ran and passed (not failed, errored or skipped).

    The message starts with ``bad=N``: a test that fails in its body and again in ``tearDown`` counts
    2, as the reference's passed = run - failures - errors - skipped counts it."""
    result = _unittest.TestResult()
    _unittest.TestSuite([cls(name)]).run(result)
    if result.testsRun != 1:
        raise _PaperVerdict("bad=1; did not run")
    bad = result.failures + result.errors
    count = len(bad) + len(result.skipped)
    if count:
        first = bad[0][1].strip().splitlines()[-1] if bad else "skipped"
        raise _PaperVerdict(f"bad={count}; {first}")
'''

VERDICT = re.compile(r"^_PaperVerdict: bad=(\d+);")


def bad_count(error: str | None) -> int:
    """Failures + errors + skips one snippet stands for: 0 when it passed, the ``_paper_run_one`` count (at least
    1) when it says so, else 1. Only a count of 1 or more is read from a message, so nothing a program can
    make a message say raises a score."""
    if error is None:
        return 0
    m = VERDICT.match(error)
    return max(1, int(m.group(1))) if m else 1


def paper_class_counts(errors: list[str | None], program_stdout: str = "", max_timeouts: int = 3) -> tuple[int, int]:
    """(tests run, passed) as the reference counted them: passed = run - failures - errors - skipped
    (negative when tests fail twice), the run stopping at the ``max_timeouts``-th timed-out test; (0, 0)
    when the program printed to stdout while it was imported: the reference printed its JSON result to the
    same stdout, could not parse it, and counted no test."""
    if program_stdout.strip():
        return 0, 0
    run = bad = timeouts = 0
    for err in errors:
        run += 1
        bad += bad_count(err)
        timeouts += err == "Timeout"
        if timeouts >= max_timeouts:
            break
    return run, run - bad


def test_snippets(test: str) -> list[str]:
    """One sandbox snippet per test method: the test module, then one method run.

    The test module is trusted code (it runs in the sandbox's harness, the program's class reaches it
    as a reference), so the program cannot see or patch it; the reference ran it in the program's module.
    """
    return [f"{test.rstrip()}\n\n_paper_run_one({cls}, {name!r})\n" for cls, name in test_methods(test)]
