"""Structured generation: schemas (comarl/core/schema.py), constrained decoding (comarl/generation/constrained.py)
and forced tokens out of the loss (logprobs, token weights, the training loop)."""
import json
import pickle
import re

import pytest
import torch

import comarl
from comarl.models.agents import AgentConfig, build_agents
from comarl.generation import generate
from comarl.generation.constrained import classify_tokens
from comarl.objective.logprobs import completion_logprobs
from comarl.models.lora import LoraSettings
from comarl.objective.losses import clipped_policy_loss, token_weights
from comarl.generation.team import generate_for_agents
from comarl.core.schema import Schema, Slot, schema_of, with_schema
from test_lora_batched_generation import _distinct_adapters

SCHEMA = Schema(('{"city": "', Slot(5), ', "food": "', Slot(3), '}'))
VALUE = '([^"\\\\\\x00-\\x1f]*)"'  # a JSON string body without escapes, then the closing quote


def _pattern(schema: Schema) -> re.Pattern:
    return re.compile("".join(re.escape(p) if isinstance(p, str) else VALUE for p in schema.parts) + r"\Z")


@pytest.fixture(scope="module")
def agent():
    return build_agents([AgentConfig(model="tiny", max_new_tokens=40, temperature=1.0)])[0]


def test_token_classes_by_hand():
    texts = ["Paris", 's"', '"', '",', 'a\n', "", '"}', " ", "\\n"]
    allowed, closing = classify_tokens(texts, Slot())
    assert allowed.tolist() == [True, True, True, False, False, False, False, True, False]
    assert closing.tolist() == [False, True, True, False, False, False, False, False, False]
    # another terminator: a value ends at "]"; quotes are allowed inside
    allowed, closing = classify_tokens(['a"b', "x]", "]]", "]"], Slot(terminator="]", disallowed="]\n"))
    assert allowed.tolist() == [True, True, False, True] and closing.tolist() == [False, True, False, True]


def test_schema_checks_fill_and_prompt_carrier():
    with pytest.raises(ValueError, match="must be disallowed"):
        Slot(terminator="]").check("slot")
    with pytest.raises(ValueError, match="schema part 1: max_tokens"):
        Schema(("a", Slot(max_tokens=0)))
    with pytest.raises(TypeError, match="schema part 0"):
        Schema((3,))
    assert SCHEMA.fill(["Rome", "pizza"]) == '{"city": "Rome", "food": "pizza"}'
    p = with_schema("Plan.", SCHEMA)
    assert p == "Plan." and schema_of(p) == SCHEMA and schema_of(pickle.loads(pickle.dumps(p))) == SCHEMA
    assert schema_of("Plan.") is None and type(with_schema("x", None)) is str


