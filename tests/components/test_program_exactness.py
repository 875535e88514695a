"""A ProgramEnv that reproduces the demo writing environment (each agent called once with its formatter's prompt)
gives the same samples, returns, advantages, loss and gradients as the FunctionEnv, under a scripted generator,
and (the gateway keeps the generator's calls as they were) under the tiny models' own sampling too."""
from __future__ import annotations

import asyncio

import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("openai")

import comarl  # noqa: E402
from comarl.config import RolloutConfig, RunConfig  # noqa: E402
from comarl.envs.demo_writing import DemoReward, build  # noqa: E402
from comarl.envs.program import ProgramEnv  # noqa: E402
from comarl.generation.hf import Completions  # noqa: E402
from comarl.generation.team import scripted  # noqa: E402
from comarl.core.steps import PromptBatch  # noqa: E402

ITEMS = [{"text": "My neighbour's dog barks every night at three."}, {"text": "I fixed the leaking kitchen tap."}]
WORDS = ["the", "dog", "barks", "tap", "fixed", "night", "a", "kitchen", "at", "three"]
FUNCTION_ENV = build()
SHORT, LONG = FUNCTION_ENV.formatters
REWARD = DemoReward()


def fake_generate(agent, prompt_ids, k, greedy=False, batch_size=0, share_prefix=False):
    """Sample j of a prompt: a word list fixed by (agent, prompt, j), so texts differ across samples and agents."""
    tok = agent.tokenizer
    ids, texts, cut = [], [], []
    for p in prompt_ids:
        for j in range(k):
            n = 1 + (sum(p) + 7 * j + 3 * agent.index) % 9
            words = [WORDS[(sum(p) * (j + 1) + w * (agent.index + 2)) % len(WORDS)] for w in range(n)]
            c = tok(" ".join(words), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            cut.append(len(c) > agent.config.max_new_tokens)  # as generate: at most max_new_tokens
            ids.append(c[:agent.config.max_new_tokens])
            texts.append(tok.decode(ids[-1], skip_special_tokens=True))
    return Completions(prompt_ids, ids, cut, texts, k)


async def demo_program(item, client):
    """The demo writing task as a program: both agents at once, each with its formatter's prompt."""
    short, long = await asyncio.gather(
        client.chat.completions.create(model="agent0", messages=[{"role": "user", "content": SHORT(item)}]),
        client.chat.completions.create(model="agent1", messages=[{"role": "user", "content": LONG(item)}]))
    return REWARD([short.choices[0].message.content, long.choices[0].message.content], item)


async def sequential_program(item, client):
    """The same, one agent after the other: every run waits on agent0 before any asks agent1, so each agent's
    8 calls are one generate call in the rollout's order and the tiny models' sampling draws the same numbers."""
    short = await client.chat.completions.create(model="agent0", messages=[{"role": "user", "content": SHORT(item)}])
    long = await client.chat.completions.create(model="agent1", messages=[{"role": "user", "content": LONG(item)}])
    return REWARD([short.choices[0].message.content, long.choices[0].message.content], item)


def one_step(env, generator, seed=0):
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=12, lr=1e-3),
              comarl.AgentConfig(model="tiny", max_new_tokens=12, lr=1e-3, model_kwargs={"seed": 1})]
    cfg = comarl.TrainConfig(algorithm="magrpo", rollout=RolloutConfig(num_generations=4),
                             run=RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[], seed=seed))
    trainer = comarl.Trainer(agents, env, ITEMS, cfg, generator=generator)
    before = [[p.detach().clone() for p in a.model.parameters()] for a in trainer.agents]
    out = trainer.update.step(trainer.team, PromptBatch(ITEMS, trainer.env), 0)
    grads = [[(p.detach() - b) for p, b in zip(a.model.parameters(), bs)] for a, bs in zip(trainer.agents, before)]
    return out, grads


def _same(a, b, what):
    assert a.keys() == b.keys() if isinstance(a, dict) else True
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.allclose(x, y, atol=1e-6, rtol=0), f"{what}[{i}] differs"


@pytest.mark.parametrize("generator", ["scripted", "tiny models"])
def test_program_env_matches_function_env(generator):
    gen = scripted(fake_generate) if generator == "scripted" else None
    # batches go when every run waits (no timer)
    program = ProgramEnv(demo_program if generator == "scripted" else sequential_program, 2, batch_window_s=30.0)
    try:
        ref, ref_steps = one_step(FUNCTION_ENV, gen)
        got, got_steps = one_step(program, gen)
    finally:
        program.close()
    # 8 runs x 2 agents: each agent's 8 calls in one generate call (both agents in one, as the rollout, when the
    # second agent's calls reach the server before the first agent's batch goes)
    assert got.metrics["program/generate_calls"] in (1.0, 2.0)
    for i in range(2):
        a, b = ref.rollouts[0].agents[i], got.rollouts[0].agents[i]
        assert a.prompt_ids == b.prompt_ids and a.completion_ids == b.completion_ids and a.texts == b.texts
        assert torch.equal(a.returns, b.returns)
        assert b.run_index.tolist() == list(range(8))
        assert torch.equal(ref.advantages[i][0], got.advantages[i][0])
        assert ref.metrics[f"agent{i}/loss"] == pytest.approx(got.metrics[f"agent{i}/loss"], abs=1e-6)
        assert ref.metrics[f"agent{i}/grad_norm"] == pytest.approx(got.metrics[f"agent{i}/grad_norm"], abs=1e-6)
        _same(ref_steps[i], got_steps[i], f"agent{i} parameter change")
    assert ref.metrics["reward/mean"] == pytest.approx(got.metrics["reward/mean"], abs=1e-12)
    assert float(ref.advantages[0][0].abs().sum()) > 0  # a step that moved something
