"""Toy coordination task shared by the actor-critic and preference tests."""

WORDS = ("red", "green", "blue")


def word(text: str):
    """The word an agent names: its first character picks one of three (a stand-in alphabet for random models)."""
    t = text.strip()
    return WORDS[ord(t[0]) % 3] if t else None


def same_word(responses, item):
    """1 when both agents name the same word: neither can score alone (random play: ~1/3)."""
    a, b = (word(r) for r in responses)
    return 1.0 if a is not None and a == b else 0.0
