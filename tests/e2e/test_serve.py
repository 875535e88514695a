"""``comarl serve``: a trained run answers the ``openai`` client (its agents by name, the API key on every request),
stops on Ctrl-C with every connection closed; a config serves its untrained agents; what cannot be served is
refused with one line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import comarl  # noqa: E402
from comarl.config import RunConfig, RolloutConfig  # noqa: E402
from comarl.core.config_io import ConfigError  # noqa: E402
from comarl.gateway.serve import build_team, served_folder, team_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A run folder whose final/ holds two tiny agents trained one step."""
    run = tmp_path_factory.mktemp("run")
    env = comarl.FunctionEnv([lambda it: f"Say: {it['q']}", lambda it: f"Repeat: {it['q']}"],
                             lambda r, it: float(len(r[0]) < len(r[1])))
    cfg = comarl.TrainConfig(rollout=RolloutConfig(num_generations=2),
                             run=RunConfig(batch_size=1, max_steps=1, progress_bar=False, report_to=[]))
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=6), comarl.AgentConfig(model="tiny", max_new_tokens=6)]
    trainer = comarl.Trainer(agents, env, [{"q": "hello"}], cfg)
    trainer.train()
    trainer.save(run / "final")
    return run


def test_a_trained_run_answers_the_openai_client_and_stops_on_ctrl_c(trained_run):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMARL_API_KEY": "k3y"}
    proc = subprocess.Popen([sys.executable, "-m", "comarl.cli", "serve", str(trained_run), "--port", "0",
                             "--names", "writer,critic", "agents.1.max_new_tokens=3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert "as 'writer', 'critic' on http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() else "")
        url = line.split(" on ")[1].split()[0]
        client = openai.OpenAI(base_url=url, api_key="k3y", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["writer", "critic"]
        r = client.chat.completions.create(model="critic", messages=[{"role": "user", "content": "hello"}])
        assert r.usage.completion_tokens <= 3 and r.choices[0].finish_reason in ("stop", "length")
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped after 1 completion request\n" in err, err
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=url, api_key="k3y", max_retries=0, timeout=2).models.list()


def test_what_is_served_from_configs_and_folders(trained_run, tmp_path):
    assert served_folder(trained_run) == trained_run / "final"
    cfg_file = tmp_path / "team.yaml"
    cfg_file.write_text("agents: [{model: tiny, name: writer, max_new_tokens: 4}, {model: tiny, name: critic}]\n"
                        "env: {name: demo_writing}\n")
    cfg, folder, what = team_config(str(cfg_file), ["agents.1.max_new_tokens=5"], None, None)
    assert [a.name for a in cfg.agents] == ["writer", "critic"] and cfg.agents[1].max_new_tokens == 5
    assert folder is None and "untrained" in what
    cfg, folder, what = team_config(str(cfg_file), [], str(trained_run), None)
    agents, generator = build_team(cfg, folder)
    assert folder == trained_run / "final" and [a.name for a in agents] == ["writer", "critic"]
    with pytest.raises(ConfigError, match="--names: 3 names"):
        team_config(str(trained_run), [], None, ["a", "b", "c"])
    with pytest.raises(ConfigError, match="holds no agent0/"):
        team_config(str(tmp_path), [], None, None)
    with pytest.raises(ConfigError, match="neither a config file nor a folder"):
        team_config(str(tmp_path / "nothing"), [], None, None)


def test_another_host_needs_an_api_key(trained_run):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("COMARL_API_KEY", None)
    r = subprocess.run([sys.executable, "-m", "comarl.cli", "serve", str(trained_run), "--host", "0.0.0.0"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "--host: host '0.0.0.0' is reachable from other machines" in r.stderr


def test_ctrl_c_stops_it_also_when_started_with_sigint_ignored(tmp_path):
    """A process started in the background of a non-interactive shell inherits SIGINT ignored, and Python then
    installs no KeyboardInterrupt; ``comarl serve`` handles SIGINT itself, so Ctrl-C (``kill -INT``) still stops it."""
    team = tmp_path / "team.yaml"
    team.write_text("agents: [{model: tiny, max_new_tokens: 4}]\n")
    proc = subprocess.Popen([sys.executable, "-m", "comarl.cli", "serve", str(team), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert " on http://127.0.0.1:" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0 and "stopped after 0 completion requests" in err, err
