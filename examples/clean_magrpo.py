"""MAGRPO in one file, CleanRL style: two agents, one joint reward, the whole algorithm readable top to bottom.

Nothing of comarl is used but the tiny model loader (``comarl.models.tiny_model``): sampling, the joint reward, the
group-relative advantages, the token log-probs, the loss and the optimiser steps are written out here. The test
suite uses :func:`update` as an independent oracle for comarl's trainer: given the same samples, the same initial
weights and the same settings, one step of each must land on the same weights
(tests/e2e/test_clean_magrpo_oracle.py).

The algorithm, for N agents and K samples per agent per item (aligned joint actions: the k-th samples form joint
action k)::

    for each item x, each agent i:  y_i^k ~ pi_i(. | prompt_i(x)),  k = 1..K
    R^k = reward(y_1^k, ..., y_N^k, x)                          one team reward per joint action
    A_i^k = R^k - mean_k R^k                                      each agent's group-relative advantage
    loss_i = - mean over agent i's sequences [ mean over their tokens of A_i^k * log pi_i(token) ]
    one clipped AdamW step per agent (gradient norm clipped at 1)

With one iteration per batch the PPO ratio is 1, so the clipped surrogate is this plain policy gradient.

    python examples/clean_magrpo.py --steps 20
"""
from __future__ import annotations

import argparse
import random
from dataclasses import dataclass

import torch

from comarl.models.tiny_model import tiny_model


@dataclass
class Args:
    """Every setting of the run, with its default (CleanRL's ``Args``)."""

    steps: int = 4
    """Training steps (a few by default, so the test suite runs the file; the tiny models learn nothing)."""
    items_per_step: int = 2
    """Items (posts) per step."""
    k: int = 4
    """Samples per agent per item."""
    max_new_tokens: int = 12
    """Tokens each agent may write."""
    lr: float = 1e-3
    """AdamW learning rate of each agent."""
    max_grad_norm: float = 1.0
    """Gradient norm clip per agent."""
    seed: int = 0
    """Seed of the models and the sampling."""


ITEMS = ["the bus was late again", "our cat learned to open doors", "it rained on the picnic",
         "my code finally compiled"]


def prompts_of(item: str) -> tuple[str, str]:
    """Agent 0 writes a short summary, agent 1 a longer one."""
    return f"Summarise briefly: {item}", f"Summarise in detail: {item}"


def reward(short: str, long: str) -> float:
    """1 when the detailed text is two to three times the brief one in words, else 0 (the README's task)."""
    a, b = len(short.split()), len(long.split())
    return 1.0 if a and 2 <= b / a <= 3 else 0.0


def encode(tokenizer, text: str) -> list[int]:
    """The agent's prompt ids: its chat template with the user's message and the assistant's turn opened."""
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer(chat, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def sample(model, tokenizer, prompt: list[int], k: int, max_new_tokens: int) -> list[list[int]]:
    """K completions of one prompt, each cut after its first EOS (EOS kept)."""
    ids = torch.tensor([prompt] * k)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                         top_p=1.0, top_k=0, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    completions = []
    for row in out[:, len(prompt):].tolist():
        cut = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        completions.append(row[:cut])
    return completions


def token_logprobs(model, prompts: list[list[int]], completions: list[list[int]], pad_id: int):
    """log pi(token) of every completion token, [B, C], and the mask of real tokens, [B, C].

    Each row is [left-padded prompt | right-padded completion]; position ids count the real tokens before each
    position, as ``generate`` did when it sampled."""
    p_len, c_len = max(map(len, prompts)), max(1, max(map(len, completions)))
    ids = torch.full((len(prompts), p_len + c_len), pad_id)
    attention = torch.zeros_like(ids)
    for b, (p, c) in enumerate(zip(prompts, completions)):
        ids[b, p_len - len(p):p_len], attention[b, p_len - len(p):p_len] = torch.tensor(p), 1
        if c:
            ids[b, p_len:p_len + len(c)], attention[b, p_len:p_len + len(c)] = torch.tensor(c), 1
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits[:, p_len - 1:-1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, p_len:].unsqueeze(-1)).squeeze(-1)
    mask = attention[:, p_len:].float()
    return logp * mask, mask


def group_advantages(returns: torch.Tensor) -> torch.Tensor:
    """[items, K] team returns -> R - mean over the item's K joint actions."""
    return returns - returns.mean(dim=1, keepdim=True)


def update(model, optimizer, prompts: list[list[int]], completions: list[list[int]], advantages: torch.Tensor,
           pad_id: int, max_grad_norm: float) -> float:
    """One agent's step: ``- mean_s [ mean_t A_s * log pi(token_t) ]`` over its S sequences, then a clipped
    AdamW step. Returns the loss."""
    logp, mask = token_logprobs(model, prompts, completions, pad_id)
    per_sequence = (logp * mask).sum(1) / mask.sum(1).clamp(min=1)
    loss = -(advantages.to(per_sequence.dtype) * per_sequence).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()
    return float(loss)


def main(args: Args) -> list[float]:
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    agents = [tiny_model(seed=args.seed + i) for i in range(2)]  # (model, tokenizer) each
    optimizers = [torch.optim.AdamW(m.parameters(), lr=args.lr, weight_decay=0.0) for m, _ in agents]
    history = []
    for step in range(args.steps):
        items = random.sample(ITEMS, args.items_per_step)
        texts, ids = [[], []], [[], []]  # per agent: completion texts, (prompt, completion) ids
        for item in items:
            for i, ((model, tok), prompt) in enumerate(zip(agents, prompts_of(item))):
                p = encode(tok, prompt)
                for c in sample(model, tok, p, args.k, args.max_new_tokens):
                    texts[i].append(tok.decode(c, skip_special_tokens=True))
                    ids[i].append((p, c))
        returns = torch.tensor([[reward(texts[0][g * args.k + k], texts[1][g * args.k + k]) for k in range(args.k)]
                                for g in range(len(items))])
        adv = group_advantages(returns).reshape(-1)  # the team's advantage, the same for both agents
        for (model, tok), opt, pairs in zip(agents, optimizers, ids):
            update(model, opt, [p for p, _ in pairs], [c for _, c in pairs], adv, tok.pad_token_id,
                   args.max_grad_norm)
        history.append(float(returns.mean()))
        print(f"step {step}: reward {history[-1]:.3f}")
    return history


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in vars(Args()).items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    main(Args(**{k.replace("-", "_"): v for k, v in vars(ap.parse_args()).items()}))