def _check_rows(agent, comp, schemas, k):
    eos = agent.eos_ids[0]
    for s, (ids, forced, text) in enumerate(zip(comp.ids, comp.forced, comp.texts)):
        schema = schemas[s // k]
        assert len(forced) == len(ids)
        if schema is None:
            assert not any(forced)
            continue
        m = _pattern(schema).match(text)
        assert m, text
        assert json.loads(text).keys() == {"city", "food"}
        assert ids[-1] == eos and forced[-1] and not comp.truncated[s]
        # each run of sampled tokens (one value) is at most its slot's cap
        runs, n = [], 0
        for f in forced + [True]:
            if f and n:
                runs.append(n)
            n = 0 if f else n + 1
        caps = [sl.max_tokens for sl in schema.slots]
        assert len(runs) <= len(caps) and all(r <= c for r, c in zip(runs, caps))
        # the forced tokens are exactly the skeleton (plus terminators forced at a cap, plus EOS)
        forced_text = agent.tokenizer.decode([t for t, f in zip(ids, forced) if f], skip_special_tokens=True)
        skeleton = "".join(p for p in schema.parts if isinstance(p, str))
        assert forced_text.replace('"', "") == skeleton.replace('"', "")


def test_sampled_and_greedy_rows_follow_their_schema(agent):
    short = Schema(('{"city": "', Slot(2), ', "food": "', Slot(1), '}'))
    prompts = agent.encode_prompts(["Plan a trip.", "Where to?", "Eat."])
    schemas = [SCHEMA, None, short]
    torch.manual_seed(0)
    comp = generate(agent, prompts, 3, schemas=schemas)
    _check_rows(agent, comp, schemas, 3)
    assert not any(comp.forced[3])  # the free row
    greedy = generate(agent, prompts, 1, greedy=True, schemas=schemas, batch_size=2)
    _check_rows(agent, greedy, schemas, 1)
    assert generate(agent, prompts[:1], 1, greedy=True).forced is None  # no schema: nothing forced


def test_max_new_tokens_must_hold_the_longest_answer():
    small = build_agents([AgentConfig(model="tiny", max_new_tokens=8)])[0]
    with pytest.raises(ValueError, match=r"agents\.0\.max_new_tokens.*prompt 0: up to \d+ tokens"):
        generate(small, small.encode_prompts(["x"]), 1, schemas=[SCHEMA])


def test_mixed_adapter_batch_equals_separate_calls():
    agents = build_agents([AgentConfig(model="tiny", max_new_tokens=40, lora=LoraSettings(r=4)) for _ in range(2)])
    _distinct_adapters(agents)
    texts = ["Plan a trip.", "a longer prompt about a trip to the sea"]
    prompts = [a.encode_prompts(texts) for a in agents]
    schemas = [[SCHEMA, None], [None, SCHEMA]]
    mixed = generate_for_agents(agents, prompts, 1, greedy=True, schemas=schemas)
    separate = generate_for_agents(agents, prompts, 1, greedy=True, batch_adapters=False, schemas=schemas)
    for m, s, sc in zip(mixed, separate, schemas):
        assert m.ids == s.ids and m.forced == s.forced and m.texts == s.texts
        _check_rows(agents[0], m, sc, 1)


def test_forced_tokens_leave_the_mask_and_value_logprobs_are_unchanged(agent):
    prompts = agent.encode_prompts(["Plan a trip."])
    torch.manual_seed(1)
    comp = generate(agent, prompts, 2, schemas=[SCHEMA])
    p_ids = [prompts[0]] * 2
    free_lp, free_mask = completion_logprobs(agent.model, p_ids, comp.ids, agent.tokenizer.pad_token_id)
    lp, mask = completion_logprobs(agent.model, p_ids, comp.ids, agent.tokenizer.pad_token_id, forced=comp.forced)
    for s, f in enumerate(comp.forced):
        keep = torch.tensor([not x for x in f] + [False] * (mask.shape[1] - len(f)))
        assert mask[s].bool().tolist() == keep.tolist()
        assert torch.equal(lp[s][keep], free_lp[s][keep]) and (lp[s][~keep] == 0).all()
    assert free_mask.sum() == sum(len(c) for c in comp.ids)


def test_token_weights_with_a_mask_by_hand():
    # sequence 0: tokens 0 and 2 sampled (1 forced); sequence 1: token 1 sampled (0 and 2 forced)
    mask = torch.tensor([[1, 0, 1], [0, 1, 0]])
    lengths = mask.sum(1)
    w = token_weights(lengths, 3, "sequence", 2, 3, 8, mask=mask)
    assert torch.allclose(w, torch.tensor([[0.25, 0, 0.25], [0, 0.5, 0]]))  # 1 / (2 sequences * own length)
    w = token_weights(lengths, 3, "token", 2, 3, 8, mask=mask)
    assert torch.allclose(w, mask / 3.0)
    # a forced token gets no gradient: d loss / d logp = -A * w, and w = 0 there
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0]], requires_grad=True)
    loss, _ = clipped_policy_loss(logp, logp.detach(), torch.tensor([1.0, -2.0]),
                                  token_weights(lengths, 3, "sequence", 2, 3, 8, mask=mask))
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.25, 0, -0.25], [0, 1.0, 0]]))


