"""Prompt templates per role of comarl's preset (override any of them with ``env.args.prompts``), and the
first-turn prompts every preset builds from its templates.

Placeholders: ``{prompt}`` (the task's signature + docstring), ``{entry_point}``,
``{helper}`` (helper name); ClassEval: ``{skeleton}``, ``{class_name}``,
``{methods}`` (this agent's methods), ``{others}`` (methods other agents write),
``{methods_list}`` (this agent's methods, one ``- name`` line each, or ``(none)``).
Feedback turns append ``REVISE`` to the first-turn prompt.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from .presets.records import ClassSettings, FunctionSettings

HELPER = """Write a helper function for the coding problem below. Another agent will write the main function \
`{entry_point}` and may call your helper.

Problem:
{prompt}
Instructions:
- Define exactly one function named `{helper}` that computes a useful part of the solution and returns its result.
- Output only Python code: no explanations, no example usage, no tests.
- Do not write `{entry_point}` itself.
"""

MAIN = """Implement the function `{entry_point}` for the coding problem below.

Problem:
{prompt}
Another agent writes a helper function `{helper}(...)` that you may call; it is defined for you.
Instructions:
- Define `{entry_point}` with the signature shown above; call `{helper}(...)` where it helps and use its result.
- Do not redefine `{helper}`.
- Output only Python code: no explanations, no example usage, no tests.
"""

SINGLE = """Implement the function `{entry_point}` for the coding problem below.

Problem:
{prompt}
Instructions:
- Define `{entry_point}` with the signature shown above (helper functions are allowed).
- Output only Python code: no explanations, no example usage, no tests.
"""

CLASS = """Complete methods of the Python class `{class_name}`. Other agents write the remaining methods; \
the parts are merged into the class below.

Class skeleton:
{skeleton}

Write these methods: {methods}
Other agents write: {others}
Instructions:
- Output the methods you write, each as `def name(self, ...):` with its full body, inside `class {class_name}:`.
- Do not write the other agents' methods or `__init__`.
- Output only Python code: no explanations, no tests.
"""

REVISE = """
Your previous attempt:
```python
{previous}
```
{feedback}
Revise your code. Output the complete revised code only.
"""

DEFAULTS = {"helper": HELPER, "main": MAIN, "single": SINGLE, "class": CLASS, "revise": REVISE}


def templates(overrides: Mapping[str, str] | None, base: Mapping[str, str] = DEFAULTS) -> dict[str, str]:
    """``base`` (a preset's templates) updated with ``overrides``; unknown roles are an error naming the key."""
    out = dict(base)
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"env.args.prompts.{key}: unknown template; known: {', '.join(DEFAULTS)}")
        out[key] = value
    return out


def function_prompts(settings: "FunctionSettings", item: Mapping[str, Any]) -> tuple[str, ...]:
    """First-turn prompts of a function-level task, one per role of ``settings.roles``."""
    fields = {"prompt": item["prompt"], "entry_point": item["entry_point"], "helper": settings.helper_name}
    return tuple(settings.templates[role].format(**fields) for role in settings.roles)


def class_prompts(settings: "ClassSettings", assignment: Sequence[Sequence[str]],
                  item: Mapping[str, Any]) -> tuple[str, ...]:
    """First-turn prompts of ClassEval, one per agent: its methods (``assignment[i]``) and the others'."""
    out = []
    for i, mine in enumerate(assignment):
        others = [m for j, ms in enumerate(assignment) if j != i for m in ms]
        out.append(settings.templates["class"].format(
            skeleton=item["skeleton"].strip(), class_name=item["class_name"], methods=", ".join(mine) or "(none)",
            others=", ".join(others) or "(none)", methods_list="\n".join(f"- {m}" for m in mine) or "(none)"))
    return tuple(out)
