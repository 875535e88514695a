"""The gateway with the real ``openai`` client over loopback: every route, every sampling field's rule, tools,
batching, and every bad input (malformed JSON, unknown model, long prompt, large body, wrong key, a client that
goes away, shutdown under load): each an OpenAI-style error, nothing left running."""
from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
import httpx  # noqa: E402

from comarl.gateway import Episodes, Gateway, GatewayServer  # noqa: E402
from gateway_fakes import FakeTeam, team  # noqa: E402

USER = [{"role": "user", "content": "Summarise: the bus was late."}]


@pytest.fixture(scope="module")
def agents():
    return team(("writer", "critic", "tooler"), tools=True, system_prompt="Be brief.")


def serve(agents, gen=None, **kw):
    return GatewayServer(Gateway(agents, gen or FakeTeam(), **kw)).start()


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0, **kw)


def no_gateway_threads():
    return not [t for t in threading.enumerate() if t.name.startswith("comarl-gateway") and t.is_alive()]


def test_models_chat_and_the_prompt_the_policy_sees(agents):
    gen = FakeTeam()
    with serve(agents, gen) as srv:
        c = client(srv)
        assert [m.id for m in c.models.list().data] == ["writer", "critic", "tooler"]
        assert c.models.retrieve("critic").id == "critic"
        r = c.chat.completions.create(model="writer", messages=USER)
        assert r.choices[0].message.content == "writer says 0" and r.choices[0].finish_reason == "stop"
        assert gen.calls[-1]["prompts"][0] == agents[0].encode_prompts([USER[0]["content"]])  # as the rollout
        assert r.usage.prompt_tokens == len(gen.calls[-1]["prompts"][0][0])
        c.chat.completions.create(model="critic", messages=USER)  # the agent's system prompt comes first
        assert gen.calls[-1]["prompts"][1] == agents[1].encode_prompts([USER[0]["content"]])
        assert "Be brief." in agents[1].tokenizer.decode(gen.calls[-1]["prompts"][1][0])
    assert no_gateway_threads()


def test_n_max_tokens_and_stop(agents):
    gen = FakeTeam(reply=lambda a, p, j: f"one two three four five {j}")
    with serve(agents, gen) as srv:
        c = client(srv)
        r = c.chat.completions.create(model="writer", messages=USER, n=3)
        assert [ch.message.content for ch in r.choices] == [f"one two three four five {j}" for j in range(3)]
        assert gen.calls[-1]["k"] == 3  # one prompt, three samples
        r = c.chat.completions.create(model="writer", messages=USER, max_tokens=2)
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2
        r = c.chat.completions.create(model="writer", messages=USER, max_tokens=10_000)  # clamped to the agent's
        assert r.choices[0].finish_reason == "stop"
        r = c.chat.completions.create(model="writer", messages=USER, stop=[" four", "zzz"])
        assert r.choices[0].message.content == "one two three" and r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("field,value", [
    ("temperature", 0.5), ("top_p", 0.5), ("seed", 1), ("logit_bias", {"1": 5}), ("presence_penalty", 0.5),
    ("response_format", {"type": "json_object"}), ("n", 17), ("max_tokens", 0), ("tool_choice", "required"),
    ("stop", ["a", "b", "c", "d", "e"])])
def test_sampling_fields_refused_name_the_field(agents, field, value):
    with serve(agents) as srv:
        with pytest.raises(openai.BadRequestError) as e:
            client(srv).chat.completions.create(model="writer", messages=USER, **{field: value})
        assert e.value.body["param"] == field and field in e.value.body["message"]


def test_temperature_of_the_agent_samples_and_zero_decodes_greedily(agents):
    gen = FakeTeam()
    with serve(agents, gen) as srv:
        c = client(srv)
        c.chat.completions.create(model="writer", messages=USER, temperature=1.0, top_p=1.0)
        assert gen.calls[-1]["greedy"] is False
        c.chat.completions.create(model="writer", messages=USER, temperature=0)
        assert gen.calls[-1]["greedy"] is True


