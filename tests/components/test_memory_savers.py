"""Memory savers: gradient checkpointing, autocast (bf16 on CPU; fp16 refused off CUDA), fp16 loss scaling,
8-bit/paged optimisers (bitsandbytes optional)."""
import importlib.util

import pytest
import torch

from comarl import AgentConfig, ConfigError, FunctionEnv, HardwareConfig, RolloutConfig, RunConfig, TrainConfig, Trainer
from comarl.objective.logprobs import completion_logprobs
from comarl.models.tiny_model import tiny_model
from comarl.core.runtime import check_mixed_precision
from comarl.compute.precision import LossScaler, autocast, backward, enable_gradient_checkpointing

HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None

PROMPTS = [[5, 6, 7, 8], [9, 10]]
COMPS = [[11, 12, 0], [13, 14, 15, 16]]


def _loss_and_grads(model, mode="no", saved=None):
    """(loss, grads, logp); ``saved`` collects the size of every tensor kept for backward."""
    model.zero_grad(set_to_none=True)
    model.train()

    def pack(t):
        if saved is not None:
            saved.append(t.numel())
        return t

    with autocast(mode, "cpu"), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, mask = completion_logprobs(model, PROMPTS, COMPS, pad_id=0)
    loss = -(logp * mask).sum() / mask.sum()
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}, logp


def test_gradient_checkpointing_gives_the_same_loss_and_gradients():
    model, _ = tiny_model(hidden_size=64, num_layers=4, seed=3)
    saved_off, saved_on = [], []
    loss_off, grads_off, _ = _loss_and_grads(model, saved=saved_off)
    enable_gradient_checkpointing(model, "agent0")
    loss_on, grads_on, _ = _loss_and_grads(model, saved=saved_on)
    # checkpointing is active: far fewer activation elements kept for backward (measured 337k -> 90k elements here)
    assert sum(saved_on) < sum(saved_off) / 2, (sum(saved_on), sum(saved_off))
    assert loss_on == pytest.approx(loss_off, abs=1e-6)
    for n in grads_off:
        assert torch.allclose(grads_on[n], grads_off[n], atol=1e-6), n


def test_trainer_turns_gradient_checkpointing_on():
    cfg = TrainConfig(hardware=HardwareConfig(gradient_checkpointing=True), rollout=RolloutConfig(num_generations=2),
                      run=RunConfig(batch_size=1, max_steps=1, progress_bar=False, report_to=[]))
    env = FunctionEnv([lambda it: "q " + it["q"]], lambda r, it: float(len(r[0]) % 2))
    t = Trainer([AgentConfig(model="tiny", max_new_tokens=4, model_kwargs={"hidden_size": 32, "num_layers": 1})],
                env, [{"q": "x"}], cfg)
    assert t.agents[0].model.is_activation_checkpointing
    t.train()


def test_bf16_autocast_works_on_cpu_and_is_close_to_float32():
    model, _ = tiny_model(hidden_size=64, num_layers=2, seed=3)
    loss32, grads32, logp32 = _loss_and_grads(model)
    seen = []
    h = model.lm_head.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    loss16, grads16, logp16 = _loss_and_grads(model, "bf16")
    h.remove()
    assert seen == [torch.bfloat16]  # the matmuls ran in bf16 ...
    assert logp16.dtype == torch.float32  # ... the log-probs are float32
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay float32
    assert loss16 == pytest.approx(loss32, rel=2e-2)


def test_fp16_is_refused_off_cuda_and_unknown_modes_are_errors():
    with pytest.raises(ConfigError, match="train.hardware.mixed_precision=fp16: agent 0 is on cpu; fp16 autocast"):
        check_mixed_precision("fp16", ["cpu", "cpu"])
    with pytest.raises(ConfigError, match="train.hardware.mixed_precision: must be one of"):
        TrainConfig(hardware=HardwareConfig(mixed_precision="fp8")).validate(1)
    check_mixed_precision("bf16", ["cpu"])
    check_mixed_precision("no", ["cpu"])


