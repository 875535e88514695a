"""Hosted helpers through the official ``openai`` and ``anthropic`` clients against a wire-format fake on 127.0.0.1
(``hosted_fakes.py``): each API's request and reply, token and cost counters, retries with backoff on 429/5xx and
lost connections, one-line errors for a refused key and an unknown model, the concurrency limit, and a key that
appears nowhere but in the request header. (Chat Completions against a real server: test_hosted_loopback.py.)"""
from __future__ import annotations

import socket

import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")

from comarl.core.config_io import ConfigError  # noqa: E402
from comarl.generation.helper_settings import EndpointSettings, HelperSpec  # noqa: E402
from comarl.generation.hosted import HostedError, HostedModel  # noqa: E402
from hosted_fakes import TOKENS_IN, TOKENS_OUT, FakeAPI  # noqa: E402

KEY = "sk-test-7f3a9c-never-shown"
APIS = ["chat", "responses", "anthropic"]


def base_url(api: str, fake: FakeAPI) -> str:
    return fake.url if api == "anthropic" else fake.url + "/v1"


def helper(api, fake, waits=None, **endpoint):
    spec = HelperSpec(endpoint=EndpointSettings(api=api, model=endpoint.pop("model", "m-1"),
                                                base_url=base_url(api, fake), api_key_env="COMARL_TEST_KEY",
                                                **{"backoff_s": 0.25, "timeout_s": 5.0, **endpoint}),
                      max_new_tokens=16, system_prompt="Be brief.")
    return HostedModel("judge", spec, environ={"COMARL_TEST_KEY": KEY},
                       sleep=(waits.append if waits is not None else lambda s: None))


@pytest.mark.parametrize("api", APIS)
def test_each_api_sends_its_request_and_counts_tokens_and_cost(api):
    with FakeAPI() as fake:
        h = helper(api, fake, price_in_per_m=2.0, price_out_per_m=10.0)
        assert h(["Score this.", "And this."]) == ["echo: Score this.", "echo: And this."]
        h.close()
    req = next(r for r in fake.requests if "Score this." in str(r["body"]))  # (sent concurrently: any order)
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}[api]
    assert req["path"] == path and req["body"]["model"] == "m-1"
    headers = {k.lower(): v for k, v in req["headers"].items()}
    assert KEY in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    if api == "anthropic":  # (the client's version decides the header: x-api-key, or a bearer token)
        assert "anthropic-version" in headers and req["body"]["system"] == "Be brief."
        assert req["body"]["max_tokens"] == 16
        assert req["body"]["messages"] == [{"role": "user", "content": "Score this."}]
    if api == "chat":
        assert req["body"]["messages"][0] == {"role": "system", "content": "Be brief."}
        assert req["body"]["max_tokens"] == 16
    if api == "responses":
        assert req["body"]["instructions"] == "Be brief." and req["body"]["max_output_tokens"] == 16
    m = h.metrics()
    assert m["helpers/judge/requests"] == 2 and m["helpers/judge/retries"] == 0
    assert (m["helpers/judge/tokens_in"], m["helpers/judge/tokens_out"]) == (2 * TOKENS_IN, 2 * TOKENS_OUT)
    assert m["helpers/judge/cost_usd"] == pytest.approx((2 * TOKENS_IN * 2.0 + 2 * TOKENS_OUT * 10.0) / 1e6)


@pytest.mark.parametrize("api", APIS)
def test_429_and_503_are_retried_with_doubling_waits(api):
    waits: list[float] = []
    with FakeAPI(statuses=[429, 503]) as fake:
        h = helper(api, fake, waits)
        assert h(["x"]) == ["echo: x"]
    assert len(fake.requests) == 3 and waits == [0.25, 0.5]
    assert h.metrics()["helpers/judge/retries"] == 2 and h.metrics()["helpers/judge/requests"] == 1


@pytest.mark.parametrize("api", APIS)
def test_a_server_that_keeps_failing_gives_one_line_after_the_last_retry(api):
    with FakeAPI(always=500) as fake:
        with pytest.raises(HostedError) as e:
            helper(api, fake, max_retries=2)(["x"])
    assert len(fake.requests) == 3
    msg = str(e.value)
    assert "\n" not in msg and "helpers.judge.endpoint" in msg and "failed after 3 tries" in msg and "500" in msg


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_one_line_naming_the_variable_never_the_key(api, status):
    with FakeAPI(always=status) as fake:
        h = helper(api, fake)
        with pytest.raises(HostedError) as e:
            h(["x"])
    msg = str(e.value)
    assert len(fake.requests) == 1  # never retried
    assert "\n" not in msg and "key was refused" in msg and "COMARL_TEST_KEY" in msg and str(status) in msg
    assert KEY not in msg and KEY not in repr(h) and KEY not in repr(h.metrics()) and KEY not in repr(vars(h))


