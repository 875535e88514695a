"""Shared prompt prefixes: each distinct prompt encoded once, same log-probs and gradients as the plain path."""
import copy
import types

import pytest
import torch

import comarl
from comarl.envs.base import FunctionEnv
from comarl.objective.logprobs import completion_logprobs
from comarl.models.lora import LoraSettings
from comarl.objective.prefix_cache import unique_prompts, worth_sharing
from comarl.rollout import collect_rollout
from comarl.models.tiny_model import tiny_model
from comarl.compute.micro_batches import micro_batch_spans
from config_keys import set_keys


def test_unique_prompts_and_when_sharing_is_worth_it():
    distinct, index = unique_prompts([[1, 2], [1, 2], [3], [1, 2]])
    assert distinct == [[1, 2], [3]] and index.tolist() == [0, 0, 1, 0]
    assert worth_sharing([[1, 2], [1, 2]])
    assert not worth_sharing([[1, 2], [3]])  # K = 1: nothing repeats
    assert not worth_sharing([[], []])  # an empty prompt has no last logit to share
    assert not worth_sharing([])


def test_micro_batch_spans_keep_groups_together():
    # three groups of 4, micro-batch 10: whole groups (8 samples), then the third group
    assert micro_batch_spans([4, 4, 4], 10, keep_groups=True) == [(0, 8), (8, 12)]
    assert micro_batch_spans([4, 4, 4], 10, keep_groups=False) == [(0, 10), (10, 12)]
    # a group bigger than the micro-batch is cut into pieces of the micro-batch size
    assert micro_batch_spans([4, 2], 3, keep_groups=True) == [(0, 3), (3, 4), (4, 6)]
    assert micro_batch_spans([2, 4, 1], 4, keep_groups=True) == [(0, 2), (2, 6), (6, 7)]
    assert micro_batch_spans([], 4, keep_groups=True) == []
    with pytest.raises(ValueError, match="micro_batch_size"):
        micro_batch_spans([4], 0, keep_groups=True)


def _batch(seed=1, groups=3, k=4):
    """Prompts of different lengths (EOS = pad = 0 inside them), K completions each of different lengths."""
    g = torch.Generator().manual_seed(seed)
    prompts, comps = [], []
    for u in range(groups):
        p = torch.randint(5, 1000, (3 + 4 * u,), generator=g).tolist()
        p[1] = 0  # EOS/pad id inside the prompt must not be cut or masked
        for j in range(k):
            c = torch.randint(5, 1000, (1 + (3 * j + u) % 7,), generator=g).tolist()
            prompts.append(p)
            comps.append(c + [0] if j % 2 else c)  # some end with EOS
    comps[1] = []  # an empty completion: masked out entirely
    return prompts, comps


def _logprobs_and_grads(model, prompts, comps, share, temperature=0.7):
    model.zero_grad(set_to_none=True)
    lp, mask = completion_logprobs(model, prompts, comps, 0, temperature, share_prefix=share)
    (lp * torch.linspace(0.5, 1.5, lp.shape[1])).sum().backward()
    grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()
             if p.requires_grad]
    return lp.detach(), mask, grads


def _assert_same(plain, shared):
    assert torch.equal(plain[1], shared[1])
    assert (plain[0] - shared[0]).abs().max().item() < 1e-5
    for a, b in zip(plain[2], shared[2]):
        assert (a - b).norm() <= 1e-4 * a.norm() + 1e-8


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_shared_prefix_logprobs_and_gradients_equal_the_plain_path(arch):
    model, _ = tiny_model(arch)
    prompts, comps = _batch()
    plain = _logprobs_and_grads(model, prompts, comps, share=False)
    shared = _logprobs_and_grads(model, prompts, comps, share=True)
    _assert_same(plain, shared)
    assert plain[1][1].sum() == 0 and plain[1].sum() == sum(len(c) for c in comps)


def test_shared_prefix_for_a_lora_agent():
    from peft import get_peft_model

    model, _ = tiny_model("qwen2")
    model = get_peft_model(model, LoraSettings(r=4).peft_config())
    with torch.no_grad():  # B = 0 at the start would make every A gradient zero
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    prompts, comps = _batch(seed=2)
    _assert_same(_logprobs_and_grads(model, prompts, comps, False), _logprobs_and_grads(model, prompts, comps, True))


def test_one_token_completions_need_only_the_prompt_forward():
    model, _ = tiny_model("qwen2")
    prompts = [[5, 6, 7]] * 3 + [[8, 0, 9, 10]] * 3
    comps = [[11], [12], [0], [13], [14], [15]]
    _assert_same(_logprobs_and_grads(model, prompts, comps, False), _logprobs_and_grads(model, prompts, comps, True))