def test_unknown_model_and_malformed_json(agents):
    with serve(agents) as srv:
        with pytest.raises(openai.NotFoundError) as e:
            client(srv).chat.completions.create(model="nobody", messages=USER)
        assert e.value.body["code"] == "model_not_found" and "'writer'" in e.value.body["message"]
        for body in (b"{not json", b"[1, 2]", b'{"model": "writer", "messages": []}',
                     b'{"model": "writer", "messages": [{"role": "robot", "content": "x"}]}'):
            r = httpx.post(srv.url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", body
        r = httpx.get(srv.url + "/v2/nothing")
        assert r.status_code == 404 and "error" in r.json()


def test_prompt_longer_than_the_context(agents):
    cfg = agents[0].model.config
    old, cfg.max_position_embeddings = cfg.max_position_embeddings, 40
    try:
        with serve(agents) as srv:
            with pytest.raises(openai.BadRequestError) as e:
                client(srv).chat.completions.create(model="writer", messages=[{"role": "user", "content": "a b " * 50}])
            assert e.value.body["code"] == "context_length_exceeded" and "agents.0.max_new_tokens" in str(e.value)
    finally:
        cfg.max_position_embeddings = old


def test_oversized_body_is_413(agents):
    with serve(agents, max_body_bytes=2000) as srv:
        with pytest.raises(openai.APIStatusError) as e:
            client(srv).chat.completions.create(model="writer", messages=[{"role": "user", "content": "x" * 5000}])
        assert e.value.status_code == 413 and e.value.body["code"] == "request_too_large"
        chunks = (b'{"model": "writer", "pad": "' + b"y" * 1000 + b'"' for _ in range(3))  # no content-length
        r = httpx.post(srv.url + "/v1/chat/completions", content=chunks)
        assert r.status_code == 413


def test_tools_rendered_and_tool_calls_parsed_back(agents):
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    gen = FakeTeam(reply=lambda a, p, j: "It is sunny." if "tool_response" in p else call)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {"city": {}}}}}]
    agents[2].config.max_new_tokens = 64
    with serve(agents, gen) as srv:
        c = client(srv)
        r = c.chat.completions.create(model="tooler", messages=USER, tools=tools)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and msg.content is None
        assert msg.tool_calls[0].function.name == "get_weather"
        assert msg.tool_calls[0].function.arguments == '{"city": "Paris"}'
        assert "get_weather" in agents[2].tokenizer.decode(gen.calls[-1]["prompts"][2][0])  # the template got them
        history = USER + [msg.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "sunny, 21C"}]
        r = c.chat.completions.create(model="tooler", messages=history, tools=tools)
        assert r.choices[0].message.content == "It is sunny." and not r.choices[0].message.tool_calls
        with pytest.raises(openai.BadRequestError, match="does not render tools"):
            c.chat.completions.create(model="writer", messages=USER, tools=tools)


def test_text_completions_from_text_and_from_ids(agents):
    gen = FakeTeam()
    with serve(agents, gen) as srv:
        c = client(srv)
        r = c.completions.create(model="critic", prompt="def f(")
        assert r.choices[0].text == "critic says 0"
        assert gen.calls[-1]["prompts"][1] == [agents[1].tokenizer("def f(")["input_ids"]]
        c.completions.create(model="critic", prompt=[5, 6, 7], n=2)
        assert gen.calls[-1]["prompts"][1] == [[5, 6, 7]] and gen.calls[-1]["k"] == 2
        with pytest.raises(openai.BadRequestError):
            c.completions.create(model="critic", prompt=[10 ** 9])


def test_concurrent_requests_share_one_generate_call(agents):
    gen = FakeTeam()
    with serve(agents, gen, window_s=0.5) as srv:
        c = client(srv)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            out = list(pool.map(lambda _: c.chat.completions.create(model="writer", messages=USER), range(8)))
    assert len(gen.calls) == 1 and gen.calls[0]["k"] == 8 and len(gen.calls[0]["prompts"][0]) == 1
    assert sorted(r.choices[0].message.content for r in out) == sorted(f"writer says {j}" for j in range(8))


