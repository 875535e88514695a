"""Shared work for the peer comparison: workloads, prompts, reward, transition, tiny model.

Every runner (``peers/comarl_runner.py``, ``peers/comlrl_runner.py``,
``peers/trl_runner.py``) imports this module, so the three libraries see the
same prompts, the same reward and the same model. It must stay importable
without comarl (the peer runners run in their own virtual environments), so
it uses only the standard library at import time; ``build_tiny_model`` imports
torch / transformers / tokenizers when called.
"""
from __future__ import annotations

import json
import math
import os
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Workload:
    """One benchmark setting; every library runs it with these values.

    Attributes:
        name: short id used on the command line and in the table ("a".."d").
        title: one-line description for the results table.
        num_agents: agents in the team (1 = plain GRPO).
        num_generations: K, samples per prompt per agent at every node.
        num_turns: turns per episode (2 = one transition, tree of K children).
        joint_mode: "aligned" (sample k of each agent forms joint action k)
            or "cross" (all K^N combinations).
        max_new_tokens: generation length cap per completion.
        num_items: training items (dataset rows) per epoch.
        epochs: passes over the items.
        lr: AdamW learning rate.
        temperature: sampling temperature (top_p = 1, no top_k everywhere).
        peers: the peer libraries this workload is compared with.
    """

    name: str
    title: str
    num_agents: int
    num_generations: int
    num_turns: int
    joint_mode: str
    max_new_tokens: int = 32
    num_items: int = 16
    epochs: int = 1
    lr: float = 1e-5
    temperature: float = 1.0
    peers: tuple[str, ...] = ("comlrl",)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


WORKLOADS: dict[str, Workload] = {
    "a": Workload("a", "2 agents, 1 turn, aligned, K=4", num_agents=2, num_generations=4, num_turns=1,
                  joint_mode="aligned"),
    "b": Workload("b", "2 agents, 1 turn, cross, K=4", num_agents=2, num_generations=4, num_turns=1,
                  joint_mode="cross"),
    "c": Workload("c", "2 agents, 2 turns, aligned, K=2", num_agents=2, num_generations=2, num_turns=2,
                  joint_mode="aligned"),
    "d": Workload("d", "1 agent GRPO, K=8", num_agents=1, num_generations=8, num_turns=1,
                  joint_mode="aligned", peers=("trl",)),
}

# Batch sizes run for every workload: items per optimiser step.
BATCH_SIZES: tuple[int, ...] = (1, 4)

TOPICS: tuple[str, ...] = (
    "a lighthouse keeper", "rain on a tin roof", "the first day of school", "a lost umbrella",
    "bread rising overnight", "a chess match in a park", "migrating geese", "an old radio",
    "a city at dawn", "planting tomatoes", "a broken clock", "the night train",
    "a mountain hut", "learning to swim", "a market on Sunday", "the last page of a book",
)

TARGET_CHARS = 60  # reward peak: each response about this many characters


def get_workload(name: str) -> Workload:
    """The workload called ``name``; a clear error for unknown names."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; choose one of {sorted(WORKLOADS)}")
    return WORKLOADS[name]


def make_items(n: int = 16) -> list[dict[str, Any]]:
    """The deterministic training rows: ``{"topic", "prompt"}``, ``n`` <= 16."""
    if not 1 <= n <= len(TOPICS):
        raise ValueError(f"num_items={n} must be in 1..{len(TOPICS)}")
    return [{"topic": t, "prompt": f"Write about {t}."} for t in TOPICS[:n]]


def format_agent(item: Mapping[str, Any], agent: int, num_agents: int) -> str:
    """First-turn prompt of agent ``agent`` for ``item`` (plain text, no chat template)."""
    if num_agents == 1:
        return f"Write one sentence about {item['topic']}.\n"
    roles = ("Write a short title about", "Write one sentence about")
    return f"{roles[agent % len(roles)]} {item['topic']}.\n"


def formatters(num_agents: int) -> list:
    """One ``item -> prompt`` callable per agent."""
    return [lambda item, i=i: format_agent(item, i, num_agents) for i in range(num_agents)]


def length_score(text: str, target: int = TARGET_CHARS) -> float:
    """exp(-|len(text) - target| / target), in (0, 1]; 1 at exactly ``target`` chars."""
    return math.exp(-abs(len(text) - target) / target)


def reward(responses: Sequence[str], item: Mapping[str, Any] | None = None) -> float:
    """Team reward for one joint action, identical for every library.

    r = mean_i length_score(response_i) for one agent; with two or more agents
    the mean is multiplied by a balance term 1 - |l0 - l1| / (l0 + l1 + 1)
    comparing the first two responses' lengths. Pure Python, cheap.
    """
    score = sum(length_score(r) for r in responses) / len(responses)
    if len(responses) >= 2:
        l0, l1 = len(responses[0]), len(responses[1])
        score *= 1.0 - abs(l0 - l1) / (l0 + l1 + 1)
    return float(score)


def next_prompts(prev_prompts: Sequence[str], responses: Sequence[str]) -> list[str]:
    """The transition of workload (c): agent i's turn-2 prompt.

    prompt_i' = prompt_i + own response (first 80 chars) + the other agents'
    responses (first 80 chars each) + "Revise:".
    """
    out = []
    for i, (p, r) in enumerate(zip(prev_prompts, responses)):
        others = " | ".join(o[:80] for j, o in enumerate(responses) if j != i)
        out.append(f"{p}You wrote: {r[:80]}\nTeammate wrote: {others}\nRevise:\n")
    return out


# ---------------------------------------------------------------- tiny model

MODEL_CONFIG = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=256, max_position_embeddings=1024, tie_word_embeddings=True)
VOCAB_SIZE = 4096
EOS = "<|endoftext|>"
SEED = 1234


def _stdlib_text(max_bytes: int = 3_000_000) -> list[str]:
    """Python standard-library sources, sorted by name, up to ``max_bytes``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for path in sorted(root.glob("*.py")):
        try:
            t = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(t)
        total += len(t)
        if total >= max_bytes:
            break
    if not texts:
        raise RuntimeError(f"no .py sources found under {root} to train the tokenizer")
    return texts


