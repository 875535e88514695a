"""ProgramEnv in the trainer: the credit rule (each call gets its run's advantage; an agent called several times
has every call in the loss; one not called contributes nothing), batching across runs, and every fault of a
program (it raises, never returns, returns no reward, calls no agent, the generator fails), each named and
either stopped on or counted; nothing leaks from one step's runs into the next, closing stops the server."""
from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest
import torch

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import comarl  # noqa: E402
from comarl.objective.advantages import token_advantages  # noqa: E402
from comarl.config import LossConfig, RolloutConfig, RunConfig  # noqa: E402
from comarl.core.config_io import ConfigError  # noqa: E402
from comarl.envs.error_policy import EnvItemError  # noqa: E402
from comarl.core.steps import PromptBatch  # noqa: E402
from gateway_fakes import FakeTeam  # noqa: E402

ITEMS = [{"id": "a", "text": "first"}, {"id": "b", "text": "second"}]
AGENTS = [comarl.AgentConfig(model="tiny", name=n, max_new_tokens=16, lr=1e-3) for n in ("writer", "critic", "idle")]


def config(algorithm="magrpo", k=4, **rollout):
    return comarl.TrainConfig(algorithm=algorithm, rollout=RolloutConfig(num_generations=k, **rollout),
                              run=RunConfig(batch_size=len(ITEMS), max_steps=2, progress_bar=False, report_to=[]))


def ask(client, model, text="go"):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}]) \
        .choices[0].message.content


def run_number(client, item):
    """The writer's j-th sample is "writer says j" (FakeTeam): sample j goes to run j of the item."""
    return int(ask(client, "writer", item["text"]).split()[-1])


def program_env(program, n_agents=3, **kw):
    """A ProgramEnv whose batches go only when every live run waits (no window under a loaded test machine), so the
    scripted samples reach the runs in order."""
    return comarl.ProgramEnv(program, n_agents, **{"batch_window_s": 30.0, **kw})


def trainer(program, n_agents=3, gen=None, cfg=None, **env_kw):
    env = program_env(program, n_agents, **env_kw)
    return comarl.Trainer(AGENTS[:n_agents], env, ITEMS, cfg or config(), generator=gen or FakeTeam()), env


def test_credit_rule_every_call_gets_its_runs_advantage():
    """Run j calls the critic j times and scores j: returns [0, 1, 2, 3] per item, MAGRPO advantages
    [-1.5, -0.5, 0.5, 1.5]; the critic's six calls per item take their runs' (-0.5, 0.5, 0.5, 1.5, 1.5, 1.5);
    the idle agent is never called: no sample, no update."""
    def program(item, client):
        j = run_number(client, item)
        for _ in range(j):
            ask(client, "critic", f"review {j}")
        return float(j)

    gen = FakeTeam()
    tr, env = trainer(program, gen=gen)
    before = [p.detach().clone() for p in tr.agents[2].model.parameters()]
    with env:
        out = tr.update.step(tr.team, PromptBatch(ITEMS, tr.env), 0)
    writer, critic, idle = out.rollouts[0].agents
    assert writer.run_index.tolist() == list(range(8))
    assert critic.run_index.tolist() == [1, 2, 2, 3, 3, 3, 5, 6, 6, 7, 7, 7]
    assert idle.num_samples == 0
    assert torch.equal(critic.returns, torch.tensor([[0., 1., 2., 3.]] * 2))
    est = out.advantages[1][0]
    assert torch.allclose(est, torch.tensor([[-1.5, -0.5, 0.5, 1.5]] * 2))
    lengths = torch.tensor([len(c) for c in critic.completion_ids])
    per_token = token_advantages(est, lengths, int(lengths.max()), True, critic.run_index)
    assert per_token[:, 0].tolist() == [-0.5, 0.5, 0.5, 1.5, 1.5, 1.5] * 2
    assert out.metrics["program/calls/critic"] == 1.5 and out.metrics["program/calls/idle"] == 0
    assert "critic/loss" in out.metrics and "idle/loss" not in out.metrics
    assert all(torch.equal(p, b) for p, b in zip(tr.agents[2].model.parameters(), before))
    # the writer's first calls: 8 runs, one generate call with one prompt per item and K = 4 samples each
    first = gen.calls[0]
    assert first["k"] == 4 and len(first["prompts"][0]) == 2 and first["prompts"][1] == [] == first["prompts"][2]


def test_async_program_and_per_agent_rewards():
    async def program(item, client):
        a, b = await asyncio.gather(client.chat.completions.create(model="writer", messages=[
            {"role": "user", "content": item["text"]}]), client.chat.completions.create(model="critic", messages=[
                {"role": "user", "content": item["text"]}]))
        j = int(a.choices[0].message.content.split()[-1])
        return comarl.AgentRewards((float(j), -float(j)))

    tr, env = trainer(program, n_agents=2)
    with env:
        out = tr.update.step(tr.team, PromptBatch(ITEMS, tr.env), 0)
    writer, critic = out.rollouts[0].agents
    assert torch.equal(writer.returns, -critic.returns) and writer.returns[0].tolist() == [0., 1., 2., 3.]
    assert out.metrics["program/generate_calls"] <= 2


