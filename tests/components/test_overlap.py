"""``train.rollout.max_staleness`` >= 1 (docs/overlap.md): the generation worker samples ahead on tiny models with
Hugging Face ``generate``. Each step's samples carry the policy version that drew them and its log-probs; the loss
takes those as the old log-probs (or weighs by ``tis_cap``); the staleness is logged; a run is the same whatever
the threads' timing, and a resumed one goes on as the uninterrupted one. Refused families: one line each."""
from __future__ import annotations

import copy
import time

import pytest
import torch

import comarl
from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.models.agents import AgentConfig, build_agents
from comarl.models.lora import LoraSettings
from comarl.models.sampling_copy import copy_bytes, copy_trained, sampling_copies
from comarl.objective.logprobs import completion_logprobs

ITEMS = [{"n": i} for i in range(6)]


def _reward(responses, item):
    a, b = (len(r) % 3 for r in responses)
    return float(a == b) + 0.1 * a


def _env(reward=_reward):
    return comarl.FunctionEnv([lambda it: f"Say a ({it['n']}):", lambda it: f"Say b ({it['n']}):"], reward)


def _trainer(algorithm="magrpo", k=1, steps=4, loss=None, out=None, generator=None, env=None, eval_items=None,
             **run):
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=4, lr=2e-2, chat_template=False,
                                 model_kwargs={"seed": i, "hidden_size": 32, "num_layers": 1}) for i in range(2)]
    cfg = comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=2, max_staleness=k),
                             loss=comarl.LossConfig(**(loss or {})),
                             run=comarl.RunConfig(batch_size=2, max_steps=steps, progress_bar=False, report_to=[],
                                                  seed=0, log_samples_steps=0, output_dir=out, **run))
    return comarl.Trainer(agents, env or _env(), ITEMS, cfg, generator=generator, eval_dataset=eval_items)


def _weights(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for a in trainer.agents for p in a.model.parameters()]


@pytest.mark.parametrize("algorithm", ["magrpo", "mareinforce", "maremax", "madpo"])
def test_max_staleness_1_trains_and_logs_how_old_each_batch_was(algorithm):
    t = _trainer(algorithm)
    before = _weights(t)
    hist = t.train()
    t.close()
    assert [h["rollout/staleness_max"] for h in hist] == [0.0, 1.0, 1.0, 1.0]  # step 0: the worker's first batch
    assert [h["rollout/staleness_mean"] for h in hist] == [0.0, 1.0, 1.0, 1.0]
    assert all(h["time/rollout_wait_s"] >= 0 and h["time/rollout_s"] > 0 for h in hist)
    assert all(torch.isfinite(torch.tensor(h["reward/mean"])) for h in hist)
    assert any(not torch.equal(a, b) for a, b in zip(before, _weights(t)))  # it learned
    on_policy = _trainer(algorithm, k=0)
    on_policy.train()
    assert t.state.counters["completions"] == on_policy.state.counters["completions"]  # nothing sampled twice


def test_the_loss_judges_stale_samples_against_the_policy_that_sampled_them():
    """Old log-probs are the behaviour policy's: at step 0 (version 0, the trainer's own weights) the ratio is 1
    exactly; at step 1 the samples came from the weights before step 0's update, whose log-probs the old ones are,
    while the trainer's have moved."""
    t = _trainer("mareinforce", steps=2)
    initial = [copy.deepcopy(a.model) for a in t.agents]
    real, calls = t.update.loss_fn, []

    def spy(logp, old, *a, **k):
        calls.append((logp.detach().clone(), old.detach().clone()))
        return real(logp, old, *a, **k)

    t.update.loss_fn = spy
    seen = []
    real_step = t.update.step

    def step(team, batch, n):
        seen.append(batch)
        return real_step(team, batch, n)

    t.update.step = step
    t.train()
    t.close()
    (lp0, old0), _, (lp1, old1), _ = calls  # agent 0 and agent 1 of step 0, then of step 1
    assert torch.equal(lp0, old0)
    assert not torch.allclose(lp1, old1, atol=1e-5)
    samples = seen[1].rolled.rollouts[0].agents[0]
    assert samples.policy_version.tolist() == [0] * samples.num_samples
    agent = t.agents[0]
    with torch.no_grad():
        want, mask = completion_logprobs(initial[0].eval(), samples.prompt_ids, samples.completion_ids,
                                         agent.tokenizer.pad_token_id, agent.config.temperature, True)
    assert torch.allclose(old1 * mask, want * mask, atol=1e-6)