def test_forced_tokens_leave_the_shared_path_mask():
    model, _ = tiny_model("qwen2")
    prompts, comps = [[5, 6]] * 2, [[7, 8, 9], [10]]
    with torch.no_grad():
        lp, mask = completion_logprobs(model, prompts, comps, 0, share_prefix=True,
                                       forced=[[False, True, False], [True]])
    assert mask.tolist() == [[1, 0, 1], [0, 0, 0]]
    assert lp[0, 1] == 0 and lp[1, 0] == 0 and lp[0, 0] != 0


class _NoCache(torch.nn.Module):
    """A causal LM whose forward returns no KV cache (as a model without cache support)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, **kw):
        return types.SimpleNamespace(logits=self.inner(**kw).logits)


def test_models_that_cannot_share_fall_back_with_one_notice(capfd):
    model, _ = tiny_model("qwen2")
    prompts, comps = _batch(seed=3)
    plain = _logprobs_and_grads(model, prompts, comps, False)
    wrapped = _NoCache(model)
    for _ in range(2):
        fallback = _logprobs_and_grads(wrapped, prompts, comps, True)
        _assert_same(plain, fallback)
    err = capfd.readouterr().err
    assert err.count("shared-prefix update off for _NoCache (the model returned no KV cache") == 1
    # gradient checkpointing turns the cache off in training: the update falls back, evaluation still shares
    model.gradient_checkpointing_enable()
    model.train()
    _assert_same(plain, _logprobs_and_grads(model, prompts, comps, True))
    assert "gradient checkpointing turns the cache off" in capfd.readouterr().err


def _trainer(agents, micro_batch, **sections):
    cfg = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=4),
                             run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[],
                                                  log_samples_steps=0),
                             hardware=comarl.HardwareConfig(micro_batch_size=micro_batch))
    set_keys(cfg, **sections)
    env = FunctionEnv([lambda it: f"write about {it['q']} " * (1 + len(it["q"])),
                       lambda it: f"then {it['q']}"], lambda resps, it: sum(len(r) for r in resps) / 20.0)
    return comarl.Trainer(agents, env, [{"q": "a cat"}, {"q": "the bus"}], cfg)


def _updates(t, rollout, share):
    """Weight change of every agent after its update (SGD: lr x gradient) with share_prefix on or off."""
    t.config.hardware.share_prefix = share
    for ref in t.references:
        if ref is not None:
            ref.share_prefix = share
    start = [[p.detach().clone() for p in a.model.parameters()] for a in t.agents]
    deltas = []
    for i, _agent in enumerate(t.agents):
        t.update.update_agent(t.team, i, copy.deepcopy([rollout.agents[i]]), 0)
    for i, agent in enumerate(t.agents):
        deltas.append([p.detach() - s for p, s in zip(agent.model.parameters(), start[i])])
        with torch.no_grad():
            for p, s in zip(agent.model.parameters(), start[i]):
                p.copy_(s)
    return deltas


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("micro_batch", [16, 4, 3])
def test_trainer_update_equals_the_plain_path(lora, micro_batch):
    """num_iterations 2 (old log-probs), KL reference in the loss, tiny and tiny-llama, with/without micro-batches."""
    ls = LoraSettings(r=4) if lora else None
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=8, lr=0.05, optimizer="sgd", lora=ls),
              comarl.AgentConfig(model="tiny-llama", max_new_tokens=6, lr=0.05, optimizer="sgd", temperature=0.8,
                                 lora=ls)]
    t = _trainer(agents, micro_batch, loss={"num_iterations": 2, "kl_beta": 0.1, "max_grad_norm": 0.0})
    torch.manual_seed(0)
    rollout = collect_rollout(t.agents, t.env, t.train_items, t.settings)
    plain, shared = _updates(t, rollout, False), _updates(t, rollout, True)
    moved = 0
    for agent_plain, agent_shared in zip(plain, shared):
        for a, b in zip(agent_plain, agent_shared):
            assert (a - b).norm() <= 1e-4 * a.norm() + 1e-9
            moved += int(a.norm() > 0)
    assert moved > 0


def test_update_memory_is_not_higher_for_the_same_micro_batch():
    """Bytes the forward saves for backward (what sets the update's peak), as benchmarks/shared_prefix.py --memory."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from shared_prefix import saved_bytes

    model, _ = tiny_model("qwen2")
    g = torch.Generator().manual_seed(0)
    prompts, comps = [], []
    for _ in range(2):  # 2 groups x K=4, 200-token prompts, 16-token completions
        p = torch.randint(5, 1000, (200,), generator=g).tolist()
        prompts += [p] * 4
        comps += [torch.randint(5, 1000, (16,), generator=g).tolist() for _ in range(4)]
    plain, shared = saved_bytes(model, prompts, comps, 0, False), saved_bytes(model, prompts, comps, 0, True)
    assert shared < 0.6 * plain
