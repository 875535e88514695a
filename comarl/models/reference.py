"""Reference policy for the KL term: the agent's starting weights, frozen.

* Full fine-tuning agent: a frozen deep copy of the model, taken when the
  trainer is built (before any update or resume), on the agent's device.
* LoRA agent (:class:`comarl.models.lora.AdapterModel`, or a ``PeftModel`` passed in
  as the model object): the same base with the adapter switched off, so it
  costs no extra copy. That is the starting policy because a fresh LoRA
  adapter's ``B`` matrix is zero.

The trainer builds references only when ``train.loss.kl_beta > 0``. With
``share_prefix`` each distinct prompt is encoded once (comarl/objective/prefix_cache.py).
"""
from __future__ import annotations

import copy
from contextlib import nullcontext

import torch

from ..objective.logprobs import completion_logprobs


class Reference:
    """Log-probs of completions under an agent's reference policy."""

    def __init__(self, agent, share_prefix: bool = False):
        self.agent = agent
        self.share_prefix = share_prefix
        model = agent.model
        self.adapter_off = hasattr(model, "disable_adapter") and hasattr(model, "peft_config")
        self.model = None
        if not self.adapter_off:
            self.model = copy.deepcopy(model)
            self.model.eval()
            self.model.requires_grad_(False)

    @torch.no_grad()
    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ref_logp [S, T], mask [S, T])`` at the agent's sampling temperature (as the policy's)."""
        agent = self.agent
        pad, temp = agent.tokenizer.pad_token_id, agent.config.temperature
        if self.model is not None:
            return completion_logprobs(self.model, prompts, completions, pad, temp, self.share_prefix)
        model = agent.model
        was_training = model.training
        model.eval()  # no adapter dropout in the reference
        try:
            with model.disable_adapter() if self.adapter_off else nullcontext():
                return completion_logprobs(model, prompts, completions, pad, temp, self.share_prefix)
        finally:
            model.train(was_training)


def build_reference(agent, share_prefix: bool = False) -> Reference:
    """The frozen starting policy of ``agent`` (see the module docstring)."""
    return Reference(agent, share_prefix)
