"""Tiny randomly initialised causal LMs with a tokenizer trained on the fly.

Used by the tests, the CPU demo and the benchmarks: no hub, no download. The
tokenizer is a byte-level BPE trained on Python's own standard-library sources
(always present), so it builds offline in about a second. Its pad id equals its
EOS id and its chat template puts EOS inside every prompt, the two cases that
break naive completion masking.
"""
from __future__ import annotations

import functools
import sysconfig
from pathlib import Path

import torch

EOS = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}" + EOS + "\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_STDLIB_FILES = ("textwrap.py", "string.py", "argparse.py", "collections/__init__.py", "json/decoder.py",
                 "functools.py", "pathlib.py", "random.py", "shutil.py", "dataclasses.py")


def _stdlib_text() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for name in _STDLIB_FILES:
        p = root / name
        if p.exists():
            texts.append(p.read_text(encoding="utf-8", errors="ignore"))
    if not texts:
        raise RuntimeError(f"no standard-library sources found under {root} to train the tiny tokenizer on")
    return texts


@functools.lru_cache(maxsize=8)
def _trained_tokenizer_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [EOS, "<|user|>", "<|assistant|>", "<|system|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_stdlib_text(), trainer=trainer)
    return tok.to_str()


def tiny_tokenizer(vocab_size: int = 1024):
    """A fast tokenizer with pad == eos == ``<|endoftext|>`` and a chat template."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_trained_tokenizer_json(vocab_size)),
                                  eos_token=EOS, pad_token=EOS)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def tiny_model(arch: str = "qwen2", vocab_size: int = 1024, hidden_size: int = 64, num_layers: int = 2,
               seed: int = 0, tokenizer=None, meta: bool = False):
    """Return ``(model, tokenizer)``: a random ``arch`` ("qwen2" or "llama") causal LM.

    ``hidden_size`` 64-256 and 2-4 layers keep a training step at ~0.1 s on a CPU.
    The seed fixes the weights, so two calls give identical models. ``meta``: the architecture on the
    ``meta`` device, no weights (sharded runs fill it from rank 0).
    """
    from transformers import (LlamaConfig, LlamaForCausalLM, PretrainedConfig, PreTrainedModel, Qwen2Config,
                              Qwen2ForCausalLM)

    tok = tokenizer or tiny_tokenizer(vocab_size)
    common = dict(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                  num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=2048, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                  bos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    archs: dict[str, tuple[type[PretrainedConfig], type[PreTrainedModel]]] = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}
    if arch not in archs:
        raise ValueError(f"tiny model arch must be 'qwen2' or 'llama', got {arch!r}")
    config_cls, cls = archs[arch]
    cfg = config_cls(**common)
    if meta:
        with torch.device("meta"):
            model = cls(cfg)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = cls(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok
