"""Training runs with ``train.hardware.generator: vllm``: MAGRPO, IAC, MADPO (on-policy pairs), LoRA agents on one
engine, a resumed run and the CLI, on tiny random models, with the engine's weights checked against the trained ones.

Needs ``vllm`` (``make test`` runs these with ``.venv-vllm``: ``pytest -m vllm``); skipped otherwise. The models
have hidden size 128 (head size 32, the smallest vLLM's CPU attention serves). The check after training: the
engine's greedy samples, scored by HF on the trained weights, carry the engine's log-probs within ``TOL``
(fp32 on both sides: rounding only, see tests/components/test_vllm_engine.py), while the same samples under the
initial weights are far off (> 1e-2), so an engine that missed a push fails. Each step's ``gen/logprob_gap_max``
is held to the same bound (the second step samples after the first step's push).
"""
import copy
import json
from pathlib import Path

import pytest
import torch

import comarl
from comarl.cli import main
from comarl.critics import CriticSettings
from comarl.generation.vllm_settings import EngineSettings, vllm_installed
from comarl.models.lora import LoraSettings
from comarl.preference import DPOSettings, IterativeSettings, PreferenceSettings

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed "
                                                   "(scripts/install_vllm_cpu.sh; make test runs these with it)")]
ROOT = Path(__file__).resolve().parents[2]
TOL = 2e-4
TINY = {"hidden_size": 128}
ENGINE = EngineSettings(cpu_kv_cache_gib=0.25)
ITEMS = [{"n": i} for i in range(4)]
PROBES = ["Name a colour (9):", "Pick a colour (7):"]


def scrambled(responses, item):
    """A reward that differs between almost any two texts (so every step has non-zero advantages and pairs)."""
    return (sum(map(ord, "".join(responses))) % 11) / 10


def toy_env(n=2):
    return comarl.FunctionEnv(formatters=[lambda it, j=j: f"Name colour {j} ({it['n']}):" for j in range(n)],
                              reward_fn=scrambled)


def agent_configs(n=2, lora=None, seeds=True):
    return [comarl.AgentConfig(model="tiny", max_new_tokens=5, lr=3e-2, chat_template=False, lora=lora,
                               model_kwargs={**TINY, "seed": i if seeds else 0}) for i in range(n)]


def run(algorithm="magrpo", agents=None, steps=2, n=2, critic=None, loss=None, **run_keys):
    cfg = comarl.TrainConfig(algorithm=algorithm, hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE),
                             rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=steps, progress_bar=False, report_to=[],
                                                  seed=0, **run_keys), loss=loss or comarl.LossConfig())
    if critic is not None:
        cfg.critic = critic
    return comarl.Trainer(agents or agent_configs(n), toy_env(n), ITEMS, cfg)


def hf_logprobs(model, prompt, completion):
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


def engine_gap(trainer, models=None) -> float:
    """Largest |engine log-prob - HF log-prob| over greedy samples of the probe prompts, HF on ``models`` (default:
    the agents' current ones)."""
    agents = trainer.agents
    prompts = [a.encode_prompts(PROBES) for a in agents]
    comps = trainer.generator.generate_for_agents(agents, prompts, 1, greedy=True)
    gap = 0.0
    for _agent, model, c in zip(agents, models or [a.model for a in agents], comps):
        for p, ids, lps in zip(c.prompt_ids, c.ids, c.logprobs):
            gap = max(gap, (hf_logprobs(model, p, ids) - torch.tensor(lps)).abs().max().item())
    return gap


def check_trained(trainer, history, initial) -> None:
    assert all(h["gen/logprob_gap_max"] < TOL for h in history if "gen/logprob_gap_max" in h), history
    assert engine_gap(trainer) < TOL  # the engine serves the trained weights ...
    assert engine_gap(trainer, initial) > 1e-2  # ... which moved away from the initial ones


def initial_models(trainer):
    return [copy.deepcopy(a.model) for a in trainer.agents]


