"""Text handling of the paper's function-level reward (preset ``paper``), written to match it exactly.

The MAGRPO paper scored HumanEval, CoopHumanEval and MBPP with line-based
regular expressions, not a parser. Each function here reproduces one of those
steps, quirks included (they change rewards, so they are kept on purpose):

- ``keep_def_blocks``: only ``def`` blocks survive; a nested ``def`` starts a new
  block, so the lines of the outer function after it are lost; module-level
  code (imports, constants, classes) is dropped.
- ``function_text``: the named function from those blocks (the last one wins).
- ``has_return``: "defined" means the function's text matches ``return\\s+``,
  even inside a comment or a string.
- ``paper_program``: the prompt's import lines + the helper ``aux`` + the entry
  point; other helper functions an agent wrote are not part of the program.
- ``paper_test_snippets`` (single-line asserts that mention ``candidate``, by
  regex; asserts spread over several lines are cut to their first line).
- ``uses_helper`` / ``is_wrapper`` / ``ignores_helper``: regexes over the main
  function's text (a mention of ``aux(`` in a docstring counts as a call; the
  ignored-result check only fires for ``aux (x)`` written with one space and a
  one-character argument).

Everything is pure text processing: nothing here runs model code.
"""
from __future__ import annotations

import re

_DEF_LINE = re.compile(r"^(\s*)def\s+\w+\s*\(")
_FENCE_PY = re.compile(r"```python\s*\n?")
_FENCE = re.compile(r"```\s*\n?")
_PROSE = re.compile(r"^[A-Z][a-z].*[.!?:]$")
_CODE_MARKS = ("def ", "return ", "if ", "for ", "while ", "=", "(", ")", "[", "]")
_IMPORT_LINES = (re.compile(r"^from\s+[\w\.]+\s+import\s+.*$"), re.compile(r"^import\s+[\w\.,\s]+$"))
_CHECK_BODY = re.compile(r"def check\(candidate\):(.*?)(?=\n\ndef|\Z)", re.DOTALL)
_ASSERT_CANDIDATE = re.compile(r"assert\s+[^\n]*candidate[^\n]*")
_EQUALITY = re.compile(r"assert\s+(\w+)\(([^)]*)\)\s*==\s*(.+)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _continues(line: str, base: int) -> bool:
    """A line that belongs to a block opened at indent ``base``: blank, deeper by spaces, or tab-led."""
    return line.strip() == "" or line.startswith(" " * (base + 1)) or line.startswith("\t")


def keep_def_blocks(text: str) -> str:
    """Only the ``def`` blocks of ``text`` (code fences removed), joined by a blank line; "" if none.

    A line at or below the block's indent ends it, except a line that opens a
    docstring: that line and every line up to the closing quotes are kept.
    Afterwards lines that read like an English sentence (capital letter first,
    final ``.!?:``, no code marks) are dropped.
    """
    if not isinstance(text, str) or not text:
        return ""
    text = _FENCE.sub("", _FENCE_PY.sub("", text))
    lines = text.split("\n")
    blocks: list[list[str]] = []
    current: list[str] | None = None
    base = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        bare = line.strip()
        if _DEF_LINE.match(line):
            if current:
                blocks.append(current)
            current, base = [line], _indent(line)
        elif current is not None:
            if _continues(line, base):
                current.append(line)
            elif bare.startswith(('"""', "'''")):
                current.append(line)
                quote = bare[:3]
                if not (bare.endswith(quote) and len(bare) > 3):
                    i += 1
                    while i < len(lines):
                        current.append(lines[i])
                        if quote in lines[i]:
                            break
                        i += 1
            else:
                blocks.append(current)
                current = None
        i += 1
    if current:
        blocks.append(current)
    joined = "\n\n".join("\n".join(b) for b in blocks)
    kept = [l for l in joined.split("\n") if not _reads_as_prose(l)]
    result = "\n".join(kept).strip()
    return result if re.search(r"def\s+\w+\s*\(", result) else ""


def _reads_as_prose(line: str) -> bool:
    bare = line.strip()
    return (bool(bare) and not bare.startswith(("#", '"""', "'''"))
            and not any(mark in line for mark in _CODE_MARKS) and bool(_PROSE.match(bare)))


def function_text(text: str, name: str) -> str:
    """The text of function ``name`` among ``keep_def_blocks(text)``; "" if absent.

    A later ``def name`` (at any indent) restarts the capture; the capture ends at
    the first line that is neither blank nor deeper than the ``def``.
    """
    if not text or not name:
        return ""
    start = re.compile(rf"^(\s*)def\s+{re.escape(name)}\s*\(")
    captured: list[str] | None = None
    base = 0
    for line in keep_def_blocks(text).split("\n"):
        if start.match(line):
            captured, base = [line], _indent(line)
        elif captured is not None:
            if not _continues(line, base):
                break
            captured.append(line)
    return "\n".join(captured or []).strip()


def has_return(function: str) -> bool:
    """The paper's "defined": non-empty text containing ``return`` followed by whitespace."""
    return bool(function) and re.search(r"return\s+", function) is not None


def prompt_imports(prompt: str) -> str:
    """Import lines of the task prompt (stripped, first occurrence of each), one per line."""
    seen: list[str] = []
    for line in (prompt or "").split("\n"):
        line = line.strip()
        if any(p.match(line) for p in _IMPORT_LINES) and line not in seen:
            seen.append(line)
    return "\n".join(seen)


def paper_program(helper_fn: str, main_fn: str, imports: str) -> str:
    """The program the paper tests: imports, then the helper, then the entry point (each re-cleaned)."""
    parts = [imports, keep_def_blocks(helper_fn), keep_def_blocks(main_fn)]
    return "\n\n".join(p for p in parts if p)


def paper_test_lines(test: str | None, entry_point: str) -> list[str]:
    """Single-line asserts of ``def check(candidate)`` that mention ``candidate``, renamed to ``entry_point``.

    Only lines that start with ``assert`` + whitespace count (``assert(...)`` does
    not); duplicates are dropped; every ``candidate`` in the line (strings too)
    becomes the entry point's name.
    """
    if not test or not entry_point:
        return []
    found = _CHECK_BODY.search(test)
    if not found:
        return []
    out: list[str] = []
    for line in found.group(1).strip().split("\n"):
        line = line.strip()
        if line.startswith("assert") and "candidate" in line and _ASSERT_CANDIDATE.match(line) and line not in out:
            out.append(line)
    return [line.replace("candidate", entry_point) for line in out]


def paper_test_snippets(test: str | None, entry_point: str) -> list[str]:
    """Sandbox snippets (one counted test each) for ``paper_test_lines``.

    When a line reads ``assert name(args) == expected`` (``args`` without ``)``),
    the paper first evaluated ``name(args)`` and ``expected`` on their own, then
    ran the assert: the call runs twice, and a fragment that is no expression on
    its own fails the test. The snippet repeats those steps in the same order.
    """
    out = []
    for line in paper_test_lines(test, entry_point):
        m = _EQUALITY.search(line)
        if m:
            call = f"{m.group(1)}({m.group(2)})"
            out.append(f"eval({call!r})\neval({m.group(3)!r})\n{line}\n")
        else:
            out.append(f"{line}\n")
    return out


PAPER_SETUP = "import math\n"
"""The paper ran programs in a namespace that already held ``math``."""


def paper_pass_count(errors: list[str | None], max_timeouts: int = 3) -> int:
    """Tests passed, counting as the paper did: after ``max_timeouts`` timed-out tests the rest are not run."""
    passed = timeouts = 0
    for err in errors:
        if timeouts >= max_timeouts:
            break
        if err is None:
            passed += 1
        elif err == "Timeout":
            timeouts += 1
    return passed


def uses_helper(main_fn: str, helper: str = "aux") -> bool:
    """``helper(`` (word boundary, optional spaces) anywhere in the main function's text."""
    return bool(main_fn) and bool(helper) and re.search(rf"\b{re.escape(helper)}\s*\(", main_fn) is not None


def _code_lines(function: str) -> list[str]:
    """Stripped body lines without blanks, comments, the ``def`` line and docstring-like lines."""
    out: list[str] = []
    in_doc = False
    for line in function.split("\n"):
        bare = line.strip()
        if not bare:
            continue
        if bare.startswith(('"""', "'''")):
            quote = bare[:3]
            if not (bare.endswith(quote) and len(bare) > 3):
                in_doc = True  # also for a closing quote alone on its line: the paper re-opened there
            continue
        if in_doc:
            in_doc = '"""' not in bare and "'''" not in bare
            continue
        if bare.startswith("#") or bare.startswith("def "):
            continue
        out.append(bare)
    return out


def is_wrapper(main_fn: str, helper: str = "aux") -> bool:
    """The paper's thin wrapper: no code lines, ``return ...helper...`` alone, or ``v = helper(...)`` + ``return v``."""
    if not main_fn or not helper:
        return False
    lines = _code_lines(main_fn)
    if not lines:
        return True
    if len(lines) == 1:
        return lines[0].startswith("return ") and helper in lines[0]
    if len(lines) == 2:
        name = assigned_from(lines[0], helper)
        return name is not None and lines[1] == f"return {name}"
    return False


def assigned_from(line: str, helper: str) -> str | None:
    """What the paper's ``re.search(rf"(\\w+)\\s*=\\s*{helper}\\s*\\(", line)`` captures, found in one pass
    (the regex took quadratic time on a long word): the first whole run of word characters followed by
    ``= helper(`` (a shorter run cannot be followed by ``=``, and a match starts at its run's start)."""
    tail = re.compile(rf"\s*=\s*{re.escape(helper)}\s*\(")
    for m in re.finditer(r"\w+", line):
        if tail.match(line, m.end()):
            return m.group(0)
    return None


def ignores_helper(main_fn: str, helper: str = "aux") -> bool:
    """The paper's ignored-result check: a line that is only ``helper`` + one whitespace + ``(c)`` (one char)."""
    if not main_fn or helper not in main_fn:
        return False
    h = re.escape(helper)
    call = re.compile(rf"{h}\s\([^)]\)")
    bad = (re.compile(rf"^{h}\s\([^)]\)$"), re.compile(rf"^{h}\s\([^)]\);?\s$"), re.compile(rf"^\s{h}\s\([^)]\)\s*$"))
    for line in main_fn.split("\n"):
        bare = line.strip()
        if bare and not bare.startswith("#") and call.search(bare) and any(p.search(bare) for p in bad):
            return True
    return False
