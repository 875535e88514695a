"""A generator that samples from its own copy of the weights (as a vLLM engine does) follows training through
``sync``, its log-probs are measured against the trainer's (``gen/logprob_gap_*``) and can weigh the loss
(``train.loss.tis_cap``). A fake engine stands in for vLLM here: HF ``generate`` on a deep copy of each agent."""
import copy
import dataclasses

import pytest
import torch

import comarl
from comarl.generation.team import generate_for_agents
from comarl.generation.vllm_engine import EngineCompletions
from comarl.objective.logprobs import completion_logprobs
from toy_tasks import same_word

ITEMS = [{"n": i} for i in range(4)]


def toy_env():
    return comarl.FunctionEnv(formatters=[lambda it: f"Name a colour ({it['n']}):",
                                          lambda it: f"Pick a colour ({it['n']}):"], reward_fn=same_word)


class CopyEngine:
    """Samples with HF ``generate`` from its own copies of the agents, reports the copies' log-probs of the sampled
    tokens minus ``shift`` (an engine that sees them as likelier or not), and follows the agents only through
    ``sync`` (``pushes`` = False: a generator that forgets to)."""

    def __init__(self, agents, shift: float = 0.0, pushes: bool = True):
        self.agents, self.shift, self.pushes = list(agents), shift, pushes
        self.copies = [dataclasses.replace(a, model=copy.deepcopy(a.model)) for a in agents]
        self.synced: list[list[str]] = []

    def __call__(self, agents, prompt_ids, k, **kw):
        comps = generate_for_agents(self.copies, prompt_ids, k, **{**kw, "batch_adapters": False})
        out = []
        for c, agent in zip(comps, self.copies):
            prompts = [p for p in c.prompt_ids for _ in range(c.num_samples)]
            lps = []
            if c.ids:
                with torch.no_grad():
                    lp, _ = completion_logprobs(agent.model, prompts, c.ids, agent.tokenizer.pad_token_id,
                                                agent.config.temperature)
                lps = [(lp[s, :len(ids)] - self.shift).tolist() for s, ids in enumerate(c.ids)]
            out.append(EngineCompletions(c.prompt_ids, c.ids, c.truncated, c.texts, c.num_samples, c.forced,
                                         logprobs=lps))
        return out

    def sync(self, agents):
        self.synced.append([a.name for a in agents])
        if self.pushes:
            for a in agents:
                self.copies[self.agents.index(a)].model.load_state_dict(a.model.state_dict())


def agents(n=2):
    return comarl.build_agents([comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=5e-2, chat_template=False,
                                                   model_kwargs={"seed": i}) for i in range(n)])


def train(engine_of, steps=2, loss=None, **run):
    team = agents()
    engine = engine_of(team)
    config = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                                run=comarl.RunConfig(batch_size=2, max_steps=steps, progress_bar=False, report_to=[],
                                                     seed=0, **run), loss=loss or comarl.LossConfig())
    trainer = comarl.Trainer(team, toy_env(), ITEMS, config, generator=engine)
    return trainer, engine, trainer.train()


def test_the_engine_is_synced_once_per_step_and_its_log_probs_match_the_trainers():
    trainer, engine, hist = train(CopyEngine)
    names = [a.name for a in trainer.agents]
    assert engine.synced == [names, names, names]  # at the start (a generator built by the caller), then per step
    assert all(h["gen/logprob_gap_max"] < 1e-5 for h in hist), [h["gen/logprob_gap_max"] for h in hist]
    assert all("time/sync_s" in h for h in hist)


def test_a_stale_engine_shows_in_the_gap_metric():
    _, _, hist = train(lambda team: CopyEngine(team, pushes=False))
    assert hist[0]["gen/logprob_gap_max"] < 1e-5  # both start from the same weights
    assert hist[1]["gen/logprob_gap_max"] > 1e-3 and hist[1]["gen/logprob_gap_mean"] > 1e-4  # one step behind


def test_only_the_agents_whose_optimiser_stepped_are_pushed():
    team = agents()
    engine = CopyEngine(team)
    config = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                                run=comarl.RunConfig(batch_size=2, max_steps=1, progress_bar=False, report_to=[]))
    trainer = comarl.Trainer(team, toy_env(), ITEMS, config, generator=engine)
    engine.synced.clear()
    trainer.team.changed.clear()
    assert trainer.team.sync_generator() == {} and engine.synced == []  # nothing stepped: nothing pushed
    trainer.team.changed.add(1)
    assert "time/sync_s" in trainer.team.sync_generator() and engine.synced == [[team[1].name]]


