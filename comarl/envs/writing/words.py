"""Word-level text statistics for the writing rewards.

Two notions of "word" are used, both documented in docs/writing.md:

* **length words**: ``text.split()`` (whitespace-separated chunks). Used for
  the length window (level 1) and the length ratio (level 2).
* **word tokens**: lower-cased runs of letters/digits (apostrophes inside a
  word kept, e.g. ``don't``), from :func:`tokens`. Used for unique-word counts
  (level 3), content-word overlap (level 4) and the degenerate-response check.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")

# Common English function words. Removed before unique-word counts and overlap.
DEFAULT_STOP_WORDS: tuple[str, ...] = (
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as",
    "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
    "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from",
    "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him",
    "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me",
    "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only",
    "or", "other", "our", "ours", "out", "over", "own", "same", "she", "should", "so", "some",
    "such", "than", "that", "the", "their", "theirs", "them", "then", "there", "these", "they",
    "this", "those", "through", "to", "too", "under", "until", "up", "us", "very", "was", "we",
    "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with",
    "would", "you", "your", "yours", "yourself", "i'm", "it's", "don't", "didn't", "can't",
)

# Transition words and phrases by category (level 4 counts distinct categories).
DEFAULT_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "addition": ("additionally", "furthermore", "moreover", "in addition", "besides", "as well as"),
    "example": ("for example", "for instance", "such as", "in particular", "specifically", "namely"),
    "cause": ("because", "therefore", "thus", "as a result", "consequently", "hence", "so that", "since"),
    "contrast": ("however", "although", "but", "yet", "instead", "whereas", "nevertheless", "on the other hand"),
    "sequence": ("first", "second", "then", "next", "finally", "afterwards", "later", "eventually"),
    "summary": ("in short", "overall", "in summary", "in conclusion", "to sum up", "ultimately"),
    "emphasis": ("indeed", "in fact", "notably", "especially", "above all", "clearly"),
}


def length_words(text: str) -> int:
    """Number of whitespace-separated chunks in ``text`` (0 for empty/blank)."""
    return len(text.split())


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens of ``text``: ``"Don't stop, 2 cats!"`` -> ``["don't", "stop", "2", "cats"]``."""
    return _WORD.findall(text.lower())


def content_words(text: str, stop_words: Iterable[str]) -> set[str]:
    """Distinct word tokens of ``text`` that are not stop words."""
    stop = stop_words if isinstance(stop_words, (set, frozenset)) else set(stop_words)
    return {w for w in tokens(text) if w not in stop}


def is_degenerate(text: str) -> bool:
    """True when ``text`` is empty, blank, or one token repeated (``"ok ok, OK"``).

    A text with at most one distinct word token is degenerate; such a response
    gets the minimum reward.
    """
    return len(set(tokens(text))) <= 1


def jaccard(a: set[str], b: set[str]) -> float:
    """Jaccard index ``|a & b| / |a | b|``; 0.0 when both sets are empty."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def transition_categories(text: str, transitions: Mapping[str, Sequence[str]]) -> set[str]:
    """Categories whose word or phrase occurs in ``text`` as whole words (case-insensitive).

    ``"However, we also..."`` matches "however" (contrast) but "so" is not found
    inside "also".
    """
    joined = " " + " ".join(tokens(text)) + " "
    found = set()
    for category, phrases in transitions.items():
        for phrase in phrases:
            if " " + " ".join(tokens(phrase)) + " " in joined:
                found.add(category)
                break
    return found