def test_tis_cap_keeps_the_trainers_old_log_probs_and_weighs_by_the_ratio_to_the_sampler():
    t = _trainer("magrpo", steps=3, loss={"tis_cap": 2.0})
    real, calls = t.update.loss_fn, []

    def spy(logp, old, adv, w, *a, **k):
        calls.append((logp.detach().clone(), old.detach().clone()))
        return real(logp, old, adv, w, *a, **k)

    t.update.loss_fn = spy
    hist = t.train()
    t.close()
    assert all(torch.equal(lp, old) for lp, old in calls)  # one pass: the old log-probs are the trainer's
    assert "gen/tis_weight_mean" in hist[-1] and hist[-1]["gen/tis_weight_mean"] != 1.0
    assert hist[0]["gen/logprob_gap_max"] == 0.0 and hist[-1]["gen/logprob_gap_max"] > 0


def _trajectory(trainer) -> tuple[list, list]:
    hist = trainer.train()
    trainer.close()
    keep = [{k: v for k, v in h.items() if not k.startswith(("time/", "tokens_per_s"))} for h in hist]
    return keep, _weights(trainer)


def test_a_run_is_the_same_whatever_the_threads_timing():
    """A slow environment (the worker lags the trainer) and a fast one give the same steps: batch b is always
    sampled with version b - k, from streams seeded by b."""
    def slow(responses, item):
        time.sleep(0.02)
        return _reward(responses, item)

    for k in (1, 2):
        fast_hist, fast_w = _trajectory(_trainer(k=k, steps=5))
        slow_hist, slow_w = _trajectory(_trainer(k=k, steps=5, env=_env(slow)))
        assert fast_hist == slow_hist, k
        assert all(torch.equal(a, b) for a, b in zip(fast_w, slow_w)), k
        assert [h["rollout/staleness_max"] for h in fast_hist] == [min(s, k) for s in range(5)]


def test_a_resumed_run_takes_up_the_batch_sampled_ahead_and_goes_on_exactly(tmp_path):
    whole_hist, whole_w = _trajectory(_trainer(steps=5, out=str(tmp_path / "whole"), save_steps=2))
    # the same run stopped after step 2's checkpoint (its batch 2 was sampled ahead, with version 1), then resumed
    first = _trainer(steps=5, out=str(tmp_path / "cut"), save_steps=2)
    first.total_steps = 2
    first.train()
    first.close()
    saved = torch.load(tmp_path / "cut" / "checkpoint-2" / "inflight.pt", weights_only=False)
    assert saved["max_staleness"] == 1 and [b for b, *_ in saved["batches"]] == [2]
    assert saved["batches"][0][2].version == 1
    with pytest.raises(ConfigError, match=r"checkpoint-2 was written with 1 .*resume with the same value"):
        _trainer(k=2, steps=5, out=str(tmp_path / "cut"), save_steps=2, resume="latest")
    with pytest.raises(ConfigError, match=r"holds batches sampled ahead by a run with max_staleness >= 1"):
        _trainer(k=0, steps=5, out=str(tmp_path / "cut"), save_steps=2, resume="latest")
    resumed = _trainer(steps=5, out=str(tmp_path / "cut"), save_steps=2, resume="latest")
    hist, w = _trajectory(resumed)
    assert hist == whole_hist[2:]
    assert all(torch.equal(a, b) for a, b in zip(w, whole_w))


def test_evaluation_samples_with_the_trainers_weights_while_the_worker_waits():
    t = _trainer(steps=3, eval_items=ITEMS[:2], eval_steps=1)
    calls = []
    paused = t.generator.prefetcher.paused

    def watched():
        calls.append("pause")
        return paused()

    t.generator.prefetcher.paused = watched
    hist = t.train()
    assert all("eval/reward/mean" in h for h in hist) and len(calls) >= 3  # every evaluation went through the pause
    assert t.team.generator is t.generator
    t.close()


