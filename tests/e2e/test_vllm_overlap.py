"""``train.rollout.max_staleness: 1`` with ``train.hardware.generator: vllm`` (docs/overlap.md): the generation worker
samples step t+1's batch through the vLLM engine while the trainer updates on step t's, the trained weights reach the
engine between its batches, and the loss's old log-probs are the engine's (the policy that sampled).

Checks, on tiny random models (hidden size 128, the smallest head size vLLM's CPU attention serves): step 0 samples
with the trainer's own weights (``gen/logprob_gap_max`` within ``TOL``: fp32 rounding), later steps with weights a
step old (the gap is the policy's movement, > 1e-3), and after the run the engine serves the final weights. One
engine in this process (two agents), one in its own process bound to a core (one agent: its start alone takes
30-60 s here). Needs vLLM (``make test`` runs these with ``.venv-vllm``); skipped otherwise.
"""
import pytest
import torch

import comarl
from comarl.generation.vllm_settings import EngineSettings, vllm_installed

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed "
                                                   "(scripts/install_vllm_cpu.sh; make test runs these with it)")]
TOL = 2e-4
ITEMS = [{"n": i} for i in range(4)]


def scrambled(responses, item):
    return (sum(map(ord, "".join(responses))) % 11) / 10


def hf_logprobs(model, prompt, completion):
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


def engine_gap(trainer) -> float:
    """|engine log-prob - HF log-prob on the trained weights| over greedy samples (the engine behind the worker)."""
    agents = trainer.agents
    prompts = [a.encode_prompts([f"Name colour {i} (9):"]) for i, a in enumerate(agents)]
    comps = trainer.generator.inner.generate_for_agents(agents, prompts, 1, greedy=True)
    return max((hf_logprobs(a.model, p, ids) - torch.tensor(lps)).abs().max().item()
               for a, c in zip(agents, comps) for p, ids, lps in zip(c.prompt_ids, c.ids, c.logprobs))


@pytest.mark.parametrize("n, engine", [(2, EngineSettings(cpu_kv_cache_gib=0.25)),
                                       (1, EngineSettings(cpu_kv_cache_gib=0.25, in_process=False,
                                                          agent_cpus=["0"]))], ids=["in_process", "own_process"])
def test_the_worker_samples_ahead_through_the_engine_and_pushes_between_its_batches(n, engine):
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=5, lr=3e-2, chat_template=False,
                                 model_kwargs={"hidden_size": 128, "seed": i}) for i in range(n)]
    env = comarl.FunctionEnv(formatters=[lambda it, j=j: f"Name colour {j} ({it['n']}):" for j in range(n)],
                             reward_fn=scrambled)
    cfg = comarl.TrainConfig(hardware=comarl.HardwareConfig(generator="vllm", vllm=engine),
                             rollout=comarl.RolloutConfig(num_generations=2, max_staleness=1),
                             run=comarl.RunConfig(batch_size=2, max_steps=3, progress_bar=False, report_to=[], seed=0))
    t = comarl.Trainer(agents, env, ITEMS, cfg)
    try:
        hist = t.train()
        assert [h["rollout/staleness_max"] for h in hist] == [0.0, 1.0, 1.0]
        assert hist[0]["gen/logprob_gap_max"] < TOL, hist[0]  # version 0: the engine's weights are the trainer's
        assert all(h["gen/logprob_gap_max"] > 1e-3 for h in hist[1:]), [h["gen/logprob_gap_max"] for h in hist]
        assert engine_gap(t) < TOL  # the last push reached the engine
    finally:
        t.close()
