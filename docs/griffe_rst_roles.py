"""Griffe extension of the API reference: Sphinx roles in docstrings become Markdown code.

comarl's docstrings are Google style with a few reStructuredText roles (``:class:`EnvState```,
``:func:`rollout_modules```, ``:meth:`evaluate```). mkdocstrings renders Markdown, where a role would
show as written; this turns each into a code span (``~`` and a leading dot dropped).
"""
from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|obj|exc|const):`~?\.?([^`]+)`")


def strip_roles(text: str) -> str:
    """``:class:`~a.B``` -> ```a.B```."""
    return ROLE.sub(r"`\1`", text)


class RstRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = strip_roles(obj.docstring.value)