def build_tiny_model(out_dir: str | os.PathLike, max_text_bytes: int = 3_000_000) -> Path:
    """Save the shared tiny Qwen2 model + 4k ByteLevel-BPE tokenizer to ``out_dir`` once.

    Skips the work when ``out_dir/config.json`` and the tokenizer already exist.
    Weights are random (seed ``SEED``); pad = eos = ``<|endoftext|>``; no chat
    template, left padding. ``max_text_bytes`` bounds the tokenizer's training
    text (tests pass a small value to build in about a second).
    """
    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_stdlib_text(max_text_bytes), trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, bos_token=None,
                                     padding_side="left")
    eos_id = hf_tok.convert_tokens_to_ids(EOS)

    torch.manual_seed(SEED)
    cfg = Qwen2Config(vocab_size=len(hf_tok), bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
                      **MODEL_CONFIG)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=eos_id, bos_token_id=eos_id)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)
    (out / "benchmark_model.json").write_text(json.dumps({"seed": SEED, "vocab_size": len(hf_tok), **MODEL_CONFIG}))
    return out


# ------------------------------------------------------------ result record

RESULT_KEYS = ("library", "workload", "batch_size", "wall_s", "items", "completions_generated",
               "optimizer_steps", "peak_rss_mb")


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (Linux ru_maxrss is in KiB)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def write_result(path: str | os.PathLike, **fields: Any) -> dict[str, Any]:
    """Write one run's JSON record; every key of ``RESULT_KEYS`` is required."""
    missing = [k for k in RESULT_KEYS if k not in fields]
    if missing:
        raise ValueError(f"result record is missing {missing}")
    Path(path).write_text(json.dumps(fields, indent=1))
    return fields


def record_run(args, library: str, wl, n_items: int, counter, setup_s: float, wall_s: float,
               **extra: Any) -> dict[str, Any]:
    """Write one training run's record from a runner's arguments, its workload and its ``WorkCounter``."""
    return write_result(
        args.out, library=library, workload=wl.name, batch_size=args.batch_size, wall_s=wall_s,
        setup_s=setup_s, items=n_items * wl.epochs, completions_generated=counter.completions,
        generate_calls=counter.generate_calls, optimizer_steps=counter.optimizer_steps,
        peak_rss_mb=peak_rss_mb(), **extra)


class WorkCounter:
    """Counts completions generated and optimiser steps, library-agnostically.

    ``install()`` wraps ``transformers.GenerationMixin.generate`` (every HF
    causal LM inherits it) to add the number of returned sequences, and
    registers a global ``torch.optim.Optimizer`` step post-hook. Only a
    library that bypasses both (e.g. vLLM) escapes the count. ``uninstall()``
    restores both (for in-process use such as tests).
    """

    def __init__(self) -> None:
        self.completions = 0
        self.optimizer_steps = 0
        self.generate_calls = 0
        self._restore = None

    def uninstall(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    def install(self) -> "WorkCounter":
        import torch
        from transformers.generation.utils import GenerationMixin

        original = GenerationMixin.generate
        counter = self

        def counting_generate(model, *args, **kwargs):
            out = original(model, *args, **kwargs)
            seq = out if isinstance(out, torch.Tensor) else out.sequences
            counter.completions += int(seq.shape[0])
            counter.generate_calls += 1
            return out

        GenerationMixin.generate = counting_generate

        def on_step(optimizer, args, kwargs):
            counter.optimizer_steps += 1

        from torch.optim.optimizer import register_optimizer_step_post_hook
        handle = register_optimizer_step_post_hook(on_step)

        def restore():
            GenerationMixin.generate = original
            handle.remove()

        self._restore = restore
        return self


def seed_everything(seed: int = 0) -> None:
    """Seed python, numpy (if present) and torch."""
    import random
    import torch
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
        np.random.seed(seed)
    except ImportError:
        pass


def runner_args(argv: Sequence[str] | None = None):
    """The CLI every runner shares: --workload --model --batch-size --out [--items]."""
    import argparse
    ap = argparse.ArgumentParser(description="Run one benchmark training run and write a JSON record.")
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--model", required=True, help="folder written by build_tiny_model")
    ap.add_argument("--batch-size", type=int, default=1, help="items per optimiser step")
    ap.add_argument("--out", required=True, help="where to write the JSON record")
    ap.add_argument("--items", type=int, default=None, help="override the workload's item count (smoke tests)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.batch_size < 1:
        ap.error("--batch-size must be >= 1")
    return args