def test_loss_scaler_unscales_gradients_and_backs_off_on_overflow():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 1)
    x = torch.tensor([[1.0, 2.0, 3.0]])
    lin(x).sum().backward()
    plain = lin.weight.grad.clone()  # d/dw (w.x + b) = x
    assert plain.tolist() == [[1.0, 2.0, 3.0]]
    lin.zero_grad()
    scaler = LossScaler(init_scale=1024.0, growth_interval=2).install(lin)
    backward(lin(x).sum(), scaler)
    assert torch.equal(lin.weight.grad, plain)  # (grad * 1024) / 1024 exactly
    # overflow: a scale that turns the loss into inf -> non-finite grads -> the next backward halves the scale
    scaler.scale = 3e38
    lin.zero_grad()
    backward(lin(x).sum(), scaler)
    assert not torch.isfinite(lin.weight.grad).all()
    lin.zero_grad()
    backward(lin(x).sum(), scaler)
    assert scaler.overflows == 1 and scaler.scale == 1.5e38
    # growth: after growth_interval clean backward passes the scale doubles
    scaler.update()  # consume the last pass (1.5e38 overflows too)
    scaler.scale, scaler.good = 8.0, 0
    backward(lin(x).sum(), scaler)  # nothing to judge yet
    backward(lin(x).sum(), scaler)  # previous pass clean: good = 1
    backward(lin(x).sum(), scaler)  # good = 2 -> scale 16
    assert scaler.scale == 16.0
    scaler.remove()


def test_trainer_with_bf16_on_cpu_runs_a_step():
    cfg = TrainConfig(hardware=HardwareConfig(mixed_precision="bf16"), rollout=RolloutConfig(num_generations=2),
                      run=RunConfig(batch_size=1, max_steps=1, progress_bar=False, report_to=[]))
    env = FunctionEnv([lambda it: "q " + it["q"]], lambda r, it: float(len(r[0]) % 3))
    t = Trainer([AgentConfig(model="tiny", max_new_tokens=6, model_kwargs={"hidden_size": 32, "num_layers": 1})],
                env, [{"q": "x"}], cfg)
    hist = t.train()
    assert torch.isfinite(torch.tensor(hist[-1]["agent0/grad_norm"]))


@pytest.mark.skipif(HAS_BNB, reason="checks the error raised without bitsandbytes")
@pytest.mark.parametrize("name", ["adamw_8bit", "paged_adamw", "paged_adamw_8bit"])
def test_bitsandbytes_optimizer_without_the_package_is_a_clear_error(name):
    with pytest.raises(ConfigError, match=rf'agents\[0\].optimizer = "{name}" needs the optional bitsandbytes package'):
        Trainer([AgentConfig(model="tiny", optimizer=name)], FunctionEnv([lambda it: "q"], lambda r, it: 0.0),
                [{"q": "x"}], TrainConfig(run=RunConfig(progress_bar=False, report_to=[])))


def test_unknown_optimizer_names_the_key():
    with pytest.raises(ConfigError, match=r"agents.1.optimizer must be one of \['adamw', 'sgd', 'adamw_8bit'"):
        AgentConfig(optimizer="lion").validate("agents.1")


def test_sharded_loss_scaler_keeps_its_scale_over_a_step_and_unscales_once():
    """FSDP mode: no hooks; S fixed over the step's backward passes; unscale_sharded divides the accumulated
    gradients once and adjusts S (here one process: the overflow flag's all-reduce is the flag itself)."""
    lin = torch.nn.Linear(3, 1)
    x = torch.tensor([[1.0, 2.0, 3.0]])
    scaler = LossScaler(init_scale=1024.0, growth_interval=2, sharded=True).install(lin)
    for _ in range(2):  # two micro-batches accumulate 2 x 1024 x x
        backward(lin(x).sum(), scaler)
    assert lin.weight.grad.tolist() == [[2048.0, 4096.0, 6144.0]] and scaler.scale == 1024.0
    scaler.unscale_sharded(list(lin.parameters()))
    assert lin.weight.grad.tolist() == [[2.0, 4.0, 6.0]] and scaler.good == 1
    lin.zero_grad()
    backward(lin(x).sum(), scaler)
    scaler.unscale_sharded(list(lin.parameters()))
    assert scaler.scale == 2048.0 and scaler.good == 0  # growth_interval clean steps: S doubles
    scaler.scale = 3e38
    lin.zero_grad()
    backward(lin(x).sum(), scaler)
    scaler.unscale_sharded(list(lin.parameters()))
    assert not torch.isfinite(lin.weight.grad).all() and scaler.overflows == 1 and scaler.scale == 1.5e38
    backward(lin(x).sum(), scaler)  # a step skipped for a non-finite loss (judge=False): S left alone
    scaler.unscale_sharded(list(lin.parameters()), judge=False)
    assert scaler.overflows == 1 and scaler.scale == 1.5e38
