"""BFCL's AST checker semantics (Python language), written for comarl.

A gold answer is BFCL's ``possible_answer`` form: a list of
``{function_name: {param: [accepted values]}}``; ``""`` among the accepted
values marks the parameter optional. A model call matches a gold call when
(as ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` decides):

- the name is the gold name; every ``required`` parameter of the schema is
  given; every given parameter is in the schema *and* in the gold answer;
- each value has the schema type: ``integer`` int (a bool is not an int),
  ``float`` float or int (an int is converted), ``string``/``any`` str,
  ``boolean`` bool, ``array`` list, ``tuple`` list or tuple, ``dict`` dict;
  array/tuple items are checked one level deep against the item type (no
  int -> float conversion there); a value of the type of the accepted values
  instead of the schema type counts as a "variable" and is compared as is;
- the value is among the accepted ones: strings after BFCL's normalisation
  (spaces and ``,./-_*^`` removed, lowercase, ``'`` -> ``"``), lists element
  by element with strings normalised, dicts key by key (flat), lists of dicts
  dict by dict in order, other values by ``==``;
- a gold parameter the call leaves out must be optional (``""`` accepted).

Parallel categories (all four here) match as an unordered set, with BFCL's
procedure: equal counts, then for each gold call in order the first unused
model call that matches it (greedy, as BFCL does; not a maximum matching).
``match_ordered`` is the in-order variant (i-th call against i-th gold call).
Each check returns ``None`` for a match, else a short reason.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from .calls import ToolCall

TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool,
                          "array": list, "tuple": list, "dict": dict, "any": str}
NESTED = ("array", "tuple")

Gold = Mapping[str, Mapping[str, Sequence[Any]]]  # {name: {param: accepted values}}


def standardize(s: str) -> str:
    """BFCL's string normalisation: ``"April 1, 2024" -> "april12024"``."""
    return re.sub(r"[ ,./\-_*^]", "", s).lower().replace("'", '"')


def _norm(v: Any) -> Any:
    return standardize(v) if type(v) is str else v


def _answer_type(accepted: Sequence[Any]) -> type | None:
    """Type of the first non-optional accepted value (None if all are ``""``)."""
    for a in accepted:
        if a != "":
            return type(a)
    return None


def _items_ok(value: Any, accepted: Sequence[Any], item_type: type) -> bool:
    """BFCL's one-level nested type check: some accepted list whose items' type the value's items share."""
    for alt in accepted:
        if not isinstance(alt, list):
            return True  # "" (optional) among the alternatives passes, as in BFCL
        alt_type = _answer_type(alt)
        if all(type(x) is item_type or (alt_type is not None and type(x) is alt_type) for x in value):
            return True
    return False


def check_type(value: Any, schema_type: str, accepted: Sequence[Any], item_type: str | None) -> tuple[str | None, bool]:
    """``(error or None, is_variable)`` for one (already converted) value."""
    expected = TYPES[schema_type]
    alt_type = _answer_type(accepted)
    variable = alt_type is not None and alt_type is not expected
    if type(value) is expected:
        if item_type is None or _items_ok(value, accepted, TYPES[item_type]):
            return None, variable
        return f"items of {value!r} are not all {item_type}", variable
    if alt_type is not None and type(value) is alt_type:
        return None, True
    return f"expected {schema_type}, got {type(value).__name__}", variable


def _dict_ok(value: Mapping, accepted: Sequence[Any]) -> bool:
    for alt in accepted:
        if alt == "":
            continue
        if all(k in alt and _norm(v) in [_norm(a) for a in alt[k]] for k, v in value.items()) and \
                all(k in value or "" in alts for k, alts in alt.items()):
            return True
    return False


def _list_of_dicts_ok(value: list, accepted: Sequence[Any]) -> bool:
    for alt in accepted:
        if len(value) == len(alt) and all(isinstance(v, dict) and _dict_ok(v, [a]) for v, a in zip(value, alt)):
            return True
    return False


