"""comarl's Minecraft ``paper`` preset against the reference repository's own code, case by case.

The reference is OpenMLRL/LLM_Collab_Minecraft (not shipped with comarl). Get it, then run from the repository
root:

    git clone https://github.com/OpenMLRL/LLM_Collab_Minecraft /tmp/LLM_Collab_Minecraft
    PYTHONPATH=. python benchmarks/minecraft_compare.py /tmp/LLM_Collab_Minecraft

It needs only the reference's pure-Python modules (its reward and ``external`` modules, its utils; PyYAML),
not CoMLRL, torch or Mineflayer. On every case of ``benchmarks/minecraft_cases.py`` (gold, random and
adversarial command lists for the 10 strings and 10 houses, 1 and 2 agents) it compares:

- the team reward of ``str_build`` / ``house_build`` (preset ``paper``) with the reference's
  ``get_reward_function(...)`` (exact float equality);
- for every ``external.mode``, the data each agent's next prompt carries (cells, rectangles, resources,
  accepted commands, the quoted reward, the subset size, the command cap), extracted line by line from both
  prompts (``minecraft_cases.data_lines``);
- the string targets (all 26 letters, random strings), the resource limits, the layer rectangles and the
  spiders' attack draws.

``--record FILE`` writes the reference's numbers for the test suite
(``tests/envs/minecraft/test_paper_reference.py`` checks comarl against them without the reference).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from minecraft_cases import Case, data_lines, digest, house_cases, str_cases  # noqa: E402

from comarl.envs.minecraft import build_house, build_str  # noqa: E402
from comarl.envs.minecraft.feedback import HOUSE_MODES, STR_MODES  # noqa: E402
from comarl.envs.minecraft.font import string_rows  # noqa: E402
from comarl.envs.minecraft.housebuild import draw_threat, rects_by_layer, resource_limits, task_from_item  # noqa: E402

SYSTEM = "SYSTEM TEXT"


def load_reference(path: str) -> SimpleNamespace:
    """The reference's modules, imported as the package ``LLM_Collab_Minecraft`` from ``path``."""
    root = Path(path).resolve()
    if not (root / "str_build" / "utils" / "str_builder.py").is_file():
        raise SystemExit(f"{root}: not a checkout of OpenMLRL/LLM_Collab_Minecraft (no str_build/utils/str_builder.py)")
    link_dir = Path(tempfile.mkdtemp(prefix="mc_ref_"))
    (link_dir / "LLM_Collab_Minecraft").symlink_to(root, target_is_directory=True)
    sys.path.insert(0, str(link_dir))

    def mod(name: str):
        return importlib.import_module(f"LLM_Collab_Minecraft.{name}")

    ns = SimpleNamespace(
        root=root, sb=mod("str_build.utils.str_builder"), hb=mod("house_build.utils.house_builder"),
        str_reward=mod("str_build.rewards.str_builder_reward"),
        house_reward=mod("house_build.rewards.house_builder_reward"),
        str_ext={m: mod(f"str_build.external.{m}") for m in STR_MODES},
        house_ext={m: mod(f"house_build.external.{m}") for m in HOUSE_MODES})
    ns.prepare_rpg_state = _function_from(root / "house_build" / "train" / "train_magrpo.py", "_prepare_rpg_state",
                                          ["_as_int"])
    return ns


