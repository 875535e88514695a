"""What a central (MAAC) critic reads: one text written from every agent's prompt (and, for Q, response).

A joint-input function is ``(prompts: Sequence[str], responses: Sequence[str] | None) -> str``;
``responses`` is None for a V(h) critic. Replace the default by naming your
function (``train.critic.joint_input: "my_pkg.critic:joint_text"``) or passing it.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..core.config_io import ConfigError, import_callable

JointInput = Callable[[Sequence[str], "Sequence[str] | None"], str]


def role_marker_template(prompts: Sequence[str], responses: Sequence[str] | None = None) -> str:
    """``[Agent 1 prompt]\\n...`` (``[Agent 1 response]\\n...``) for every agent, blank line between blocks."""
    blocks = []
    for i, prompt in enumerate(prompts):
        blocks.append(f"[Agent {i + 1} prompt]\n{prompt}")
        if responses is not None:
            blocks.append(f"[Agent {i + 1} response]\n{responses[i]}")
    return "\n\n".join(blocks)


def resolve_joint_input(spec) -> JointInput:
    """None -> the role-marker template; a callable -> itself; ``"module:function"`` -> that function."""
    if spec is None:
        return role_marker_template
    if callable(spec):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(f"train.critic.joint_input: expected 'module:function' or a callable, got {spec!r}")
    return import_callable(spec, "train.critic.joint_input")
