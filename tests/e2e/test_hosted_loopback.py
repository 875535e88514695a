"""Hosted helpers against a real server on loopback: comarl's OpenAI-compatible gateway (what ``comarl serve`` runs)
serving a tiny model on 127.0.0.1, with an API key it checks. Through the official ``openai`` client, OpenAI Chat
Completions is the API under test: an ``api`` comparator (``comparator: helper`` with an endpoint) in MADPO rounds,
and the ``api`` expert of a coding run's ``expert_edits``, both from config files. The key never reaches the run
folder. (The Responses and Anthropic APIs are tested against a wire-format fake: test_hosted.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("openai")

from comarl.config import load_config  # noqa: E402
from comarl.experiment import build_trainer  # noqa: E402
from comarl.gateway import Gateway, GatewayServer  # noqa: E402
from comarl.generation.hosted import HostedError  # noqa: E402
from comarl.generation.team import generate_for_agents  # noqa: E402
from comarl.models.agents import AgentConfig, build_agents  # noqa: E402
from comarl.preference.pairs_file import read_pairs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEY = "loopback-key-5d1e-never-written"


@pytest.fixture(scope="module")
def server():
    """The gateway over one tiny model named ``tiny-chat`` (sampling at the helpers' default temperature, 0.3,
    which the gateway requires a request to match), bound to 127.0.0.1, checking ``KEY``; stopped after the
    module."""
    agents = build_agents([AgentConfig(model="tiny", name="tiny-chat", temperature=0.3, max_new_tokens=8)])
    with GatewayServer(Gateway(agents, generate_for_agents, None, {"batch_size": 0}, api_key=KEY,
                               request_timeout_s=60)) as srv:
        yield srv


def endpoint(name: str, srv, **more) -> list[str]:
    keys = {"api": "chat", "model": "tiny-chat", "base_url": srv.url + "/v1", "api_key_env": "COMARL_LOOPBACK_KEY",
            "concurrency": 4, "timeout_s": 60, "price_in_per_m": 1.0, "price_out_per_m": 2.0, **more}
    return [f"helpers.{name}.endpoint.{k}={v}" for k, v in keys.items()] + [f"helpers.{name}.max_new_tokens=8"]


def every_file_text(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_an_api_comparator_writes_the_other_side_of_madpo_rounds(server, tmp_path, monkeypatch):
    monkeypatch.setenv("COMARL_LOOPBACK_KEY", KEY)
    before = server.gateway.requests
    cfg = load_config(ROOT / "configs/preference/tldr_madpo_iter_smoke.yaml", endpoint("rival", server) + [
        "train.preference.iterative.comparator=helper", "train.preference.iterative.comparator_helper=rival",
        f"train.run.output_dir={tmp_path}", "train.run.report_to=[jsonl,tensorboard]", "train.run.progress_bar=false"])
    trainer = build_trainer(cfg)
    try:
        history = trainer.train()
    finally:
        trainer.close()
    # per round: 2 items x 2 agents x K=2 prompts, one request each, all answered by the served model
    assert server.gateway.requests - before == 2 * 8
    last = history[-1]
    assert last["helpers/rival/requests"] == 16 and last["helpers/rival/retries"] == 0
    assert last["helpers/rival/tokens_in"] > 0 and last["helpers/rival/tokens_out"] > 0
    assert last["helpers/rival/cost_usd"] == pytest.approx(
        (last["helpers/rival/tokens_in"] + 2 * last["helpers/rival/tokens_out"]) / 1e6)
    pairs = [p for r in range(2) for p in read_pairs(tmp_path / f"round-{r}" / "pairs.jsonl")]
    assert all(p["chosen_by"] in ("policy", "comparator") for p in pairs)
    assert KEY.encode() not in every_file_text(tmp_path)  # metrics, config dumps, pairs, checkpoints, tensorboard


def test_a_wrong_key_is_one_line_naming_the_variable(server, tmp_path, monkeypatch):
    monkeypatch.setenv("COMARL_LOOPBACK_KEY", "not-the-key")
    cfg = load_config(ROOT / "configs/preference/tldr_madpo_iter_smoke.yaml", endpoint("rival", server) + [
        "train.preference.iterative.comparator=helper", "train.preference.iterative.comparator_helper=rival",
        f"train.run.output_dir={tmp_path}", "train.run.report_to=[]", "train.run.progress_bar=false"])
    trainer = build_trainer(cfg)
    try:
        with pytest.raises(HostedError) as e:
            trainer.train()
    finally:
        trainer.close()
    assert "\n" not in str(e.value) and "key was refused (401" in str(e.value) and "COMARL_LOOPBACK_KEY" in str(e.value)


def test_an_api_expert_answers_a_coding_runs_expert_edits(server, tmp_path, monkeypatch):
    """CoopHumanEval (paper preset, two turns, ``expert_edits``): the expert is the served model, asked once per
    branch that goes on (a random tiny model writes no JSON, so no edits reach the agents: the paper's fallback;
    the edits' path into the prompts is test_hosted.py's)."""
    monkeypatch.setenv("COMARL_LOOPBACK_KEY", KEY)
    before = server.gateway.requests
    cfg = load_config(ROOT / "configs/coding/coophumaneval_smoke.yaml", endpoint("coder", server) + [
        "env.args.preset=paper", "env.args.feedback=expert_edits", "env.args.expert=coder",
        "env.args.expert_retries=1", "env.args.workers=1", "train.rollout.num_turns=2", "train.run.max_steps=1",
        "agents.*.max_new_tokens=8", f"train.run.output_dir={tmp_path}", "train.run.progress_bar=false"])
    trainer = build_trainer(cfg)
    try:
        history = trainer.train()
    finally:
        trainer.close()
        trainer.env.close()
    asked = server.gateway.requests - before
    assert asked == history[-1]["helpers/coder/requests"] == 2  # 1 item x K=2 branches into turn 2, one try each
    assert history[-1]["helpers/coder/tokens_in"] > 0
    assert KEY.encode() not in every_file_text(tmp_path)


@pytest.mark.slow
def test_a_hosted_helper_talks_to_comarl_serve(tmp_path):
    """The same client path against the ``comarl serve`` command itself (a process of its own, stopped with
    Ctrl-C): the helper's requests are answered and counted."""
    import os
    import signal
    import subprocess
    import sys

    from comarl.generation.helper_settings import EndpointSettings, HelperSpec
    from comarl.generation.hosted import HostedModel

    team = tmp_path / "team.yaml"
    team.write_text("agents: [{model: tiny, name: tiny-chat, temperature: 0.3, max_new_tokens: 6}]\n")
    proc = subprocess.Popen([sys.executable, "-m", "comarl.cli", "serve", str(team), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COMARL_API_KEY": KEY})
    try:
        line = proc.stdout.readline()
        assert " on http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.split(" on ")[1].split()[0]
        spec = HelperSpec(endpoint=EndpointSettings(model="tiny-chat", base_url=url, api_key_env="K", timeout_s=60),
                          max_new_tokens=6)
        helper = HostedModel("served", spec, environ={"K": KEY})
        assert len(helper(["Say hello.", "Say bye."])) == 2
        assert helper.metrics()["helpers/served/requests"] == 2 and helper.metrics()["helpers/served/tokens_in"] > 0
        helper.close()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert "stopped after 2 completion requests" in err, err