@pytest.mark.parametrize("api", APIS)
def test_an_unknown_model_is_one_line_naming_the_keys_to_check(api):
    with FakeAPI(always=404) as fake:
        with pytest.raises(HostedError) as e:
            helper(api, fake, model="no-such-model")(["x"])
    msg = str(e.value)
    assert len(fake.requests) == 1
    assert "\n" not in msg and "'no-such-model'" in msg and "unknown model" in msg
    assert "helpers.judge.endpoint.model" in msg


def test_a_lost_connection_is_retried_then_reported():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    waits: list[float] = []
    spec = HelperSpec(endpoint=EndpointSettings(api="chat", model="m", base_url=f"http://127.0.0.1:{port}/v1",
                                                api_key_env=None, max_retries=2, backoff_s=0.25))
    with pytest.raises(HostedError, match="failed after 3 tries .*Connection"):
        HostedModel("h", spec, sleep=waits.append)(["x"])
    assert waits == [0.25, 0.5]


def test_at_most_concurrency_requests_are_in_flight():
    with FakeAPI(hold_s=0.2) as fake:
        h = helper("chat", fake, concurrency=2)
        assert h([f"p{i}" for i in range(6)]) == [f"echo: p{i}" for i in range(6)]  # in order
        h.close()
    assert fake.most_in_flight == 2


def test_the_key_comes_from_the_named_variable_only():
    spec = HelperSpec(endpoint=EndpointSettings(api="anthropic", model="m", api_key_env="NO_SUCH_VAR_43"))
    with pytest.raises(ConfigError, match="helpers.h.endpoint.api_key_env: the environment variable NO_SUCH_VAR_43"):
        HostedModel("h", spec, environ={})
    default = EndpointSettings(api="anthropic", model="m")
    assert default.key_variable == "ANTHROPIC_API_KEY" and EndpointSettings(model="m").key_variable == "OPENAI_API_KEY"


@pytest.mark.parametrize("change, key", [
    ({"api": "grpc"}, "api"), ({"model": ""}, "model"), ({"max_retries": -1}, "max_retries"),
    ({"concurrency": 0}, "concurrency"), ({"timeout_s": 0.0}, "timeout_s"),
    ({"price_in_per_m": -1.0}, "price_in_per_m")])
def test_bad_endpoint_settings_name_their_key(change, key):
    with pytest.raises(ConfigError, match=f"helpers.h.endpoint.{key}"):
        HelperSpec(endpoint=EndpointSettings(**{"model": "m", **change})).validate("helpers.h")


@pytest.mark.parametrize("api", APIS)
def test_a_hosted_expert_s_edits_reach_the_agents_next_prompts(api):
    """Coding ``expert_edits`` with the expert on an endpoint: each branch's request goes out, the JSON answer is
    parsed, and each agent's turn-2 prompt carries its part of the edits."""
    from comarl.envs.coding.data import load_function_items
    from comarl.envs.coding.function_env import FunctionCodingEnv

    item = load_function_items("humaneval", "fixture:humaneval", "[:1]", None)[0]
    answer = '{"aux": "return the sum", "main": "call aux(x) first"}'
    with FakeAPI(reply=lambda prompt: f"Here you go: {answer}") as fake:
        env = FunctionCodingEnv("humaneval", 2, preset="paper", max_turns=2, feedback="expert_edits",
                                expert=helper(api, fake), expert_retries=1, workers=1)
        try:
            t = env.step_batch([env.reset(item)], [("def aux(x):\n    return x\n", "def f(x):\n    return 0\n")])[0]
        finally:
            env.close()
    assert len(fake.requests) == 1 and item["entry_point"] in str(fake.requests[0]["body"])
    helper_prompt, main_prompt = t.next_state.prompts
    assert helper_prompt.endswith("Proposed edits from an expert:\nreturn the sum")
    assert main_prompt.endswith("Proposed edits from an expert:\ncall aux(x) first")
