"""A small Trainer on the demo writing task (tiny agents, 4 new tokens, 2 items x K=2, jsonl logs only), for
the tests of run folders and checkpoints, which test the files rather than the learning."""
import dataclasses

import comarl
from comarl.demo import demo_setup


def demo_trainer(out, steps: int = 2, **run) -> comarl.Trainer:
    """A Trainer writing into ``out`` for ``steps`` steps; ``run``: keys of ``train.run`` to set (resume, save_steps,
    save_total_limit...)."""
    agents, env, items, cfg = demo_setup("tiny", "writing", steps, str(out), 0)
    for a in agents:
        a.max_new_tokens = 4
    cfg.rollout.num_generations = 2
    cfg.run = dataclasses.replace(cfg.run, batch_size=2, progress_bar=False, report_to=["jsonl"], **run)
    return comarl.Trainer(agents, env, items, cfg)
