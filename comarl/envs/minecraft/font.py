"""The 5 x 5 block letters StrBuild spells, and a string's target grid.

Each glyph is five rows of five cells, top row first, ``#`` for a block. They are the reference's letters (the
targets must be the same cells); a character without a glyph (digits, space, punctuation) is a blank 5 x 5.
"""
from __future__ import annotations

HEIGHT = WIDTH = 5

# one string per letter: the five rows separated by spaces
_GLYPHS = {
    "A": ".###. #...# ##### #...# #...#",
    "B": "####. #...# ####. #...# ####.",
    "C": ".#### #.... #.... #.... .####",
    "D": "####. #...# #...# #...# ####.",
    "E": "##### #.... ####. #.... #####",
    "F": "##### #.... ####. #.... #....",
    "G": ".#### #.... #.### #...# .###.",
    "H": "#...# #...# ##### #...# #...#",
    "I": "##### ..#.. ..#.. ..#.. #####",
    "J": "..### ...#. ...#. #..#. .##..",
    "K": "#...# #..#. ###.. #..#. #...#",
    "L": "#.... #.... #.... #.... #####",
    "M": "#...# ##.## #.#.# #...# #...#",
    "N": "#...# ##..# #.#.# #..## #...#",
    "O": ".###. #...# #...# #...# .###.",
    "P": "####. #...# ####. #.... #....",
    "Q": ".###. #...# #...# #..## .####",
    "R": "####. #...# ####. #..#. #...#",
    "S": ".#### #.... .###. ....# ####.",
    "T": "##### ..#.. ..#.. ..#.. ..#..",
    "U": "#...# #...# #...# #...# .###.",
    "V": "#...# #...# #...# .#.#. ..#..",
    "W": "#...# #...# #.#.# ##.## #...#",
    "X": "#...# .#.#. ..#.. .#.#. #...#",
    "Y": "#...# .#.#. ..#.. ..#.. ..#..",
    "Z": "##### ...#. ..#.. .#... #####",
}
GLYPHS: dict[str, tuple[str, ...]] = {k: tuple(v.split()) for k, v in _GLYPHS.items()}
BLANK = ("." * WIDTH,) * HEIGHT


def string_rows(text: str, spacing: int) -> tuple[str, ...]:
    """The target grid of ``text`` (upper-cased, stripped): 5 rows, top first, ``#`` = block, ``.`` = air,
    ``spacing`` empty columns between letters. An empty text gives 5 empty rows.

    ``string_rows("LI", 1)[4] == "#####.#####"``.
    """
    text = str(text or "").strip().upper()
    if not text:
        return ("",) * HEIGHT
    gap = "." * int(spacing)
    return tuple(gap.join(GLYPHS.get(ch, BLANK)[r] for ch in text) for r in range(HEIGHT))