def test_truncated_importance_sampling_weighs_the_loss_by_the_capped_ratio():
    """The engine sees every sampled token 0.1 nats likelier than the trainer: ratio exp(-0.1) = 0.905 per token
    (cap 2 leaves it), so the first step's loss is 0.905 x the loss without TIS; with cap 0.5 every weight is 0.5."""
    _, _, plain = train(lambda team: CopyEngine(team, shift=-0.1), steps=1)
    _, _, tis = train(lambda team: CopyEngine(team, shift=-0.1), steps=1, loss=comarl.LossConfig(tis_cap=2.0))
    _, _, capped = train(lambda team: CopyEngine(team, shift=-0.1), steps=1, loss=comarl.LossConfig(tis_cap=0.5))
    ratio = torch.exp(torch.tensor(-0.1)).item()
    assert "gen/tis_weight_mean" not in plain[0]
    assert tis[0]["gen/tis_weight_mean"] == pytest.approx(ratio, abs=1e-5)
    assert capped[0]["gen/tis_weight_mean"] == pytest.approx(0.5, abs=1e-6)
    assert abs(plain[0]["gen/logprob_gap_mean"] - 0.1) < 1e-5
    for name in ("agent0", "agent1"):
        assert tis[0][f"{name}/loss"] == pytest.approx(ratio * plain[0][f"{name}/loss"], rel=1e-4, abs=1e-7)
        assert capped[0][f"{name}/loss"] == pytest.approx(0.5 * plain[0][f"{name}/loss"], rel=1e-4, abs=1e-7)


def test_resume_pushes_the_loaded_weights(tmp_path):
    trainer, _, _ = train(CopyEngine, steps=1, output_dir=str(tmp_path), save_steps=1)
    trained = [{k: v.clone() for k, v in a.model.state_dict().items()} for a in trainer.agents]
    team = agents()
    engine = CopyEngine(team)
    config = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                                run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[],
                                                     resume="latest", output_dir=str(tmp_path), save_steps=1))
    comarl.Trainer(team, toy_env(), ITEMS, config, generator=engine)
    assert engine.synced == [[a.name for a in team]]
    for want, c in zip(trained, engine.copies):
        got = c.model.state_dict()
        assert all(torch.equal(want[k], got[k]) for k in want)


def test_heldout_score_samples_with_the_trainers_generator():
    from comarl.runs.heldout import heldout_score

    team = agents()
    engine = CopyEngine(team)
    calls = []

    def counting(agents_, prompt_ids, k, **kw):
        calls.append(k)
        return engine(agents_, prompt_ids, k, **kw)

    score = heldout_score(team, toy_env(), ITEMS[:2], greedy=True, generator=counting)
    assert calls == [1] and len(score.per_item) == 2
    assert heldout_score(team, toy_env(), ITEMS[:2], greedy=True).per_item == score.per_item  # the same weights


def test_truncated_is_weighs_the_policy_term_only():
    """With tis_cap and a KL in the loss, the policy term gets the token weights times the capped ratio, the KL
    penalty the plain token weights (issue #41: they were multiplied into every term)."""
    team = agents()
    engine = CopyEngine(team, shift=-0.1)
    config = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                                run=comarl.RunConfig(batch_size=2, max_steps=2, progress_bar=False, report_to=[],
                                                     seed=0), loss=comarl.LossConfig(tis_cap=2.0, kl_beta=0.5))
    trainer = comarl.Trainer(team, toy_env(), ITEMS, config, generator=engine)
    seen = {"policy": [], "kl": []}
    loss_fn, penalty = trainer.update.loss_fn, trainer.update.kl_penalty

    def policy(logp, old, adv, w, *a, **k):
        seen["policy"].append(w.detach().clone())
        return loss_fn(logp, old, adv, w, *a, **k)

    def kl(logp, ref, w, *a, **k):
        seen["kl"].append(w.detach().clone())
        return penalty(logp, ref, w, *a, **k)

    trainer.update.loss_fn, trainer.update.kl_penalty = policy, kl
    trainer.train()
    ratio = torch.exp(torch.tensor(-0.1)).item()
    assert len(seen["policy"]) == len(seen["kl"]) > 0
    for w_policy, w_kl in zip(seen["policy"], seen["kl"]):
        real = w_kl > 0
        assert torch.allclose(w_policy[real] / w_kl[real], torch.full_like(w_kl[real], ratio), atol=1e-4)