@pytest.mark.filterwarnings("ignore:env.on_error=zero")
def test_each_step_logs_its_own_batchs_epoch_and_environment_errors():
    """The worker draws and scores batch t+1 during step t: its epoch and the items the environment failed to
    score (``on_error: zero``) are still logged with step t+1, as on-policy."""
    def broken(responses, item):
        if item["n"] == 3:
            raise ValueError("no score for this one")
        return _reward(responses, item)

    runs = {}
    for k in (0, 1):
        t = _trainer(k=k, steps=6, env=comarl.with_error_policy(_env(broken), "zero"))
        hist = t.train()
        t.close()
        runs[k] = [(h["epoch"], h["count/env_errors"]) for h in hist]
    assert [e for e, _ in runs[0]] == [0, 0, 0, 1, 1, 1]  # 6 items in batches of 2: 3 steps an epoch
    counts = [0] + [n for _, n in runs[0]]
    assert [b - a for a, b in zip(counts, counts[1:]) if b > a] == [2, 2]  # item 3's 2 joint actions, each epoch
    assert runs[1] == runs[0]


def test_an_environment_error_in_the_worker_stops_the_run_as_on_policy():
    def broken(responses, item):
        if item["n"] == 3:
            raise ValueError("no score for this one")
        return _reward(responses, item)

    for k in (0, 1):
        with pytest.raises(Exception, match="no score for this one") as caught:
            _trainer(k=k, env=_env(broken)).train()
        if k == 0:
            on_policy = type(caught.value)
    assert type(caught.value) is on_policy


def test_the_sampling_copy_shares_frozen_tensors_and_takes_the_trained_ones():
    full = build_agents([AgentConfig(model="tiny"), AgentConfig(model="tiny", share_weights_with=0)])
    copies = sampling_copies(full)
    assert copies[0].model is copies[1].model is not full[0].model  # one copy of the shared model
    assert copy_bytes(full, copies) == sum(p.numel() * p.element_size() for p in full[0].model.parameters())
    with torch.no_grad():
        for p in full[0].model.parameters():
            p.add_(1.0)
    copy_trained(full, copies)
    assert all(torch.equal(p, q) for p, q in zip(full[0].model.parameters(), copies[0].model.parameters()))
    lora = build_agents([AgentConfig(model="tiny", lora=LoraSettings(r=4)), AgentConfig(model="tiny",
                                                                                        lora=LoraSettings(r=4))])
    lcopies = sampling_copies(lora)
    adapters = sum(p.numel() * p.element_size() for a in lora for p in a.model.parameters())
    assert copy_bytes(lora, lcopies) == adapters  # the base is shared, only the adapters are copied
    assert lcopies[0].model.shared is lcopies[1].model.shared is not lora[0].model.shared


@pytest.mark.parametrize("overrides, message", [
    (["train.algorithm=iac"], r"train\.rollout\.max_staleness: iac trains a critic \(independent\) that values each "
                              r"batch right after its rollout.*V-trace"),
    (["train.algorithm=maac"], r"train\.rollout\.max_staleness: maac trains a critic \(central\)"),
    (["train.algorithm=madpo_iter", "train.run.output_dir=x"],
     r"train\.rollout\.max_staleness: madpo_iter takes its steps from rounds"),
    (["train.hardware.sharding=fsdp"], r"train\.hardware\.sharding: fsdp gathers the agents around each rollout"),
    (["train.rollout.max_staleness=-1"], r"train\.rollout\.max_staleness: must be >= 0"),
], ids=["iac", "maac", "madpo_iter", "fsdp", "negative"])
def test_families_where_lag_is_not_sound_are_refused_with_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["train.rollout.max_staleness=1", *overrides])


def test_torchrun_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"the generation worker runs in one process for now"):
        load_config(None, ["train.rollout.max_staleness=1"])


