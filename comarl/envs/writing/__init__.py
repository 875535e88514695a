"""Cooperative writing environments: TL;DR summaries and arXiv introductions.

Importing ``comarl.envs.writing.tldr`` / ``.arxiv`` registers ``tldr`` /
``arxiv``. The reward lives in :mod:`.reward` (pure functions, one per level).
"""
