"""A small Trainer on the demo writing task (tiny agents, 4 new tokens, 2 items x K=2, jsonl logs only), for
the tests of run folders and checkpoints, which test the files rather than the learning."""
import comarl
from comarl.demo import demo_setup


def demo_trainer(out, steps: int = 2, **over) -> comarl.Trainer:
    """A Trainer writing into ``out`` for ``steps`` steps; ``over``: TrainConfig fields to set."""
    agents, env, items, cfg = demo_setup("tiny", "writing", steps, str(out), 0)
    for a in agents:
        a.max_new_tokens = 4
    cfg.num_generations, cfg.batch_size, cfg.progress_bar, cfg.report_to = 2, 2, False, ["jsonl"]
    for k, v in over.items():
        setattr(cfg, k, v)
    return comarl.Trainer(agents, env, items, cfg)
