"""Word lists of the ``paper`` preset: the stop words and the 12 transition-word
categories used by the MAGRPO paper's writing rewards.

These are data, not code: the reference scores depend on every entry (a
transition "word" matches as a substring, so ``"so"`` is found inside
``"also"``), so they are kept exactly, sorted here for reading. Source:
``OpenMLRL/LLM_Collab_Writing``, ``rewards/tldr_rewards.py`` (the arXiv file
holds the same lists).
"""
from __future__ import annotations

PAPER_STOP_WORDS: frozenset[str] = frozenset("""
a all also an and any are as at bad be been being both but by can could did do does each few first for
from good great had has have he her here him his how i if in is it its just last left little long low many
may me might more most much must my new no not now of old on only or other our own right same shall should
so some such than that the their them then there these they this those to too us very was we were what
when where which who why will with would you your
""".split())

PAPER_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "cause_effect": (
        "accordingly", "as a consequence", "as a result", "because of this", "consequently", "due to this",
        "ergo", "for this reason", "hence", "in consequence", "it follows that", "on account of", "owing to",
        "resulting from", "so", "thanks to", "then", "thence", "thereby", "therefore", "this brings about",
        "this causes", "this leads to", "this results in", "thus", "wherefore"),
    "comparison": (
        "along the same lines", "analogously", "as with", "by analogy", "by the same token", "comparable to",
        "correspondingly", "equally", "in comparison", "in like manner", "in similar fashion", "in the same way",
        "just as", "just like", "likewise", "much like", "similarly"),
    "concession": (
        "admittedly", "all the same", "although", "be that as it may", "despite", "even if", "even though",
        "granted", "however", "in spite of", "nevertheless", "nonetheless", "notwithstanding", "regardless of",
        "still", "though", "whereas", "while", "yet"),
    "condition": (
        "as long as", "assuming that", "even if", "given that", "had", "if", "in case", "in the event that",
        "on condition that", "only if", "or else", "otherwise", "provided that", "should", "so long as",
        "supposing that", "unless", "were", "whether or not"),
    "contrast": (
        "all the same", "alternatively", "although", "at any rate", "be that as it may", "but", "by contrast",
        "contrarily", "conversely", "despite this", "even so", "even though", "however", "in any case",
        "in contrast", "in opposition", "instead", "nevertheless", "nonetheless", "notwithstanding",
        "on the contrary", "on the other hand", "otherwise", "rather", "regardless", "still", "whereas", "while",
        "yet"),
    "elaboration": (
        "additionally", "along with", "also", "analogously", "as well as", "besides", "by the same token",
        "comparatively", "correspondingly", "coupled with", "equally important", "furthermore", "in addition",
        "in like manner", "in the same way", "likewise", "moreover", "not only", "similarly", "together with",
        "what is more"),
    "emphasis": (
        "absolutely", "admittedly", "as a matter of fact", "certainly", "clearly", "definitely", "evidently",
        "granted", "in fact", "indeed", "indubitably", "manifestly", "naturally", "notably", "obviously",
        "of course", "positively", "significantly", "surely", "to be sure", "undeniably", "undoubtedly",
        "unquestionably", "without doubt"),
    "examples": (
        "above all", "as an illustration", "as evidence", "case in point", "chiefly", "especially",
        "for example", "for instance", "in particular", "including", "mainly", "markedly", "most importantly",
        "namely", "notably", "particularly", "primarily", "specifically", "such as", "to demonstrate",
        "to exemplify", "to illustrate"),
    "explanation": (
        "actually", "at its core", "basically", "clearly", "essentially", "fundamentally", "in essence",
        "in fact", "in other words", "indeed", "more precisely", "obviously", "simply put", "specifically speaking",
        "stated differently", "that is", "the point is", "to clarify", "to put it another way",
        "to put it simply", "to rephrase", "what this means is"),
    "sequence": (
        "after that", "afterward", "at first", "at the outset", "at the same time", "concurrently", "finally",
        "first", "following this", "in conclusion", "in summary", "in the beginning", "in the end",
        "in the meantime", "initially", "lastly", "later", "later on", "meanwhile", "next", "primarily", "second",
        "secondly", "simultaneously", "subsequently", "then", "third", "thirdly", "to begin with", "to conclude",
        "to start with", "to summarize", "ultimately"),
    "summary": (
        "after all", "all in all", "basically", "briefly", "essentially", "fundamentally", "in brief",
        "in conclusion", "in essence", "in short", "in summary", "in the end", "in the final analysis", "on the whole",
        "overall", "the bottom line is", "to conclude", "to sum up", "to summarize", "ultimately",
        "when all is said and done"),
    "time": (
        "after", "afterward", "as", "at the same time", "before", "concurrently", "currently", "during", "earlier",
        "eventually", "finally", "formerly", "immediately", "lately", "later", "meanwhile", "nowadays",
        "presently", "previously", "recently", "simultaneously", "since", "subsequently", "until", "when", "while"),
}
