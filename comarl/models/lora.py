"""LoRA agents: several agents, one frozen base model, one ``peft`` adapter each.

All agents whose ``AgentConfig.lora`` is set and whose base model is the same
(same ``model`` id/path/object, tokenizer, dtype, device, gguf file and
``model_kwargs``) share one :class:`SharedBase`: the base is loaded once and
wrapped once as a ``PeftModel`` holding one named adapter per agent
(``agent<i>``). Each agent gets an :class:`AdapterModel`, a thin view that

* activates its own adapter before every forward / generate (so an agent
  never runs with another agent's adapter; calls are sequential, not
  thread-safe),
* reports only its own adapter's parameters from ``parameters()`` (so each
  agent's optimiser, gradient clipping and checkpoint see only its adapter),
* saves and loads only its adapter (``adapter_config.json`` +
  ``adapter_model.safetensors``, loadable with ``PeftModel.from_pretrained``).

The base weights stay frozen (``requires_grad=False``) and bit-identical.
``disable_adapter()`` runs the bare base: that is the LoRA agent's reference
policy for the KL term (no extra copy). :meth:`SharedBase.generate_mixed`
runs several adapters in one ``generate`` call (one adapter per row); the
rollout uses it for agents on one base (``comarl/generation/adapters.py``).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..core.config_io import ConfigError


@dataclass
class LoraSettings:
    """An agent's LoRA adapter (peft ``LoraConfig``)."""

    r: int = 8
    """Rank of the update ``B @ A``."""
    alpha: float = 16.0
    """Scaling numerator: the update is multiplied by alpha / r."""
    dropout: float = 0.0
    """Dropout on the adapter input (0 keeps old and new log-probs comparable across passes)."""
    target_modules: list[str] | None = None
    """Module names to adapt (e.g. [q_proj, v_proj]); None = every linear layer except the LM head."""

    def validate(self, where: str) -> None:
        if self.r < 1:
            raise ConfigError(f"{where}.r must be >= 1, got {self.r}")
        if self.alpha <= 0:
            raise ConfigError(f"{where}.alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"{where}.dropout must be in [0, 1), got {self.dropout}")

    def peft_config(self):
        from peft import LoraConfig

        # peft annotates lora_alpha as int, but only divides by it (alpha / r): a float scale works
        return LoraConfig(r=self.r, lora_alpha=self.alpha,  # type: ignore[arg-type]
                          lora_dropout=self.dropout, task_type="CAUSAL_LM",
                          target_modules=list(self.target_modules) if self.target_modules else "all-linear")


class SharedBase:
    """One base model wrapped once as a ``PeftModel`` with one adapter per agent."""

    def __init__(self, base: torch.nn.Module):
        self.base = base
        self.peft_model: Any = None  # the PeftModel, built with the first adapter
        self.active: str | None = None
        self.adapters: dict[str, list[torch.nn.Parameter]] = {}

    def add(self, name: str, settings: LoraSettings) -> "AdapterModel":
        """Add adapter ``name`` and return the agent's view of it."""
        if name in self.adapters:
            raise ConfigError(f"LoRA adapter {name!r} already exists on this base")
        cfg = settings.peft_config()
        try:
            if self.peft_model is None:
                import warnings

                from peft import get_peft_model

                with warnings.catch_warnings():  # peft 0.21 asks transformers 5 a deprecated attribute
                    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
                    self.peft_model = get_peft_model(self.base, cfg, adapter_name=name)
            else:
                self.peft_model.add_adapter(name, cfg)
        except ValueError as e:  # e.g. target_modules not found in the model
            raise ConfigError(f"agents: LoRA adapter {name}: {e}") from e
        marker = f".{name}."
        params = [p for n, p in self.peft_model.named_parameters() if marker in n]
        if not params:
            raise ConfigError(f"agents: LoRA adapter {name} has no parameters (check lora.target_modules)")
        self.adapters[name] = params
        self.active = None
        self.activate(name)
        return AdapterModel(self, name)

    def activate(self, name: str) -> None:
        """Make ``name`` the only active adapter; every adapter stays trainable."""
        if self.active == name:
            return
        self.peft_model.set_adapter(name)  # peft also freezes the other adapters: undo that
        for params in self.adapters.values():
            for p in params:
                p.requires_grad_(True)
        self.active = name

    def generate_mixed(self, adapter_names: list[str], **kwargs):
        """One ``generate`` call where row b runs adapter ``adapter_names[b]`` (peft mixed-adapter batch).

        ``adapter_names`` must have one entry per input row; peft repeats it only
        for beams, so call with ``num_return_sequences=1`` and pre-expanded rows.
        The model must be in eval mode (peft refuses mixed batches in training).
        """
        unknown = sorted(set(adapter_names) - set(self.adapters))
        if unknown:
            raise ValueError(f"no LoRA adapter named {unknown} on this base (has {sorted(self.adapters)})")
        if kwargs.get("num_return_sequences", 1) != 1 or kwargs.get("num_beams", 1) != 1:
            raise ValueError("generate_mixed: expand rows yourself; num_return_sequences and num_beams must be 1")
        return self.peft_model.generate(adapter_names=list(adapter_names), **kwargs)


class AdapterModel(torch.nn.Module):
    """One agent's view of a :class:`SharedBase`: its adapter only.

    Behaves like the agent's causal LM for what the trainer uses (``__call__``,
    ``generate``, ``parameters``, ``train``/``eval``, ``save_pretrained``,
    ``generation_config``, ``config``); other attributes are looked up on the
    shared ``PeftModel``.
    """

    def __init__(self, shared: SharedBase, adapter: str):
        super().__init__()
        object.__setattr__(self, "shared", shared)  # not a submodule: parameters() stays the adapter's
        object.__setattr__(self, "adapter", adapter)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("shared", "adapter"):
                raise
            return getattr(self.shared.peft_model, name)

    # -- what the optimiser, clipping and checkpoints see
    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        marker = f".{self.adapter}."
        for n, p in self.shared.peft_model.named_parameters():
            if marker in n:
                yield (f"{prefix}.{n}" if prefix else n), p

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters():
            yield p

    def state_dict(self, *args, **kwargs):
        return {n: p.detach() for n, p in self.named_parameters()}

    # -- running
    def forward(self, *args, **kwargs):
        self.shared.activate(self.adapter)
        return self.shared.peft_model(*args, **kwargs)

    def generate(self, *args, **kwargs):
        self.shared.activate(self.adapter)
        return self.shared.peft_model.generate(*args, **kwargs)

    def train(self, mode: bool = True):
        self.training = mode
        self.shared.peft_model.train(mode)
        return self

    def to(self, *args, **kwargs):
        self.shared.peft_model.to(*args, **kwargs)
        return self

    @contextmanager
    def disable_adapter(self):
        """Run the bare base model inside this block (the reference policy)."""
        with self.shared.peft_model.disable_adapter():
            yield

    # -- files
    def save_pretrained(self, folder: str | Path, state_dict: dict | None = None, **_) -> None:
        """Write this adapter only: adapter_config.json + adapter_model.safetensors.

        ``state_dict``: this view's ``state_dict()`` with other values (a sharded adapter, gathered).
        """
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = get_peft_model_state_dict(self.shared.peft_model, state_dict=state_dict, adapter_name=self.adapter)
        state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
        save_file(state, str(folder / "adapter_model.safetensors"))
        self.shared.peft_model.peft_config[self.adapter].save_pretrained(str(folder))

    def load_adapter_weights(self, folder: str | Path) -> None:
        """Put an adapter saved by :meth:`save_pretrained` back into this agent's adapter."""
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        folder = Path(folder)
        if not (folder / "adapter_config.json").exists():
            raise FileNotFoundError(f"{folder} holds no LoRA adapter (no adapter_config.json)")
        weights = load_peft_weights(str(folder), device=str(next(self.parameters()).device))
        result = set_peft_model_state_dict(self.shared.peft_model, weights, adapter_name=self.adapter)
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        missing = [k for k in (getattr(result, "missing_keys", []) or []) if f".{self.adapter}." in k]
        if unexpected or missing:
            raise RuntimeError(f"adapter in {folder} does not match agent adapter {self.adapter}: "
                               f"missing {missing[:3]}, unexpected {unexpected[:3]}")


def base_key(cfg) -> tuple:
    """Agents whose configs give the same key share one base model."""
    src = cfg.model
    model = ("object", id(src)) if isinstance(src, torch.nn.Module) else ("name", src)
    tok = cfg.tokenizer if isinstance(cfg.tokenizer, (str, type(None))) else ("object", id(cfg.tokenizer))
    return (model, tok, cfg.dtype, cfg.device, cfg.gguf_file, repr(sorted(cfg.model_kwargs.items())))