def test_training_step_with_a_schema_learns_values_only():
    """A FunctionEnv whose prompts declare a schema: every response parses, the rollout marks the forced tokens
    (the EOS last), and the update steps on the sampled tokens."""
    env = comarl.FunctionEnv(formatters=[lambda it: with_schema(f"Trip to {it['t']}", SCHEMA)],
                             reward_fn=lambda responses, item: len(json.loads(responses[0])["city"]) / 10)
    trainer = comarl.Trainer(agents=[AgentConfig(model="tiny", max_new_tokens=40)], env=env,
                             train_dataset=[{"t": "Rome"}, {"t": "Oslo"}],
                             config=comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=4),
                                                       run=comarl.RunConfig(batch_size=2, max_steps=1, seed=3,
                                                                            progress_bar=False)))
    seen = {}
    real = trainer.update.update_agent

    def spy(team, i, samples, step, *rest):  # agent i's part of the update, watched
        seen["samples"] = samples
        return real(team, i, samples, step, *rest)

    trainer.update.update_agent = spy
    [metrics] = trainer.train()
    s = seen["samples"][0]
    assert s.forced is not None and len(s.forced) == 8
    assert all(len(f) == len(c) and f[-1] for f, c in zip(s.forced, s.completion_ids))
    assert all(json.loads(t) for t in s.texts)
    assert metrics["agent0/grad_norm"] > 0 and torch.isfinite(torch.tensor(metrics["agent0/loss"]))


def test_dpo_sequence_logprobs_skip_forced_tokens():
    from comarl.updates.dpo import _sequence_logprobs

    def fn(prompts, comps):  # log-probs -1, -2, -4 for every sequence
        return torch.tensor([[-1.0, -2.0, -4.0]] * len(comps)), torch.ones(len(comps), 3)

    out = _sequence_logprobs(fn, [[1]] * 2, [[5, 6, 7]] * 2, [0, 1], 1, forced=[[True, False, False],
                                                                             [False, False, True]])
    assert out.tolist() == [-6.0, -3.0]
    assert _sequence_logprobs(fn, [[1]], [[5, 6, 7]], [0], 1).tolist() == [-7.0]


def test_madpo_step_with_a_schema():
    env = comarl.FunctionEnv(formatters=[lambda it: with_schema(f"Trip to {it['t']}", SCHEMA)] * 2,
                             reward_fn=lambda rs, item: sum(len(json.loads(r)["city"]) for r in rs) / 10)
    trainer = comarl.Trainer(agents=[AgentConfig(model="tiny", max_new_tokens=40) for _ in range(2)], env=env,
                             train_dataset=[{"t": "Rome"}],
                             config=comarl.TrainConfig(algorithm="madpo",
                                                       rollout=comarl.RolloutConfig(num_generations=2),
                                                       run=comarl.RunConfig(batch_size=1, max_steps=1, seed=0,
                                                                            progress_bar=False)))
    [metrics] = trainer.train()
    assert metrics["pref/pairs"] == 1 and all(metrics[f"agent{i}/grad_norm"] > 0 for i in range(2))


def test_forced_tokens_give_no_gradient_through_the_model(agent):
    """The loop's pieces (forced mask -> token weights -> clipped loss) give the model the gradient of a loss
    written by hand over the sampled tokens only: -sum_s A_s * mean_{t sampled} logp[s, t] / S."""
    prompts = agent.encode_prompts(["Plan a trip."])
    torch.manual_seed(2)
    comp = generate(agent, prompts, 2, schemas=[SCHEMA])
    p_ids, adv, pad = [prompts[0]] * 2, torch.tensor([1.5, -0.5]), agent.tokenizer.pad_token_id
    params = [p for p in agent.model.parameters() if p.requires_grad]

    def grads(loss):
        agent.model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in params]

    lp, mask = completion_logprobs(agent.model, p_ids, comp.ids, pad, forced=comp.forced)
    n = mask.sum(1)
    w = token_weights(n, lp.shape[1], "sequence", 2, int(n.sum()), 40, mask=mask)
    loop_grads = grads(clipped_policy_loss(lp, lp.detach(), adv, w)[0])
    free_lp, _ = completion_logprobs(agent.model, p_ids, comp.ids, pad)
    width = free_lp.shape[1]
    sampled = torch.tensor([[not x for x in f] + [False] * (width - len(f)) for f in comp.forced])
    assert all(0 < int(r.sum()) < len(f) for r, f in zip(sampled, comp.forced))
    by_hand = -sum(adv[s] * free_lp[s][sampled[s]].mean() for s in range(2)) / 2
    for g1, g2 in zip(loop_grads, grads(by_hand)):
        assert torch.allclose(g1, g2, atol=1e-6)