def _function_from(path: Path, name: str, helpers: list[str]):
    """A top-level function of a module that cannot be imported here (it needs CoMLRL and torch), with the
    helpers it calls, compiled on its own."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in [name, *helpers]]
    scope: dict[str, Any] = {"random": random, "Any": Any, "Dict": dict, "List": list}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), scope)  # noqa: S102
    return scope[name]


# ---- the reference's side


def ref_str_item(ref, item: dict[str, Any]) -> dict[str, Any]:
    rows = ref.sb.render_string_mask_rows(item["string"], spacing=2)
    return {"task_id": item["task_id"], "csv_row_index": 0, "string": item["string"],
            "difficulty": item["difficulty"], "local_bbox_from": [0, 0, 0],
            "local_bbox_to": [max(0, len(rows[0]) - 1), len(rows) - 1, 0], "target_rows_topdown": rows}


def ref_house_item(item: dict[str, Any]) -> dict[str, Any]:
    lo, hi = item["box"]
    return {"task_id": item["task_id"], "local_bbox_from": list(lo), "local_bbox_to": list(hi),
            "inventory": dict(item["legend"]),
            "layers_by_y": {str(lo[1] + i): rows for i, rows in enumerate(item["layers"])}}


def ref_rpg(ref, args: dict[str, Any]) -> dict[str, Any]:
    sp = args.get("spiders", {})
    cfg = {"task": {"player": {"hp": args.get("hp", 20)},
                    "spider": {"num": sp.get("num", 0), "atk_low": sp.get("atk_low", 0),
                               "atk_high": sp.get("atk_high", sp.get("atk_low", 0))}}}
    return ref.prepare_rpg_state(cfg, sp.get("seed", 0))


def ref_house_blocks(ref, item: dict[str, Any], args: dict[str, Any], agent: int) -> list[str]:
    blocks = args.get("blocks")
    if blocks and agent < len(blocks) and blocks[agent]:
        return ref.hb.unique_block_list(blocks[agent])
    return ref.hb.unique_block_list(item["legend"].values())


def ref_reward(ref, case: Case) -> float:
    a = case.args
    if case.kind == "str":
        cfg = {"task": {"block_agent1": a["blocks"][0], "block_agent2": a["blocks"][-1],
                        "max_commands": a["max_commands"]}, "output": {"verbose": False}}
        fn = ref.str_reward.get_reward_function(cfg=cfg, num_agents=case.n)
        item = ref_str_item(ref, case.item)
    else:
        task = {"max_commands": a["max_commands"], "limited_resource": a.get("limited_resource", False)}
        for i, key in enumerate(("block_agent1", "block_agent2")):
            if a.get("blocks") and i < len(a["blocks"]):
                task[key] = a["blocks"][i]
        cfg = {"task": task, "output": {"verbose": False}, "_rpg_state": ref_rpg(ref, a)}
        fn = ref.house_reward.get_reward_function(cfg=cfg, num_agents=case.n)
        item = ref_house_item(case.item)
    return float(fn(*[[t] for t in case.texts], batch_items=[item])[0])


def ref_prompts(ref, case: Case, mode: str) -> list[str]:
    a, n = case.args, case.n
    history = [["turn one prompt"] for _ in range(n)]
    common = {"system_prompt": SYSTEM, "user_prompt_single": "ORIGINAL", "user_prompt_agent1": "ORIGINAL",
              "user_prompt_agent2": "ORIGINAL", "max_commands_total": a["max_commands"]}
    if case.kind == "str":
        it = ref_str_item(ref, case.item)
        ctx = {**common, "task_id": it["task_id"], "text": it["string"], "difficulty": it["difficulty"],
               "local_bbox_from": it["local_bbox_from"], "local_bbox_to": it["local_bbox_to"],
               "target_rows_topdown": it["target_rows_topdown"], "allowed_blocks_agent1": a["blocks"][0],
               "allowed_blocks_agent2": a["blocks"][1] if n > 1 else []}
        module = ref.str_ext[mode]
        kwargs: dict[str, Any] = {}
    else:
        it = ref_house_item(case.item)
        limited = a.get("limited_resource", False)
        task = ref.hb.TaskSpec(task_id=it["task_id"], local_bbox_from=it["local_bbox_from"],
                               local_bbox_to=it["local_bbox_to"], inventory=it["inventory"],
                               layers_by_y={int(k): v for k, v in it["layers_by_y"].items()})
        limits = ref.hb.compute_resource_limits(task, num_agents=n) if limited else {}
        lines = [f"- {ref.hb.normalize_block_id(b)}: {limits[ref.hb.normalize_block_id(b)]}"
                 for b in task.inventory.values()
                 if ref.hb.normalize_block_id(b) not in ("air", "cave_air", "void_air")
                 and ref.hb.normalize_block_id(b) in limits]
        ctx = {**common, **it, "allowed_blocks_agent1": ref_house_blocks(ref, case.item, a, 0),
               "allowed_blocks_agent2": ref_house_blocks(ref, case.item, a, 1), "limited_resource": limited,
               "resource_limits_text": ("Resource limits per agent (air unlimited):\n" + "\n".join(lines)) if lines
               else "", "rpg_state": ref_rpg(ref, a)}
        module = ref.house_ext[mode]
        kwargs = {"limit": a.get("lim")} if mode in ("position_modification", "rect_modification") else {}
    return module.format_followup_prompts(ctx=ctx, agent_completions=list(case.texts), num_agents=n,
                                          original_prompt_flag=False, previous_response_flag=True,
                                          prompt_history_per_agent=history, **kwargs)


# ---- comarl's side


def my_env(case: Case, mode: str, turns: int):
    build = build_str if case.kind == "str" else build_house
    return build(case.n, preset="paper", max_turns=turns, mode=mode, original_prompt=False, previous_response=True,
                 system=SYSTEM, **case.args)


def my_reward(case: Case) -> float:
    env = my_env(case, "score_feedback", 1)
    return float(env.step_batch([env.reset(case.item)], [case.texts])[0].reward)


def my_prompts(case: Case, mode: str) -> list[str]:
    env = my_env(case, mode, 2)
    tr = env.step_batch([env.reset(case.item)], [case.texts])[0]
    return list(tr.next_state.prompts)


def modes_of(case: Case) -> tuple[str, ...]:
    if case.kind == "str":
        return STR_MODES
    return tuple(m for m in HOUSE_MODES if m != "resource_schedule" or case.args.get("limited_resource"))


# ---- the static checks


def static_checks(ref) -> tuple[int, list[str]]:
    """Targets, resource limits, rectangles and attack draws; returns (checks made, failures)."""
    checks, bad = 0, []
    rng = random.Random(5)
    texts = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + ["ICML", "CLIM", "LLM", " a b ", "", "x9!", "Zz"]
    texts += ["".join(rng.choice("ABCXYZ mn1") for _ in range(rng.randrange(1, 8))) for _ in range(40)]
    for t in texts:
        for sp in (0, 1, 2, 3):
            checks += 1
            if tuple(ref.sb.render_string_mask_rows(t, spacing=sp)) != string_rows(t, sp):
                bad.append(f"target of {t!r} spacing {sp}")
    from comarl.envs.minecraft.data import load_house_items
    for item in load_house_items(None, "train", None):
        task = task_from_item(item)
        it = ref_house_item(item)
        rtask = ref.hb.TaskSpec(task_id=it["task_id"], local_bbox_from=it["local_bbox_from"],
                                local_bbox_to=it["local_bbox_to"], inventory=it["inventory"],
                                layers_by_y={int(k): v for k, v in it["layers_by_y"].items()})
        for n in (1, 2, 3):
            checks += 1
            if ref.hb.compute_resource_limits(rtask, num_agents=n) != resource_limits(task, n):
                bad.append(f"resource limits {item['task_id']} n={n}")
        for y, rects in rects_by_layer(task).items():
            checks += 1
            theirs = ref.hb.rows_to_rects(rows=task.layers[y], inventory=task.legend, min_x=task.box.lo[0],
                                          min_z=task.box.lo[2])
            if sorted(theirs) != sorted((r.x1, r.z1, r.x2, r.z2, r.block) for r in rects):
                bad.append(f"rectangles {item['task_id']} y={y}")
    for seed in range(60):
        for hp, num, low, high in ((5, 3, 1, 3), (20, 0, 0, 0), (7, 5, 4, 2), (1, 2, 0, 9)):
            checks += 1
            state = ref.prepare_rpg_state({"task": {"player": {"hp": hp}, "spider": {"num": num, "atk_low": low,
                                                                                       "atk_high": high}}}, seed)
            mine = draw_threat(hp, num, low, high, seed)
            if list(mine.attacks) != state["spider_atk_values"] or float(mine.damage) != state["spider_total_dmg"]:
                bad.append(f"attack draw seed {seed} ({hp}, {num}, {low}, {high})")
    return checks, bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reference", help="path of a checkout of OpenMLRL/LLM_Collab_Minecraft")
    ap.add_argument("--record", help="write the reference's rewards and feedback digests to this JSON file")
    ap.add_argument("--commit", default="", help="the reference's commit, written into the record")
    ap.add_argument("--show", type=int, default=5, help="differences printed per kind (default 5)")
    a = ap.parse_args(argv)
    ref = load_reference(a.reference)
    start = time.time()
    cases = str_cases() + house_cases()
    record: dict[str, Any] = {}
    counts = {"reward": [0, 0], "feedback": [0, 0]}
    worst = 0.0
    shown = 0
    for case in cases:
        theirs = ref_reward(ref, case)
        mine = my_reward(case)
        counts["reward"][0] += 1
        counts["reward"][1] += theirs == mine
        worst = max(worst, abs(theirs - mine))
        if theirs != mine and shown < a.show:
            shown += 1
            print(f"reward differs: {case.id}: reference {theirs!r}, comarl {mine!r}")
        digests = []
        for mode in modes_of(case):
            ref_lines = [data_lines(p, "reference") for p in ref_prompts(ref, case, mode)]
            my_lines = [data_lines(p, "comarl") for p in my_prompts(case, mode)]
            counts["feedback"][0] += 1
            counts["feedback"][1] += ref_lines == my_lines
            digests.append(digest(ref_lines))
            if ref_lines != my_lines and shown < 2 * a.show:
                shown += 1
                for i, (r, m) in enumerate(zip(ref_lines, my_lines)):
                    if r != m:
                        j = next((k for k, (x, y) in enumerate(zip(r, m)) if x != y), min(len(r), len(m)))
                        print(f"feedback differs: {case.id} {mode} agent {i} at data line {j}: "
                              f"reference {r[j:j + 2]} comarl {m[j:j + 2]} ({len(r)} vs {len(m)} lines)")
        record[case.id] = [theirs, digest([digests])]
    checks, bad = static_checks(ref)
    for b in bad[:a.show]:
        print("static check differs:", b)
    n_str = sum(1 for c in cases if c.kind == "str")
    print(f"cases: {len(cases)} ({n_str} StrBuild, {len(cases) - n_str} HouseBuild)")
    print(f"rewards equal: {counts['reward'][1]} / {counts['reward'][0]} (largest difference {worst:.3g})")
    print(f"follow-up prompts with equal data: {counts['feedback'][1]} / {counts['feedback'][0]}")
    print(f"static checks equal (targets, limits, rectangles, attack draws): {checks - len(bad)} / {checks}")
    print(f"time: {time.time() - start:.1f} s")
    if a.record:
        meta = {"source": "OpenMLRL/LLM_Collab_Minecraft", "commit": a.commit,
                "made_by": "benchmarks/minecraft_compare.py --record",
                "cases": "case id -> [reference reward, digest of the per-mode digests of the follow-up data]"}
        body = ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in record.items())
        Path(a.record).write_text(json.dumps(meta)[:-1] + ', "records": {\n' + body + "\n}}\n")
        print(f"recorded {len(record)} cases to {a.record}")
    ok = counts["reward"][0] == counts["reward"][1] and counts["feedback"][0] == counts["feedback"][1] and not bad
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
