"""Prompts for cooperative function calling: a role instruction per agent, the
function schemas, the user's request and the output format."""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

ROLE_MODES = ("self_select", "split_by_order", "same_prompt")

TEMPLATE = (
    "You are one of {num_agents} function-calling agents answering the same user request. The agents "
    "cannot see each other's answers; the team's answer is all the agents' calls together, a call written "
    "by several agents counted once (a call the request needs twice must be written twice by one agent).\n\n"
    "Your part: {role}\n\n"
    "Available functions (JSON schemas):\n{functions}\n\n"
    "User request:\n{request}\n\n"
    "{format}"
)

FORMATS = {
    "python": ("Write each of your calls on its own line in Python syntax with keyword arguments, for "
               "example:\nget_weather(city=\"Paris\", days=3)\nWrite nothing else. If you have no call to "
               "make, write []."),
    # BFCL's own output form for prompting models: one Python list of calls, nothing around it
    "python_list": ("Write all your calls as one Python list with keyword arguments, for example:\n"
                    "[get_weather(city=\"Paris\", days=3), get_time(zone=\"CET\")]\n"
                    "Write nothing else: no code fence, no explanation. If you have no call to make, write []."),
    # BFCL's JSON form ("function" / "parameters")
    "json": ("Write your calls as one JSON list, for example:\n"
             "[{\"function\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}]\n"
             "Write nothing else. If you have no call to make, write []."),
}


def role_instruction(agent: int, num_agents: int, mode: str, ordered: bool = False) -> str:
    """What agent ``agent`` (0-based) of ``num_agents`` is asked to cover."""
    if mode == "same_prompt":
        return "write every function call the request needs."
    if mode == "self_select":
        return ("choose a useful share of the calls the request needs, the ones you are most sure of, and "
                "leave the rest to the other agent(s). Do not write every call, and do not stay silent "
                "when the request needs calls.")
    if mode == "split_by_order":
        order = "in the order they must run" if ordered else "in the order the user asks for them"
        if num_agents == 2:
            half = ("the first half (with the middle call when their number is odd)" if agent == 0
                    else "the second half (without the middle call when their number is odd)")
            return f"list the calls the request needs {order} and write only {half}."
        return (f"list the calls the request needs {order}, cut the list into {num_agents} consecutive parts "
                f"of nearly equal size (earlier parts one larger when it does not divide evenly) and write "
                f"only part {agent + 1}.")
    raise ValueError(f"env.args.role_mode: expected one of {ROLE_MODES}, got {mode!r}")


def render(template: str, item: Mapping[str, Any], agent: int, num_agents: int, mode: str, fmt: str,
           ordered: bool = False) -> str:
    functions = "\n".join(json.dumps(f, ensure_ascii=False) for f in item["function"])
    fields = {"num_agents": str(num_agents), "role": role_instruction(agent, num_agents, mode, ordered),
              "functions": functions, "request": item["request"], "format": FORMATS[fmt]}
    # one pass, not str.format: schemas and requests hold braces of their own
    return re.sub(r"\{(" + "|".join(fields) + r")\}", lambda m: fields[m.group(1)], template)