def test_schemas_under_a_shared_prefix_draw_the_same_rows(agent):
    """The prefill-once path (train.hardware.share_prefix) and the plain path give the same constrained samples."""
    prompts = agent.encode_prompts(["Plan a trip.", "a longer prompt about a trip to the sea"])
    schemas = [SCHEMA, None]
    out = []
    for share in (False, True):
        torch.manual_seed(5)
        out.append(generate(agent, prompts, 3, schemas=schemas, share_prefix=share))
    assert out[0].ids == out[1].ids and out[0].forced == out[1].forced
    _check_rows(agent, out[1], schemas, 3)


def test_madpo_iter_pairs_keep_their_sampled_tokens_and_forced_flags(tmp_path):
    """Round pairs record the sampled ids and the schema's forced flags (preference/pair_tokens.py), so the
    round's DPO scores the sampled tokens and leaves the forced ones out, as online MADPO does."""
    from comarl.preference import IterativeSettings, PairSettings, PreferenceSettings
    from comarl.preference.pair_tokens import tokenizer_fingerprint

    env = comarl.FunctionEnv(formatters=[lambda it: with_schema(f"Trip to {it['t']}", SCHEMA)] * 2,
                             reward_fn=lambda rs, item: sum(len(json.loads(r)["city"]) for r in rs) / 10)
    cfg = comarl.TrainConfig(algorithm="madpo_iter", rollout=comarl.RolloutConfig(num_generations=3),
                             run=comarl.RunConfig(batch_size=2, seed=0, progress_bar=False, report_to=[],
                                                  output_dir=str(tmp_path)))
    cfg.preference = PreferenceSettings(iterative=IterativeSettings(rounds=1, steps_per_round=1),
                                        pairs=PairSettings(pairs_per_item=2))
    trainer = comarl.Trainer([AgentConfig(model="tiny", max_new_tokens=40) for _ in range(2)], env,
                             [{"t": "Rome"}, {"t": "Oslo"}], cfg)
    trainer.train()
    pairs = [json.loads(line) for line in (tmp_path / "round-0" / "pairs.jsonl").read_text().splitlines()]
    assert pairs
    fp = tokenizer_fingerprint(trainer.agents[0].tokenizer)
    for i, d in enumerate(trainer.source.data):
        comps, chosen, rejected, forced = d.completions, d.chosen, d.rejected, d.forced
        assert forced is not None
        for k, p in enumerate(pairs):
            for side, idx in (("chosen", chosen[k]), ("rejected", rejected[k])):
                rec = p["tokens"][side]
                assert rec["tokenizer"][i] == fp
                assert comps[idx] == rec["ids"][i]  # the sampled ids, not a re-tokenisation of the text
                assert forced[idx] == [c == "1" for c in rec["forced"][i]]
                assert forced[idx][-1] and not all(forced[idx])  # EOS forced, the values sampled
                assert trainer.agents[i].tokenizer.decode(rec["ids"][i], skip_special_tokens=True) == p[side][i]


def test_text_pairs_use_only_records_of_their_own_tokenizer(agent):
    from comarl.preference.rollout_pairs import text_pairs_to_ids
    from comarl.preference.pair_tokens import tokenizer_fingerprint

    rec = {"ids": [[7, 8, 9]], "forced": ["101"], "tokenizer": [tokenizer_fingerprint(agent.tokenizer)]}
    pair = {"prompts": ["P"], "chosen": ["ab"], "rejected": ["cd"],
            "tokens": {"chosen": rec, "rejected": {**rec, "ids": [[4, 5]], "forced": [""]}}}
    [d] = text_pairs_to_ids([agent], [pair])
    prompts, comps, chosen, rejected, forced = d.prompts, d.completions, d.chosen, d.rejected, d.forced
    assert comps == [[7, 8, 9], [4, 5]] and forced == [[True, False, True], [False, False]]
    assert (chosen, rejected) == ([0], [1]) and prompts[0] == prompts[1]
    eos = agent.tokenizer.eos_token_id
    other = {**pair, "tokens": {"chosen": {**rec, "tokenizer": ["another"]}}}  # rejected: no record at all
    [d] = text_pairs_to_ids([agent], [other])
    comps, forced = d.completions, d.forced
    assert comps == [agent.tokenizer("ab", add_special_tokens=False)["input_ids"] + [eos],
                     agent.tokenizer("cd", add_special_tokens=False)["input_ids"] + [eos]]
    assert forced is None
