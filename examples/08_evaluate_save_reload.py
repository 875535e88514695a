"""A run folder end to end: train, evaluate on held-out items, save, reload, read the logs.

With `output_dir` the Trainer writes `metrics.jsonl` (one JSON row per step), `samples.jsonl`, a checkpoint
and, with `save`, one Hugging Face folder per agent that `build_agents` (or `from_pretrained`) loads again.
"""
import json
import tempfile
from pathlib import Path

import comarl


def reward(responses, item):
    return float(any(item["answer"] in r for r in responses))


env = comarl.FunctionEnv(formatters=[lambda it: it["question"], lambda it: "Check: " + it["question"]],
                         reward_fn=reward)
train_items = [{"question": "Two plus two?", "answer": "4"}, {"question": "Capital of France?", "answer": "Paris"}]
heldout = [{"question": "Three plus three?", "answer": "6"}]
agents = [comarl.AgentConfig(model="tiny", max_new_tokens=6) for _ in range(2)]

with tempfile.TemporaryDirectory() as tmp:
    run = Path(tmp) / "run"
    config = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=2),
                                run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=["jsonl"],
                                                     output_dir=str(run)))
    trainer = comarl.Trainer(agents, env, train_items, config, eval_dataset=heldout)
    trainer.train()
    scores = trainer.evaluate(num_generations=2)
    print(f"held-out reward {scores['metrics']['reward/mean']:.3f}")
    final = trainer.save(run / "final")

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    print(f"{len(rows)} rows in metrics.jsonl; run folder: {sorted(p.name for p in run.iterdir())}")
    reloaded = comarl.build_agents([comarl.AgentConfig(model=str(final / "agent0"))])[0]
    print(f"reloaded {reloaded.name} from {final.name}/agent0: {type(reloaded.model).__name__}")
