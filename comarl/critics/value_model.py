"""A value function over text: a backbone (an agent's own model, or a separate critic model) and a value head.

The value of a token sequence is read at its last token: the head maps the
backbone's last hidden state there to one number. A sequence-classification
model with one label is its own head (its logit is the value).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn


class ValueHead(nn.Module):
    """Hidden state [S, H] -> value [S]: linear, or ``Linear(H, d) -> tanh -> Linear(d, 1)`` when ``hidden_dim`` > 0."""

    def __init__(self, hidden_size: int, hidden_dim: int = 0):
        super().__init__()
        self.net: nn.Module
        if hidden_dim > 0:
            first, last = nn.Linear(hidden_size, hidden_dim), nn.Linear(hidden_dim, 1)
            self.net = nn.Sequential(first, nn.Tanh(), last)
        else:
            last = nn.Linear(hidden_size, 1)
            self.net = last
        nn.init.zeros_(last.bias)  # start at V = 0-ish: the first advantages are (nearly) the rewards
        nn.init.normal_(last.weight, std=1.0 / (hidden_size + 1) ** 0.5 * 0.1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net(hidden).squeeze(-1)


def is_sequence_classifier(model) -> bool:
    """A ``*ForSequenceClassification`` model (``model.score`` head, logits [S, num_labels])."""
    base = getattr(model, "get_base_model", lambda: model)()
    return type(base).__name__.endswith("ForSequenceClassification")


class ValueModel:
    """``values(prompts, responses) -> [S]`` for one critic.

    Args:
        backbone: a causal LM (or one-label sequence classifier); an agent's own
            model for a value head on the agent (its gradients then go to the
            agent's optimiser), else a separate critic model.
        tokenizer: the backbone's tokenizer.
        head: a :class:`ValueHead`, or None for a sequence classifier.
        encode_prompts: text -> ids of prompts (an agent's chat rendering; default: plain tokenizer).
        owns_backbone: True for a separate critic: its optimiser trains the backbone too.
        max_length: keep only the last ``max_length`` tokens (0: all).
    """

    def __init__(self, backbone, tokenizer, head: ValueHead | None, encode_prompts: Callable | None = None,
                 owns_backbone: bool = True, max_length: int = 0):
        self.backbone, self.tokenizer, self.head = backbone, tokenizer, head
        self.owns_backbone, self.max_length = owns_backbone, max_length
        self._encode_prompts = encode_prompts or (lambda texts: [list(x) for x in tokenizer(list(texts))["input_ids"]])

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    def parameters(self) -> list[nn.Parameter]:
        """What the critic's optimiser trains: the head, and a separate critic's own backbone."""
        params = list(self.head.parameters()) if self.head is not None else []
        if self.owns_backbone:
            params += [p for p in self.backbone.parameters() if p.requires_grad]
        return params

    def modules(self) -> list[nn.Module]:
        return [m for m in ((self.backbone if self.owns_backbone else None), self.head) if m is not None]

    def trained_module(self) -> nn.Module:
        """What the critic's optimiser trains as one module (``backbone.*`` if owned, ``head.*``): the state a
        sharded checkpoint writes (a value head on an agent: the head only; the agent is saved as an agent)."""
        parts = {"backbone": self.backbone} if self.owns_backbone else {}
        if self.head is not None:
            parts["head"] = self.head
        return nn.ModuleDict(parts)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def encode(self, prompts: list[str], responses: list[str] | None = None) -> list[list[int]]:
        """Token ids of each critic input: the prompt, then (Q critic) the response's tokens."""
        ids = self._encode_prompts(prompts)
        if responses is not None:
            resp = self.tokenizer(list(responses), add_special_tokens=False)["input_ids"]
            ids = [p + list(r) for p, r in zip(ids, resp)]
        if self.max_length:
            ids = [x[-self.max_length:] for x in ids]
        return [x if x else [self.tokenizer.eos_token_id or 0] for x in ids]

    def values(self, ids: list[list[int]]) -> torch.Tensor:
        """Values of token sequences -> [S] float32 on the critic's device (gradient flows when enabled).

        Left-padded so that every sequence's last token sits in the last position."""
        pad = self.pad_id
        width = max(len(x) for x in ids)
        inp = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for s, x in enumerate(ids):
            inp[s, width - len(x):] = torch.tensor(x, dtype=torch.long)
            mask[s, width - len(x):] = 1
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        dev = self.device
        inp, mask, pos = inp.to(dev), mask.to(dev), pos.to(dev)
        if self.head is None:
            return self.backbone(input_ids=inp, attention_mask=mask, position_ids=pos).logits[:, -1].float()
        try:
            out = self.backbone(input_ids=inp, attention_mask=mask, position_ids=pos, output_hidden_states=True,
                                logits_to_keep=1)
        except TypeError:  # models without logits_to_keep
            out = self.backbone(input_ids=inp, attention_mask=mask, position_ids=pos, output_hidden_states=True)
        hidden = out.hidden_states[-1][:, -1]
        head_param = next(self.head.parameters())
        return self.head(hidden.to(head_param.device, head_param.dtype)).float()
