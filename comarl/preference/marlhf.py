"""MARLHF from a config: train the joint reward model on a pairs file, then wrap the environment with it.

``env.reward_model`` (:class:`RewardModelSettings`) names a one-label sequence
classifier and a pairs JSONL file; :func:`reward_model_env` fits the model with
the Bradley-Terry loss, measures the pairwise accuracy on the held-out tail of
the pairs, and returns the environment with the model's score as the reward
(``RewardModelEnv``). The on-policy algorithm is ``train.algorithm`` as usual.

Under torchrun ``experiment.py`` passes ``parallel``
(``preference.parallel_fit.ParallelFit``): the fit is data parallel (every rank
reads the whole file and trains on its share of each batch) and, with the run's
sharding (``train.hardware.sharding: fsdp``, built before the trainer), the model is
sharded before it is fitted, so no rank ever trains it whole.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.config_io import ConfigError
from .reward_model import JointRewardModel, RewardModelEnv


@dataclass
class RewardModelSettings:
    model: str = "tiny"
    """Sequence classifier: hub id or local path (loaded with num_labels=1), or "tiny" (a random test model)."""
    pairs: str | None = None
    """Pairs JSONL to train on ({"prompts": [N], "chosen": [N], "rejected": [N]} per line; pairs_out writes it)."""
    held_out: float = 0.1
    """Fraction of the pairs (the file's tail) kept out of training for the pairwise accuracy."""
    epochs: int = 1
    """Passes over the training pairs."""
    batch_size: int = 8
    """Pairs per optimiser step."""
    lr: float = 1.0e-5
    """AdamW learning rate of the reward model."""
    max_grad_norm: float = 0.0
    """Clip the reward model's gradient norm per batch at this (0 = no clipping, as before this key existed)."""
    freeze_backbone: bool = False
    """Train only the classification head."""
    max_length: int = 0
    """Keep the last max_length tokens of each joint text (0 = all)."""
    joint_input: str | None = None
    """"module:function" writing (prompts, responses) into one text (None = role markers, as MAAC's critic)."""
    device: str = "cpu"
    """Device of the reward model."""

    def validate(self, where: str = "env.reward_model", needs_pairs: bool = True) -> None:
        """``where``: the config key these settings sit at; ``needs_pairs``: a pairs file is required (MARLHF)
        or refused (marlhf_iter builds its pairs every round)."""
        if needs_pairs and not self.pairs:
            raise ConfigError(f"{where}.pairs: name the pairs JSONL file the reward model learns from")
        if not needs_pairs and self.pairs:
            raise ConfigError(f"{where}.pairs: marlhf_iter builds its pairs every round; leave it null "
                              f"(a fixed pairs file is env.reward_model's MARLHF)")
        if not 0 <= self.held_out < 1:
            raise ConfigError(f"{where}.held_out: must be in [0, 1), got {self.held_out}")
        if self.max_grad_norm < 0:
            raise ConfigError(f"{where}.max_grad_norm: must be >= 0, got {self.max_grad_norm}")
        for key in ("epochs", "batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{where}.{key}: must be >= 1, got {getattr(self, key)}")


def load_classifier(spec: str, device: str):
    """(one-label sequence classifier, tokenizer) for a hub id, local path or "tiny"."""
    if spec == "tiny":
        from transformers import Qwen2ForSequenceClassification

        from ..models.tiny_model import tiny_model

        lm, tok = tiny_model()
        config = lm.config
        config.num_labels, config.pad_token_id = 1, tok.pad_token_id
        model = Qwen2ForSequenceClassification(config)
        return model.to(device), tok  # type: ignore[arg-type]  # transformers' typed .to takes no device string
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(spec, num_labels=1)
    model.config.pad_token_id = tok.pad_token_id
    return model.to(device), tok


def reward_model_env(env, settings: RewardModelSettings, seed: int = 0, parallel=None):
    """``(RewardModelEnv(env, fitted model), {"rm/accuracy", "rm/train_pairs", "rm/held_out_pairs"})``.

    The classifier's new weights (its head; all of a "tiny" one) are drawn from ``seed``. ``parallel``
    (``JointRewardModel.data_parallel``'s argument; None = this process alone): every rank calls this, the
    fit is data parallel over them (and the model sharded first when ``parallel`` shards).
    """
    import torch

    from ..critics.joint_input import resolve_joint_input

    settings.validate()
    if settings.pairs is None:  # validate() refused it already
        raise ConfigError("env.reward_model.pairs: name the pairs JSONL file the reward model learns from")
    from ..data import resolve_source

    try:
        path = Path(resolve_source(settings.pairs))  # fixture:preference/tldr_pairs.jsonl: the smoke config's
    except FileNotFoundError as e:
        raise ConfigError(f"env.reward_model.pairs: {e}") from None
    if not path.exists():
        raise ConfigError(f"env.reward_model.pairs: {path} does not exist")
    pairs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for n, p in enumerate(pairs):
        for key in ("prompts", "chosen", "rejected"):
            if len(p.get(key, ())) != env.num_agents:
                raise ConfigError(f"env.reward_model.pairs ({path}) pair {n}: {key!r} needs {env.num_agents} entries")
    cut = len(pairs) - int(round(len(pairs) * settings.held_out))
    train, held = pairs[:cut], pairs[cut:]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, tok = load_classifier(settings.model, settings.device)
    rm = JointRewardModel(model, tok, resolve_joint_input(settings.joint_input), settings.freeze_backbone,
                          settings.max_length)
    if parallel is not None:
        rm.data_parallel(parallel)
    rm.fit(train, settings.epochs, settings.batch_size, settings.lr, seed, max_grad_norm=settings.max_grad_norm)
    report = {"rm/accuracy": rm.accuracy(held) if held else float("nan"), "rm/train_pairs": float(len(train)),
              "rm/held_out_pairs": float(len(held))}
    return RewardModelEnv(env, rm), report