def test_a_raising_program_names_its_item_and_run():
    def program(item, client):
        j = run_number(client, item)
        if item["id"] == "b" and j == 1:
            raise ValueError("the tool broke")
        return 1.0

    tr, env = trainer(program)
    with env, pytest.raises(EnvItemError, match=r"train_dataset\[1\].*run 2 of 4.*ValueError: the tool broke"):
        tr.train()
    zero = comarl.with_error_policy(program_env(program), "zero")
    tr = comarl.Trainer(AGENTS, zero, ITEMS, config(), generator=FakeTeam())
    with pytest.warns(RuntimeWarning, match="run 2 of 4"):
        history = tr.train()
    zero.close()
    assert [h["count/env_errors"] for h in history] == [1, 2]


def test_a_program_that_never_returns_is_ended_by_its_timeout():
    release = threading.Event()

    def stuck(item, client):
        if run_number(client, item) == 0:
            release.wait(30)  # never returns in time; its thread ends when released
        return 1.0

    async def stuck_async(item, client):
        if int((await client.chat.completions.create(model="writer", messages=[
                {"role": "user", "content": item["text"]}])).choices[0].message.content.split()[-1]) == 0:
            await asyncio.sleep(60)  # cancelled at the timeout
        return 1.0

    for program in (stuck, stuck_async):
        env = comarl.with_error_policy(program_env(program, timeout_s=1.0), "zero")
        tr = comarl.Trainer(AGENTS, env, ITEMS, config(), generator=FakeTeam())
        t0 = time.monotonic()
        with pytest.warns(RuntimeWarning, match=r"TimeoutError: no return within 1 s"):
            out = tr.training_step(ITEMS)
        env.close()
        assert time.monotonic() - t0 < 10 and tr.error_policy.errors == 2  # run 0 of each item
        assert out["reward/mean"] == pytest.approx(6 / 8)
    release.set()


def test_no_reward_no_call_and_a_failing_generator():
    def no_number(item, client):
        ask(client, "writer")
        return "great"

    tr, env = trainer(no_number)
    with env, pytest.raises(EnvItemError, match=r"run 1 of 4.* returned 'great' \(str\)"):
        tr.train()

    def lazy(item, client):
        return 1.0 if item["id"] == "a" else float(run_number(client, item))

    tr, env = trainer(lazy)
    with env, pytest.warns(RuntimeWarning, match=r"run \d of 4 on item id='a' called no agent"):
        out = tr.training_step(ITEMS)
    assert out["program/no_call_runs"] == 0.5 and "writer/loss" in out

    def fine(item, client):
        return float(run_number(client, item))

    zero = comarl.with_error_policy(program_env(fine), "zero")  # the machine is never scored 0
    tr = comarl.Trainer(AGENTS, zero, ITEMS, config(), generator=FakeTeam(fail=RuntimeError("device lost")))
    with pytest.raises(RuntimeError, match="generator failed.*device lost"):
        tr.training_step(ITEMS)
    zero.close()


def test_nothing_leaks_between_steps_and_close_stops_the_server():
    urls = []

    def program(item, client):
        urls.append(str(client.base_url))
        return float(run_number(client, item))

    tr, env = trainer(program)
    tr.training_step(ITEMS)
    assert len(set(urls)) == 8 and all(re.search(r"/episodes/[0-9a-f]{32}/v1/?$", u) for u in urls)
    late = openai.OpenAI(base_url=urls[0], api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError):  # a run that kept its client: its episode is gone
        ask(late, "writer")
    tr.training_step(ITEMS)
    assert len(set(urls)) == 16
    port = env._server.port
    env.close()
    assert env._server is None
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=2).models.list()
    assert not [t for t in threading.enumerate() if t.name.startswith("comarl-gateway") and t.is_alive()]


def test_kl_in_the_reward_pays_per_run():
    def program(item, client):
        j = run_number(client, item)
        for _ in range(j % 2):
            ask(client, "critic")
        return float(j)

    cfg = config()
    cfg.loss = LossConfig(kl_beta=0.1, kl_mode="reward")
    tr, env = trainer(program, cfg=cfg)
    with env:
        out = tr.training_step(ITEMS)
    assert "critic/loss" in out and out["critic/kl"] >= 0


@pytest.mark.parametrize("algorithm,overrides,key", [
    ("iac", {}, "algorithm: iac trains a critic (independent)"), ("maac", {}, "algorithm: maac trains a critic"),
    ("maremax", {}, "greedy continuation"), ("madpo", {}, "pairs"),
    ("magrpo", {"num_turns": 2}, "num_turns: 2"), ("magrpo", {"joint_mode": "cross"}, "joint_mode"),
    ("magrpo", {"early_stop_reward": 1.0}, "early_stop_reward"),
    ("magrpo", {"max_staleness": 1}, "max_staleness: a program's calls are served by the gateway")])
def test_what_program_runs_cannot_do_is_refused_before_any_model(algorithm, overrides, key):
    env = comarl.ProgramEnv(lambda item, client: 1.0, 3)
    with pytest.raises(ConfigError, match=re.escape(key)):
        comarl.Trainer(["no/such-model"] * 3, env, ITEMS, config(algorithm, **overrides))


def test_a_per_token_estimator_is_refused_at_its_first_step():
    tr, env = trainer(lambda item, client: float(run_number(client, item)), cfg=config("magrpo_token"))
    with env, pytest.raises(ConfigError, match="algorithm: magrpo_token gives per-token advantages"):
        tr.training_step(ITEMS)