class OwnWeights:
    """A generator with its own weights, as vLLM's engines (``sync``): HF ``generate`` on copies, their log-probs
    with the samples; records each call and push, and whether a push came while it was sampling."""

    def __init__(self, agents):
        import dataclasses

        from comarl.generation.vllm_engine import EngineCompletions

        self.completions = EngineCompletions
        self.agents = list(agents)
        self.copies = [dataclasses.replace(a, model=copy.deepcopy(a.model)) for a in agents]
        self.sampling, self.overlapped, self.log = False, False, []

    def __call__(self, agents, prompt_ids, k, **kw):
        from comarl.generation.team import generate_for_agents

        assert all(a is b for a, b in zip(agents, self.agents))  # the trainer's agents: the weights are its own
        self.sampling = True
        self.log.append("sample")
        try:
            comps = generate_for_agents(self.copies, prompt_ids, k, **{**kw, "batch_adapters": False})
            out = []
            for c, agent in zip(comps, self.copies):
                prompts = [p for p in c.prompt_ids for _ in range(c.num_samples)]
                with torch.no_grad():
                    lp, _ = completion_logprobs(agent.model, prompts, c.ids, agent.tokenizer.pad_token_id,
                                                agent.config.temperature)
                out.append(self.completions(c.prompt_ids, c.ids, c.truncated, c.texts, c.num_samples, c.forced,
                                            logprobs=[lp[s, :len(ids)].tolist() for s, ids in enumerate(c.ids)]))
            return out
        finally:
            self.sampling = False

    def sync(self, agents):
        self.overlapped |= self.sampling
        self.log.append("push")
        for a in agents:
            self.copies[self.agents.index(a)].model.load_state_dict(a.model.state_dict())


def test_a_generator_with_its_own_weights_is_pushed_between_its_batches_and_its_log_probs_are_the_behaviour():
    """As with ``generator: vllm``: the worker samples through the generator (the trainer's agents, the engine's
    weights), the pushes come between its calls, and the loss's old log-probs are the engine's."""
    team = comarl.build_agents([comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=5e-2, chat_template=False,
                                                   model_kwargs={"seed": i}) for i in range(2)])
    engine = OwnWeights(team)
    cfg = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2, max_staleness=1),
                             run=comarl.RunConfig(batch_size=2, max_steps=4, progress_bar=False, report_to=[], seed=0))
    t = comarl.Trainer(team, _env(), ITEMS, cfg, generator=engine)
    real, calls = t.update.loss_fn, []

    def spy(logp, old, *a, **k):
        calls.append((logp.detach().clone(), old.detach().clone()))
        return real(logp, old, *a, **k)

    t.update.loss_fn = spy
    hist = t.train()
    t.close()
    assert not engine.overlapped
    assert engine.log.count("push") == 1 + 4  # the caller's generator at the start, then after each step
    assert [h["rollout/staleness_max"] for h in hist] == [0.0, 1.0, 1.0, 1.0]
    assert torch.allclose(calls[0][0], calls[0][1], atol=1e-6)  # version 0: the engine's log-probs are the trainer's
    assert not torch.allclose(calls[-1][0], calls[-1][1], atol=1e-4)  # one step behind


def test_lora_agents_on_one_base_sample_from_a_copy_of_their_adapters():
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=4, lr=2e-2, chat_template=False,
                                 lora=LoraSettings(r=4), model_kwargs={"hidden_size": 32, "num_layers": 1})
              for _ in range(2)]
    cfg = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2, max_staleness=1),
                             run=comarl.RunConfig(batch_size=2, max_steps=3, progress_bar=False, report_to=[], seed=0))
    t = comarl.Trainer(agents, _env(), ITEMS, cfg)
    adapters = sum(p.numel() * p.element_size() for a in t.agents for p in a.model.parameters())
    assert t.generator.copy_bytes == adapters  # the base is the trainer's
    hist = t.train()
    t.close()
    assert [h["rollout/staleness_max"] for h in hist] == [0.0, 1.0, 1.0] and hist[0]["gen/logprob_gap_max"] == 0.0
    for a, c in zip(t.agents, t.generator.copies):  # the last push reached the copies
        assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), c.model.parameters()))