def _list_ok(value: list, accepted: Sequence[Any]) -> bool:
    got = [_norm(x) for x in value]
    return any(got == [_norm(x) for x in (alt if isinstance(alt, list) else [])] for alt in accepted)


def check_value(schema: Mapping[str, Any], value: Any, accepted: Sequence[Any]) -> str | None:
    """Type and value check of one argument against its schema entry and accepted values."""
    schema_type = schema.get("type")
    if schema_type not in TYPES:
        return f"schema type {schema_type!r} is not one BFCL checks in Python"
    item_type = schema.get("items", {}).get("type") if schema_type in NESTED else None
    if item_type is not None and item_type not in TYPES:
        return f"schema item type {item_type!r} is not one BFCL checks in Python"
    if schema_type == "tuple" and type(value) is tuple:
        value = list(value)
    if schema_type == "float" and type(value) is int:
        value = float(value)
    err, variable = check_type(value, schema_type, accepted, item_type)
    if err:
        return err
    if not variable:
        expected = TYPES[schema_type]
        if expected is dict:
            return None if _dict_ok(value, accepted) else f"dict {value!r} not accepted"
        if expected is list and item_type == "dict":
            return None if _list_of_dicts_ok(value, accepted) else f"list of dicts {value!r} not accepted"
        if expected is str:
            ok = standardize(value) in [standardize(a) for a in accepted if type(a) is str]
            return None if ok else f"{value!r} not among {list(accepted)!r}"
        if expected is list:
            return None if _list_ok(value, accepted) else f"{value!r} not among {list(accepted)!r}"
    return None if value in accepted else f"{value!r} not among {list(accepted)!r}"


def find_schema(schemas: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((s for s in schemas if s.get("name") == name), None)


def check_call(schema: Mapping[str, Any] | None, call: ToolCall, gold: Gold) -> str | None:
    """One model call against one gold call (``{name: {param: accepted}}``) and the gold function's schema."""
    (name, answer), = gold.items()
    if call.name != name:
        return f"function {call.name!r}, expected {name!r}"
    if schema is None:
        return f"no schema for {name!r}"
    params = schema.get("parameters", {})
    props = params.get("properties", {})
    for p in params.get("required", []):
        if p not in call.args:
            return f"{name}: missing required parameter {p!r}"
    for p, v in call.args.items():
        if p not in props or p not in answer:
            return f"{name}: unexpected parameter {p!r}"
        err = check_value(props[p], v, answer[p])
        if err:
            return f"{name}.{p}: {err}"
    for p, accepted in answer.items():
        if p not in call.args and "" not in accepted:
            return f"{name}: parameter {p!r} left out but not optional"
    return None


def match_unordered(schemas: Sequence[Mapping[str, Any]], calls: Sequence[ToolCall],
                    gold: Sequence[Gold]) -> str | None:
    """BFCL's parallel (no order) verdict: None when ``calls`` match ``gold`` as a set."""
    if len(calls) != len(gold):
        return f"{len(calls)} call(s), expected {len(gold)}"
    used: set[int] = set()
    for g in gold:
        (name,) = g
        schema = find_schema(schemas, name)
        hit = next((i for i, c in enumerate(calls) if i not in used and check_call(schema, c, g) is None), None)
        if hit is None:
            return f"no call matches gold call {name}"
        used.add(hit)
    return None


def match_ordered(schemas: Sequence[Mapping[str, Any]], calls: Sequence[ToolCall], gold: Sequence[Gold]) -> str | None:
    """In-order verdict: the i-th call must match the i-th gold call."""
    if len(calls) != len(gold):
        return f"{len(calls)} call(s), expected {len(gold)}"
    for c, g in zip(calls, gold):
        (name,) = g
        err = check_call(find_schema(schemas, name), c, g)
        if err:
            return err
    return None
