"""MADPO in the one loop: pairs from the rollout, the joint DPO step, references, config errors, pair files."""
import json

import numpy as np
import pytest
import torch

import comarl
from comarl.core.config_io import ConfigError
from comarl.objective.logprobs import completion_logprobs
from comarl.preference import DPOSettings, PairSettings, PreferenceSettings
from comarl.rollout import collect_rollout
from comarl.preference.rollout_pairs import step_pairs
from comarl.updates.dpo import _pair_indices
from toy_tasks import same_word
from config_keys import set_keys


ENV = comarl.FunctionEnv(formatters=[lambda it: f"Name a colour ({it['n']}):",
                                     lambda it: f"Pick a colour ({it['n']}):"],
                         reward_fn=same_word)
ITEMS = [{"n": i} for i in range(8)]


def trainer(steps=2, k=4, lr=1e-2, pref=None, agents=None, **sections):
    agents = agents or [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=lr, chat_template=False)
                        for _ in range(2)]
    cfg = comarl.TrainConfig(algorithm="madpo", rollout=comarl.RolloutConfig(num_generations=k),
                             run=comarl.RunConfig(batch_size=4, max_steps=steps, progress_bar=False, report_to=[],
                                                  seed=0))
    cfg.preference = pref or PreferenceSettings(dpo=DPOSettings(beta=0.5), pairs=PairSettings(pairs_per_item=2))
    return comarl.Trainer(agents, ENV, ITEMS, set_keys(cfg, **sections))


def joint_margins(t, rollouts, pairs):
    """[P] sum over agents of log pi_i(y_w) - log pi_i(y_l) under the current weights."""
    total = 0
    for i, a in enumerate(t.agents):
        prompts = [p for r in rollouts for p in r.agents[i].prompt_ids]
        comps = [c for r in rollouts for c in r.agents[i].completion_ids]
        w, l = _pair_indices(rollouts, pairs, i)
        with torch.no_grad():
            lw, mw = completion_logprobs(a.model, [prompts[s] for s in w], [comps[s] for s in w],
                                         a.tokenizer.pad_token_id, a.config.temperature)
            ll, ml = completion_logprobs(a.model, [prompts[s] for s in l], [comps[s] for s in l],
                                         a.tokenizer.pad_token_id, a.config.temperature)
        total = total + (lw * mw).sum(1) - (ll * ml).sum(1)
    return total


def test_dpo_steps_raise_the_chosen_vs_rejected_margin():
    t = trainer(k=3, rollout={"joint_mode": "cross"})
    rollouts = [collect_rollout(t.agents, t.env, ITEMS[:4], t.settings)]
    pairs = step_pairs(rollouts, t.config.rollout, t.config.preference.pairs, "0")
    assert sum(len(p) for p in pairs) >= 4  # random tiny agents: some joint actions match, some do not
    before = joint_margins(t, rollouts, pairs)
    m = {}
    for _ in range(2):  # the same pairs again (fixed rng): each step must push the margin up
        m = t.update.learn(t.team, rollouts, 0)
    after = joint_margins(t, rollouts, pairs)
    assert (after - before).mean() > 0.5, (before, after)
    assert m["pref/pairs"] == sum(len(p) for p in pairs) and np.isfinite(m["pref/loss"])


def test_micro_batches_do_not_change_the_update():
    """The linear surrogate gives the joint loss's exact gradient whatever the micro-batch size."""
    grads = []
    for micro in (1, 64):
        t = trainer(hardware={"micro_batch_size": micro})
        torch.manual_seed(1)
        rollouts = [collect_rollout(t.agents, t.env, ITEMS[:4], t.settings)]
        seen = []
        t.team.optimizer_step = lambda i, bad, step, t=t, seen=seen: seen.append(  # the gradients, not the step
            [p.grad.clone() for p in t.agents[i].model.parameters() if p.grad is not None]) or 0.0
        t.update.learn(t.team, rollouts, 0)
        grads.append([g for agent in seen for g in agent])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_madpo_trains_in_the_loop_and_writes_pairs(tmp_path):
    out = tmp_path / "pairs.jsonl"
    t = trainer(steps=2, pref=PreferenceSettings(dpo=DPOSettings(beta=0.1),
                                                 pairs=PairSettings(pair_selection="all", pairs_per_item=None,
                                                                    pairs_out=str(out))))
    w0 = [p.detach().clone() for p in t.agents[0].model.parameters()]
    hist = t.train()
    assert len(hist) == 2 and all("pref/pairs" in h for h in hist)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == sum(h["pref/pairs"] for h in hist) > 0
    assert {r["step"] for r in rows} <= {0, 1} and len(rows[0]["chosen"]) == 2 and rows[0]["gap"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(w0, t.agents[0].model.parameters()))
    assert t.references[0] is not None and t.references[0].model is not None  # frozen copy for full fine-tuning


def test_reference_free_builds_no_reference_and_lora_uses_the_adapter_off():
    t = trainer(pref=PreferenceSettings(dpo=DPOSettings(reference_free=True)))
    assert t.references == [None, None]
    lora = [comarl.AgentConfig(model="tiny", max_new_tokens=3, lr=1e-2, chat_template=False,
                               lora=comarl.LoraSettings(r=4, alpha=8)) for _ in range(2)]
    t = trainer(agents=lora, steps=1)
    assert t.references[0].adapter_off and t.references[0].model is None
    t.train()


def test_bad_preference_settings_name_the_key():
    with pytest.raises(ConfigError, match=r"TrainConfig\.preference\.pairs\.pairs_per_item"):
        trainer(pref=PreferenceSettings(pairs=PairSettings(pair_selection="all", pairs_per_item=2)))
    with pytest.raises(ConfigError, match=r"TrainConfig\.preference\.pairs\.pair_selection"):
        trainer(pref=PreferenceSettings(pairs=PairSettings(pair_selection="best")))
    with pytest.raises(ConfigError, match=r"TrainConfig\.loss\.kl_beta"):  # a TrainConfig built in Python
        trainer(loss={"kl_beta": 0.1})
    with pytest.raises(ConfigError, match="K >= 2"):
        trainer(k=1)
