"""What a policy that copies answers, and codes nothing, earns on the shipped multi-turn coding configs.

The lookup-table policy (issue #37) reads its prompt, collects every ``assert f(args) == expected`` and every
docstring example ``>>> f(args)`` / result it quotes (the task's own examples at turn 1; the feedback too at
turn 2), and answers with a program that returns the quoted value for exactly those arguments and ``None``
otherwise; with a helper role, the helper writes a function that returns ``None``. For ClassEval, whose feedback
quotes unittest's ``first != second`` without the inputs, each method returns the last value quoted after
``!=`` for the test class named after it (``FooTestBarBaz`` -> ``bar_baz``).

A reward that copying cannot raise gives the same mean turn-2 reward pass rate as turn 1. Usage (a few minutes
per config on 2 cores; data from ../shared/data)::

    python benchmarks/feedback_leak.py                 # every shipped multi-turn coding config, all items
    python benchmarks/feedback_leak.py --limit 40 configs/coding/mbpp_2turn.yaml
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
# the hub ids the configs name -> the folder of ../shared/data holding that data
LOCAL = {"openai/openai_humaneval": "humaneval", "google-research-datasets/mbpp": "mbpp",
         "OpenMLRL/MBPP": "mbpp_openmlrl", "OpenMLRL/CoopHumanEval": "coophumaneval",
         "FudanSELab/ClassEval": "classeval"}
CODING_ENVS = {"humaneval", "mbpp", "coophumaneval", "classeval"}


def multi_turn_coding_configs(root: Path = ROOT / "configs") -> list[Path]:
    """Every shipped config whose environment is a coding task with ``max_turns`` > 1."""
    out = []
    for path in sorted(root.rglob("*.yaml")):
        env = (yaml.safe_load(path.read_text()) or {}).get("env") or {}
        if env.get("name") in CODING_ENVS and int((env.get("args") or {}).get("max_turns", 1)) > 1:
            out.append(path)
    return out


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def quoted_answers(text: str, entry_point: str) -> dict[str, Any]:
    """``repr(args tuple) -> expected`` for every ``assert f(...) == v`` (either side) and ``>>> f(...)`` followed
    by its result line that ``text`` quotes, where ``f`` is the entry point (or ``candidate``)."""
    table: dict[str, Any] = {}
    names = (entry_point, "candidate")

    def add(call: ast.AST, value: ast.AST) -> None:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in names
                and not call.keywords):
            return
        args = [_literal(a) for a in call.args]
        ok, v = _literal(value)
        if ok and v is not Ellipsis and all(a[0] for a in args):  # `== ...`: a value the feedback withheld
            table[repr(tuple(a[1] for a in args))] = v

    for m in re.finditer(r"assert\s+[^\n`]+", text):
        node = None
        for candidate in (m.group(0), m.group(0).rsplit(" -> ", 1)[0]):  # the paper's "case -> error" lines
            try:
                node = ast.parse(candidate.strip()).body[0]
                break
            except (SyntaxError, ValueError, RecursionError, MemoryError, IndexError):
                continue
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1 \
                and isinstance(node.test.ops[0], ast.Eq):
            add(node.test.left, node.test.comparators[0])
            add(node.test.comparators[0], node.test.left)
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        s = line.strip()
        if s.startswith(">>> "):
            try:
                call = ast.parse(s[4:], mode="eval").body
                value = ast.parse(lines[i + 1].strip(), mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            add(call, value)
    return table


def lookup_function(entry_point: str, table: dict[str, Any], guess: bool = False) -> str:
    """The table inside the function (the paper preset keeps only the functions of a response). ``guess``: for
    arguments not in the table, answer the value quoted most often (what copying buys beyond the quoted tests)."""
    default = None
    if guess and table:
        values = [repr(v) for v in table.values()]
        default = ast.literal_eval(max(sorted(set(values)), key=values.count))  # ties: the same at every turn
    return (f"def {entry_point}(*args):\n    table = {table!r}\n"
            f"    return table.get(repr(args), {default!r})\n")


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def quoted_class_constants(text: str, class_name: str) -> dict[str, str]:
    """method -> source of the last value quoted after ``!=`` for its test class (``...TestFooBar``)."""
    out: dict[str, str] = {}
    for m in re.finditer(re.escape(class_name) + r"Test(\w+)\b[^\n]*?!=\s*([^\n`]+)", text):
        value = m.group(2).strip().rstrip(".")
        ok, _ = _literal(ast.parse(value, mode="eval").body) if _parses(value) else (False, None)
        if ok:
            out[_snake(m.group(1))] = value
    return out


def _parses(text: str) -> bool:
    try:
        ast.parse(text, mode="eval")
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def lookup_class(class_name: str, methods: list[str], constants: dict[str, str]) -> str:
    body = "".join(f"    def {m}(self, *args, **kwargs):\n        return {constants.get(m, 'None')}\n" for m in methods)
    return f"```python\nclass {class_name}:\n{body}```"


VARIANTS = ("feedback", "prompt", "guess")


def policy(env_name: str, item: dict, prompts: tuple[str, ...], first: tuple[str, ...], assignment=None,
           variant: str = "feedback") -> tuple[str, ...]:
    """The lookup policy's joint response to ``prompts`` (one per agent; ``first``: the turn-1 prompts).

    ``variant``: ``feedback`` copies only what the feedback quotes (the text after the turn-1 prompt: issue #37's
    policy), ``prompt`` also the task's own examples, ``guess`` as ``prompt`` and answers the most quoted value
    for any other arguments."""
    texts = [p[len(f):] if variant == "feedback" and p.startswith(f) else p for p, f in zip(prompts, first)]
    if env_name == "classeval":
        return tuple(lookup_class(item["class_name"], mine, quoted_class_constants(t, item["class_name"]))
                     for t, mine in zip(texts, assignment))
    entry = item["entry_point"]
    main = lookup_function(entry, quoted_answers(texts[-1], entry), guess=variant == "guess")
    return ("def aux(*args):\n    return None\n", main) if len(prompts) == 2 else (main,)


def data_source(cfg: dict, path: Path) -> str:
    """Where the config's training data lies here: a hub id in ../shared/data, a shipped fixture or package file
    where it is, a local path relative to the repository."""
    from comarl.data.paths import resolve_source
    source = cfg["data"]["train"]["source"]
    if source in LOCAL:
        return str(DATA / LOCAL[source])
    resolved = resolve_source(source)
    if resolved != source or Path(source).is_absolute():
        return resolved
    return str(ROOT / source)


def load_env(path: Path, limits: dict | None = None):
    from comarl.envs.registry import get_env
    cfg = yaml.safe_load(path.read_text())
    env_cfg = cfg["env"]
    args = dict(env_cfg.get("args") or {})
    args.pop("expert", None)
    if args.get("feedback") == "expert_edits":
        raise ValueError(f"{path}: expert_edits needs a model; not measured")
    if limits:
        args["sandbox"] = {**(args.get("sandbox") or {}), **limits}
    entry = get_env(env_cfg["name"])
    return env_cfg["name"], entry, entry.build(num_agents=len(cfg["agents"]), **args), data_source(cfg, path)


def measure(path: Path, limit: int | None = None, limits: dict | None = None,
            variant: str = "feedback") -> dict[str, Any]:
    """Mean reward pass rate (and pass rate over all tests) of the lookup policy at turn 1 and turn 2."""
    name, entry, env, source = load_env(path, limits)
    items = entry.load_items(source, None, limit)
    try:
        states = [env.reset(it) for it in items]
        assign = [env.preset.assignment(env.settings, s.item) if name == "classeval" else None for s in states]
        first = env.step_batch(states, [policy(name, s.item, s.prompts, s.prompts, a, variant)
                                        for s, a in zip(states, assign)])
        going = [(i, t.next_state) for i, t in enumerate(first) if t.next_state is not None]
        second = env.step_batch([s for _, s in going], [policy(name, s.item, s.prompts, states[i].prompts,
                                                                assign[i], variant) for i, s in going])
    finally:
        env.close()
    t2 = {i: t for (i, _), t in zip(going, second)}
    key_all = "pass_rate_all" if "pass_rate_all" in first[0].metrics else "pass_rate"
    last = [t2.get(i, t) for i, t in enumerate(first)]
    n = len(first)
    return {"config": str(path.relative_to(ROOT)), "variant": variant, "env": name, "items": n,
            "turn1_pass_rate": sum(t.metrics["pass_rate"] for t in first) / n,
            "turn2_pass_rate": sum(t.metrics["pass_rate"] for t in last) / n,
            "turn1_pass_rate_all_tests": sum(t.metrics[key_all] for t in first) / n,
            "turn2_pass_rate_all_tests": sum(t.metrics[key_all] for t in last) / n,
            "turn2_passed_all": sum(t.metrics["passed_all"] for t in last) / n}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", type=Path)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--variant", choices=VARIANTS, nargs="+", default=list(VARIANTS))
    ap.add_argument("--out", type=Path, default=None, help="append one JSON line per config")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    for path in a.configs or multi_turn_coding_configs():
        for variant in a.variant:
            start = time.monotonic()
            try:
                row = measure(path.resolve(), a.limit, variant=variant)
            except ValueError as e:
                print(f"{path}: skipped ({e})")
                break
            row["seconds"] = round(time.monotonic() - start, 1)
            print(json.dumps(row), flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
