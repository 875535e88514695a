"""Every code block of the docs marked runnable runs as written.

A block is marked by the line `<!-- runnable -->` right before its opening fence (invisible on the site and
on GitHub). Python blocks run in this process with a fresh namespace, shell blocks under `bash -e`; both in
an empty folder holding links to the repository's `configs/` and `tests/data/` (so the paths a reader types
from the repository root work), with `comarl` on the PATH. They use the tiny models: seconds each.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int  # 1-based line of the opening fence
    language: str
    code: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def runnable_snippets(text: str, page: str) -> list[Snippet]:
    """The blocks of ``text`` marked runnable; a marker not followed by a fenced block is an error."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = lines[i + 1] if i + 1 < len(lines) else ""
        m = re.match(r"^(`{3,}|~{3,})\s*([\w+-]*)", fence)
        if not m:
            raise ValueError(f"{page}:{i + 1}: {MARKER} must be right before a fenced code block")
        if m.group(2) not in LANGUAGES:
            raise ValueError(f"{page}:{i + 2}: a runnable block must be python or bash, got {m.group(2)!r}")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].strip() == m.group(1)), None)
        if end is None:
            raise ValueError(f"{page}:{i + 2}: the runnable block is never closed")
        out.append(Snippet(page, i + 2, LANGUAGES[m.group(2)], "\n".join(lines[i + 2:end]) + "\n"))
    return out


def all_snippets() -> list[Snippet]:
    pages = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    return [s for p in pages for s in runnable_snippets(p.read_text(), str(p.relative_to(ROOT)))]


SNIPPETS = all_snippets()


def test_marker_finds_blocks_and_refuses_a_stray_one():
    text = ("intro\n<!-- runnable -->\n```python\nx = 1\n```\n\n```python\nnot marked\n```\n"
            "<!-- runnable -->\n~~~bash\necho hi\n~~~\n")
    found = runnable_snippets(text, "t.md")
    assert [(s.line, s.language, s.code) for s in found] == [(3, "python", "x = 1\n"), (11, "bash", "echo hi\n")]
    with pytest.raises(ValueError, match="t.md:1: <!-- runnable --> must be right before"):
        runnable_snippets("<!-- runnable -->\n\n```python\nx\n```\n", "t.md")
    with pytest.raises(ValueError, match="python or bash"):
        runnable_snippets("<!-- runnable -->\n```yaml\na: 1\n```\n", "t.md")


def test_the_docs_have_runnable_python_and_shell():
    assert {s.language for s in SNIPPETS} == {"python", "bash"}
    assert any("comarl.Trainer" in s.code for s in SNIPPETS)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "comarl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m comarl "$@"\n')
    shim.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_runnable_snippet(snippet: Snippet, workdir: Path):
    if snippet.language == "python":
        exec(compile(snippet.code, str(snippet), "exec"), {"__name__": "__main__"})
        return
    env = dict(os.environ, PATH=f"{workdir / '.bin'}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", snippet.code], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"{snippet} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
