"""docs/faq.md quotes the messages the code writes: each heading's quoted pieces occur, in order, in one source file.

A heading like ``### `no checkpoint in ... verifies` `` stands for an f-string whose placeholder the ``...``
replaces; a reworded message makes its entry fail here instead of leaving a page that names an error nobody
sees any more. A few messages are also produced for real, so the reading of the source is checked too.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from comarl.config import load_config
from comarl.core.config_io import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "faq.md").read_text(encoding="utf-8")
SOURCES = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in (ROOT / "comarl").rglob("*.py")}


def quoted_headings(markdown: str) -> list[tuple[str, list[str]]]:
    """(heading, its pieces) for every heading that quotes a message in code spans."""
    out = []
    for line in markdown.splitlines():
        if line.startswith("### ") and "`" in line:
            spans = re.findall(r"`([^`]+)`", line)
            out.append((line[4:], [piece for s in spans for piece in s.split(" ... ")]))
    return out


def written_in(pieces: list[str], source: str) -> bool:
    """Whether ``pieces`` occur in ``source`` in this order (an f-string's literal parts, possibly on several
    lines of one statement)."""
    at = 0
    for piece in pieces:
        at = source.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return True


HEADINGS = quoted_headings(PAGE)


def test_the_page_quotes_messages():
    assert len(HEADINGS) >= 25
    assert quoted_headings("### `a ... b`\n### Plain question\n### `c` and `d ... e`\n") == [
        ("`a ... b`", ["a", "b"]), ("`c` and `d ... e`", ["c", "d", "e"])]


@pytest.mark.parametrize("heading, pieces", HEADINGS, ids=[h for h, _ in HEADINGS])
def test_every_quoted_message_is_in_the_code(heading, pieces):
    files = [name for name, text in SOURCES.items() if written_in(pieces, text)]
    assert files, f"docs/faq.md quotes {heading}, which no file of comarl/ writes (reworded? update the entry)"


@pytest.mark.parametrize("overrides, heading", [
    (["train.num_generation=8"], "unknown config key"),
    (["train.rollout.num_generations=abc"], "expected an integer, got"),
    (["env.name=no_such_env"], ": unknown ... (or give package.module:NAME for your own)"),
])
def test_the_messages_users_meet_carry_the_quoted_words(overrides, heading, tmp_path, monkeypatch):
    """The entries are found by the words the user sees, not only by the source's spelling."""
    from comarl.experiment import build_env

    assert f"### `{heading}`" in PAGE
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError) as err:
        build_env(load_config("configs/demo/writing.yaml", overrides))
    assert written_in(heading.split(" ... "), str(err.value)), (heading, str(err.value))
