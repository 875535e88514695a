"""Default prompt templates per role (override any of them with ``env.args.prompts``).

Placeholders: ``{prompt}`` (the task's signature + docstring), ``{entry_point}``,
``{helper}`` (helper name); ClassEval: ``{skeleton}``, ``{class_name}``,
``{methods}`` (this agent's methods), ``{others}`` (methods other agents write),
``{methods_list}`` (this agent's methods, one ``- name`` line each, or ``(none)``).
Feedback turns append ``REVISE`` to the first-turn prompt.
"""
from __future__ import annotations

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

# Preset ``paper``: the same role, constraints and output format as the MAGRPO paper's prompts, in our
# own words (the verbatim wording is in the reference repositories; see docs/reproduction_coding.md).
# The paper asked for bare code without fences: its reward strips fences anyway.
PAPER_HELPER = """Write a helper function for the coding problem below.

Problem:
{prompt}
Rules:
- Name the helper `{helper}`; the main function will call it, so it must return something useful.
- Give it real parameters and end it with a return statement.
- Output only the function: no markdown fences, no text before or after it, no tests, no usage examples.
"""

PAPER_MAIN = """Implement the required function for the coding problem below.

Problem:
{prompt}
A helper function `{helper}(...)` written by another agent is available to you.
Rules:
- Define `{entry_point}` with exactly the parameters shown above and return the result.
- Call `{helper}(...)` and use what it returns; do not define `{helper}` yourself.
- Output only the function: no markdown fences, no text before or after it, no tests, no usage examples.
"""

PAPER_SINGLE = """Implement the required function for the coding problem below.

Problem:
{prompt}
Rules:
- Define `{entry_point}` with exactly the parameters shown above and return the result.
- Output only the function: no markdown fences, no text before or after it, no tests, no usage examples.
"""

PAPER_CLASS = """You are one of the agents completing the Python class `{class_name}`.

You implement only these methods:
{methods_list}

Rules:
- Output only Python `def` blocks for your methods, named exactly as listed.
- No class header, no imports, no markdown fences, no explanations.
- If no method is listed for you, output nothing.

Class skeleton:
{skeleton}
"""

PAPER = {**DEFAULTS, "helper": PAPER_HELPER, "main": PAPER_MAIN, "single": PAPER_SINGLE, "class": PAPER_CLASS}
PRESET_TEMPLATES = {"comarl": DEFAULTS, "paper": PAPER}


def templates(overrides: dict[str, str] | None, preset: str = "comarl") -> dict[str, str]:
    """The preset's templates updated with ``overrides``; unknown roles are an error naming the key."""
    out = dict(PRESET_TEMPLATES[preset])
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"env.args.prompts.{key}: unknown template; known: {', '.join(DEFAULTS)}")
        out[key] = value
    return out
