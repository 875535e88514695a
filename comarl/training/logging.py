"""Metric sinks (JSON lines, TensorBoard, optional W&B), sample logs (``samples.jsonl``, ``trees.jsonl``) and the
progress bar.

Only rank 0 logs. W&B is imported only when ``report_to`` names it.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import IO


def sample_row(example: dict) -> dict:
    """``{"prompts": [...], "responses": [...], ...}`` -> ``{..., "agents": [{"prompt", "response"}, ...]}``."""
    ex = dict(example)
    if "prompts" in ex and "responses" in ex:
        ex["agents"] = [{"prompt": p, "response": r} for p, r in zip(ex.pop("prompts"), ex.pop("responses"))]
    return ex


class MetricsLogger:
    def __init__(self, output_dir: str | None, report_to: list[str], enabled: bool = True,
                 wandb_project: str = "comarl", run_config: dict | None = None):
        self.enabled = enabled and output_dir is not None
        self.dir = Path(output_dir) if output_dir else None
        self._jsonl = self._samples = self._tb = self._wandb = None
        self._trees: IO[str] | None = None
        if not self.enabled:
            return
        assert self.dir is not None  # enabled: output_dir is set
        self.dir.mkdir(parents=True, exist_ok=True)
        if "jsonl" in report_to:
            self._jsonl = open(self.dir / "metrics.jsonl", "a", encoding="utf-8")
        self._samples = open(self.dir / "samples.jsonl", "a", encoding="utf-8")
        if "tensorboard" in report_to:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.dir / "tensorboard"))
        if "wandb" in report_to:
            try:
                import wandb
            except ImportError as e:
                raise ImportError("train.run.report_to has wandb but the wandb package is not installed "
                                  "(pip install wandb)") from e
            self._wandb = wandb.init(project=wandb_project, config=run_config or {}, dir=str(self.dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        clean = {k: (float(v) if isinstance(v, (int, float)) and math.isfinite(v) else str(v))
                 for k, v in metrics.items()}
        if self._jsonl:
            self._jsonl.write(json.dumps({"step": step, "time": time.time(), **clean}) + "\n")
            self._jsonl.flush()
        if self._tb:
            for k, v in clean.items():
                if isinstance(v, float):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb:
            self._wandb.log(clean, step=step)

    def log_samples(self, step: int, examples: list[dict]) -> None:
        """One JSON line per example: step, item, reward and, per agent, its prompt next to its response."""
        if self.enabled and self._samples and examples:
            for ex in examples:
                self._samples.write(json.dumps({"step": step, **sample_row(ex)}) + "\n")
            self._samples.flush()

    def log_trees(self, records: list[dict]) -> None:
        """One JSON line per record of ``sample_records.tree_records`` (the file is opened at the first)."""
        if not (self.enabled and records):
            return
        if self._trees is None:
            assert self.dir is not None  # enabled: output_dir is set
            self._trees = open(self.dir / "trees.jsonl", "a", encoding="utf-8")
        self._trees.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        self._trees.flush()

    def close(self) -> None:
        for f in (self._jsonl, self._samples, self._trees):
            if f:
                f.close()
        if self._tb:
            self._tb.close()
        if self._wandb:
            self._wandb.finish()
        self._jsonl = self._samples = self._trees = self._tb = self._wandb = None


class Progress:
    """A tqdm bar with step, reward and seconds per step (no-op when disabled)."""

    def __init__(self, total: int, initial: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True)

    def update(self, metrics: dict[str, float]) -> None:
        if self.bar is None:
            return
        self.bar.set_postfix({"reward": f"{metrics.get('reward/mean', float('nan')):.3f}",
                              "s/step": f"{metrics.get('time/step_s', float('nan')):.2f}"}, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