@pytest.mark.parametrize("algorithm, extra", [
    ("magrpo", {}),
    ("iac", {"critic": CriticSettings(lr=1e-3)}),  # a value head on each agent's model
    ("madpo", {}),  # DPO on the step's own (on-policy) pairs
])
def test_training_with_vllm_keeps_the_engine_on_the_trained_weights(algorithm, extra):
    trainer = run(algorithm, **extra)
    try:
        assert len(trainer.generator.engines) == 2  # one per full-weight agent
        initial = initial_models(trainer)
        history = trainer.train()
        if algorithm != "madpo":  # policy-gradient steps log the engine's log-probs against the trainer's
            assert all(h["gen/logprob_gap_max"] < TOL and "time/sync_s" in h for h in history)
        else:
            assert all(h["pref/pairs"] > 0 for h in history)
        check_trained(trainer, history, initial)
    finally:
        trainer.close()


def test_iterative_madpo_samples_its_rounds_and_evaluates_through_the_engine(tmp_path):
    cfg = comarl.TrainConfig(algorithm="madpo_iter", hardware=comarl.HardwareConfig(generator="vllm", vllm=ENGINE),
                             rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, progress_bar=False, report_to=[], seed=0,
                                                  output_dir=str(tmp_path), eval_steps=1))
    cfg.preference = PreferenceSettings(dpo=DPOSettings(beta=0.5),
                                        iterative=IterativeSettings(rounds=2, steps_per_round=1))
    trainer = comarl.Trainer(agent_configs(), toy_env(), ITEMS, cfg, eval_dataset=[{"n": 9}])
    calls = []
    real = trainer.generator.generate_for_agents
    trainer.generator.generate_for_agents = lambda *a, **kw: calls.append(kw.get("greedy", False)) or real(*a, **kw)
    try:
        initial = initial_models(trainer)
        history = trainer.train()
        assert [h["round"] for h in history] == [0, 1] and all("eval/reward/mean" in h for h in history)
        assert len(calls) >= 4  # each round's pool and each step's evaluation sampled through the engine
        check_trained(trainer, history, initial)
    finally:
        trainer.close()


def test_lora_agents_share_one_engine_and_their_adapters_follow_training():
    trainer = run(agents=agent_configs(lora=LoraSettings(r=4), seeds=False))
    try:
        assert len(trainer.generator.engines) == 1  # both adapters on the one base's engine
        # lora_B starts at zero; the first step moves it, so "initial" is the base itself (adapter off)
        initial = initial_models(trainer)
        history = trainer.train()
        check_trained(trainer, history, initial)
    finally:
        trainer.close()


def test_truncated_importance_sampling_runs_with_weights_near_one():
    trainer = run(loss=comarl.LossConfig(tis_cap=2.0), steps=1)
    try:
        h = trainer.train()[0]
        assert abs(h["gen/tis_weight_mean"] - 1) < 1e-3  # fp32 engine: ratios of 1 up to rounding
    finally:
        trainer.close()


def test_a_resumed_run_pushes_the_loaded_weights_before_its_first_rollout(tmp_path):
    first = run(n=1, steps=1, output_dir=str(tmp_path))
    try:
        initial = initial_models(first)
        first.train()
        trained = initial_models(first)
    finally:
        first.close()
    again = run(n=1, steps=2, output_dir=str(tmp_path), resume="latest")
    try:  # its engine started from fresh initial weights; the resume pushed the checkpoint's
        assert engine_gap(again) < TOL and engine_gap(again, trained) < TOL and engine_gap(again, initial) > 1e-2
    finally:
        again.close()


def test_the_cli_trains_with_generator_vllm_from_yaml(tmp_path):
    out = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text((ROOT / "configs/demo/writing.yaml").read_text() + "  hardware:\n    generator: vllm\n"
                   "    vllm: {cpu_kv_cache_gib: 0.25}\n")
    assert main(["train", str(cfg), f"train.run.output_dir={out}", "train.run.max_steps=2",
                 "train.run.progress_bar=false", "train.rollout.num_generations=2", "train.run.batch_size=2",
                 "agents.*.max_new_tokens=6",
                 "agents.*.model_kwargs={hidden_size: 128, seed: 0}", "train.run.report_to=[jsonl]"]) == 0
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["gen/logprob_gap_max"] < TOL for m in metrics)