def test_a_client_gone_mid_generation_is_counted_and_not_recorded(agents):
    gate = threading.Event()
    gen = FakeTeam(gate=gate)
    episodes = Episodes()
    with serve(agents, gen, episodes=episodes, window_s=0.0) as srv:
        ep = episodes.open((0, 0))
        c = openai.OpenAI(base_url=f"{srv.url}/episodes/{ep.id}/v1", api_key="x", max_retries=0, timeout=0.5)
        with pytest.raises(openai.APITimeoutError):
            c.chat.completions.create(model="writer", messages=USER)
        gate.set()
        deadline = time.monotonic() + 5
        while ep.disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ep.disconnects == 1 and srv.gateway.disconnects == 1 and ep.calls == []
        c2 = openai.OpenAI(base_url=f"{srv.url}/episodes/{ep.id}/v1", api_key="x", max_retries=0, timeout=5)
        assert c2.chat.completions.create(model="writer", messages=USER).choices[0].message.content
        assert len(ep.calls) == 1 and ep.calls[0].prompt_ids == agents[0].encode_prompts([USER[0]["content"]])[0]


def test_episodes_are_closed_to_late_and_unknown_callers(agents):
    episodes = Episodes()
    with serve(agents, episodes=episodes) as srv:
        ep = episodes.open((0, 0))
        with pytest.raises(openai.NotFoundError, match="episodes"):  # a training gateway records every call
            client(srv).chat.completions.create(model="writer", messages=USER)
        c = openai.OpenAI(base_url=f"{srv.url}/episodes/{ep.id}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="temperature"):  # off-policy in a training run
            c.chat.completions.create(model="writer", messages=USER, temperature=0)
        episodes.close(ep)
        with pytest.raises(openai.NotFoundError, match="closed"):
            c.chat.completions.create(model="writer", messages=USER)
        bad = openai.OpenAI(base_url=f"{srv.url}/episodes/{'0' * 32}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="unknown"):
            bad.chat.completions.create(model="writer", messages=USER)
        assert ep.calls == []


def test_api_key_checked_on_every_request_and_other_hosts_need_one(agents):
    with serve(agents, api_key="s3cret") as srv:
        with pytest.raises(openai.AuthenticationError):
            client(srv, api_key="wrong").models.list()
        with pytest.raises(openai.AuthenticationError):
            client(srv, api_key="wrong").chat.completions.create(model="writer", messages=USER)
        assert client(srv, api_key="s3cret").chat.completions.create(model="writer", messages=USER).choices
    with pytest.raises(ValueError, match="API key"):
        GatewayServer(Gateway(agents, FakeTeam()), host="0.0.0.0")


def test_a_failing_generator_is_a_500_and_the_server_goes_on(agents):
    with serve(agents, FakeTeam(fail=RuntimeError("CUDA out of memory"))) as srv:
        with pytest.raises(openai.InternalServerError, match="out of memory"):
            client(srv).chat.completions.create(model="writer", messages=USER)
        assert client(srv).models.list().data


def test_stop_under_load_answers_the_waiting_and_leaves_nothing(agents):
    gate = threading.Event()
    gen = FakeTeam(gate=gate)
    srv = serve(agents, gen, window_s=0.0)
    c = client(srv, timeout=20)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(c.chat.completions.create, model="writer", messages=USER) for _ in range(4)]
        gen.entered.wait(5)
        time.sleep(0.2)  # one batch generating, the next ones queued
        t0 = time.monotonic()
        threading.Timer(0.5, gate.set).start()  # the generate call in flight ends a moment later
        srv.stop()
        errors = [f.exception(timeout=20) for f in futures]
    assert time.monotonic() - t0 < 15
    assert all(isinstance(e, (openai.APIStatusError, openai.APIConnectionError)) or e is None for e in errors)
    assert any(e is not None for e in errors)
    assert no_gateway_threads()
    with pytest.raises(openai.APIConnectionError):
        client(srv, timeout=2).models.list()
