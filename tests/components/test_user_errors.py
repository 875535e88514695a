"""Mistakes a new user makes in the first hour: the CLI (run as a subprocess, as a user runs it) prints one or
two lines naming the file, the place and the fix, exits with status 2, and shows no traceback unless asked."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "configs/demo/writing.yaml")
TLDR = str(ROOT / "configs/writing/tldr_smoke.yaml")
FAST = ["train.run.progress_bar=false", "train.rollout.num_generations=2", "train.run.batch_size=2",
        "agents.*.max_new_tokens=4"]


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("COMARL_DEBUG", None)
    env.update(extra)
    return env


def comarl(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "comarl", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env or _env(), timeout=timeout)


def _user_error(r, *needles):
    """Status 2, no traceback, a short message holding every needle."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) <= 2, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def test_yaml_syntax_error_names_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  - model: tiny\ntrain:\n  run:\n    max_steps: 4\n     batch_size: 2\n")
    _user_error(comarl("train", str(bad)), f"{bad}:6:16", "YAML syntax error")


def test_debug_flag_and_env_show_the_traceback(tmp_path, monkeypatch):
    import pytest

    from comarl.cli import main
    from comarl.core.config_io import ConfigError

    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [\n")
    # in-process (the subprocess tests above show status 2 without it): the error propagates to the traceback
    with pytest.raises(ConfigError, match=f"{bad}:2:1: YAML syntax error"):
        main(["train", str(bad), "--debug"])
    monkeypatch.setenv("COMARL_DEBUG", "1")
    with pytest.raises(ConfigError, match="YAML syntax error"):
        main(["train", str(bad)])
    monkeypatch.setenv("COMARL_DEBUG", "0")
    assert main(["train", str(bad)]) == 2


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    data = tmp_path / "posts.jsonl"
    data.write_text('{"prompt": "SUBREDDIT: r/a POST: one TL;DR:", "completion": "x"}\n'
                    '{"prompt": "two", "completion": \n')
    _user_error(comarl("train", TLDR, f"data.train.source={data}", "data.eval=null"),
                f"{data}, line 2: not valid JSON", "data error")


def test_row_missing_the_field_lists_only_present_fields(tmp_path):
    data = tmp_path / "posts.jsonl"
    data.write_text('{"prompt": "SUBREDDIT: r/a POST: one TL;DR:", "completion": "x"}\n'
                    '{"completion": "y"}\n')
    r = comarl("train", TLDR, f"data.train.source={data}", "data.eval=null")
    # before: the JSON loader filled the missing field with null, so 'prompt' showed among the fields
    _user_error(r, f"{data}, line 2", "no text field 'prompt' (fields: ['completion'])")


def test_nonexistent_model_folder_says_the_folder_does_not_exist():
    _user_error(comarl("train", DEMO, "agents.0.model=/nonexistent/path"),
                "agents.0.model: cannot load '/nonexistent/path': the folder does not exist")


def test_unwritable_output_dir_is_refused_before_any_model_loads(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    # the model path is wrong too: the output_dir error must come first (no model is loaded before it)
    _user_error(comarl("train", DEMO, f"train.run.output_dir={blocker}/run", "agents.0.model=/nonexistent/path"),
                f"train.run.output_dir: cannot write to {blocker}/run")


def test_hub_dataset_offline_fails_fast_without_traceback():
    # no offline variables: the hub is "reachable" only via a closed local port, so the probe fails at once
    env = _env(HF_ENDPOINT="http://127.0.0.1:9")
    for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        env.pop(k)
    t0 = time.perf_counter()
    r = comarl("train", TLDR, "data.train.source=someone/not-cached-dataset", "data.eval=null", env=env)
    _user_error(r, "could not load hub dataset 'someone/not-cached-dataset'", "local JSON/JSONL")
    assert time.perf_counter() - t0 < 60  # was ~30 s of retries on top of start-up


def test_hub_probe_is_quick_on_a_closed_port(monkeypatch):
    from comarl.envs.loading import hub_reachable

    for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    t0 = time.perf_counter()
    assert hub_reachable(timeout=2.0) is False
    assert time.perf_counter() - t0 < 2.5
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_reachable() is False


def test_ctrl_c_prints_step_checkpoint_and_resume_command(tmp_path):
    """(The resumed run's message is tested in-process in test_output_dirs.py.)"""
    out = tmp_path / "run"
    args = [DEMO, f"train.run.output_dir={out}", "train.run.max_steps=500", "train.run.save_on_interrupt=true", *FAST]
    p = subprocess.Popen([sys.executable, "-m", "comarl", "train", *args], cwd=ROOT, env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 120
    while not (metrics.exists() and metrics.read_text().strip()) and time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
    assert p.poll() is None, p.communicate()[1][-2000:]
    p.send_signal(signal.SIGINT)  # after the first step is logged
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr + stdout, stderr[-2000:]
    step = json.loads(metrics.read_text().splitlines()[-1])["step"]
    last = stderr.strip().splitlines()[-1]
    assert f"interrupted after step {step} of 500; last checkpoint {out}/checkpoint-{step}" in last, stderr
    assert "resume with: comarl train" in last and "train.run.resume=latest" in last
    assert (out / f"checkpoint-{step}" / "trainer_state.json").exists()  # train.run.save_on_interrupt


def _python_trainer(out, **run):
    """The README's Python example, small: a TrainConfig built in Python."""
    import comarl

    env = comarl.FunctionEnv(formatters=[lambda it: f"A {it['t']}", lambda it: f"B {it['t']}"],
                             reward_fn=lambda responses, item: 1.0)
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=4) for _ in range(2)]
    cfg = comarl.TrainConfig(rollout=comarl.RolloutConfig(num_generations=2),
                             run=comarl.RunConfig(batch_size=2, max_steps=1, output_dir=str(out), progress_bar=False,
                                                  report_to=["jsonl"], **run))
    return comarl.Trainer(agents, env, [{"t": "x"}, {"t": "y"}], cfg)


def test_python_errors_name_the_python_argument_and_config_errors_the_key(tmp_path):
    """A second run of the README's example into the same folder: the advice is Python for a Python user
    (TrainConfig(run=RunConfig(resume="latest"))), dotted keys for one whose TrainConfig came from a config file."""
    import pytest

    from comarl.config import load_config
    from comarl.core.config_io import ConfigError
    from comarl.experiment import build_trainer

    _python_trainer(tmp_path).train()
    with pytest.raises(ConfigError) as e:
        _python_trainer(tmp_path)
    said = str(e.value)
    assert 'TrainConfig(run=RunConfig(resume="latest"))' in said, said
    assert "TrainConfig(run=RunConfig(overwrite=True))" in said, said
    assert "train.run.resume" not in said and "train.run.overwrite" not in said
    with pytest.raises(ConfigError, match=r"holds no run to continue .*drop TrainConfig\.run\.resume"):
        _python_trainer(tmp_path / "empty", resume="latest")
    with pytest.raises(ConfigError) as e:
        build_trainer(load_config(DEMO, [f"train.run.output_dir={tmp_path}"]))
    assert "train.run.resume=latest" in str(e.value) and "train.run.overwrite=true" in str(e.value)


def test_a_mistyped_key_gets_did_you_mean_not_sixty_keys(tmp_path):
    import pytest

    from comarl import TrainConfig

    r = comarl("train", DEMO, "train.num_generation=8")
    _user_error(r, "unknown config key train.num_generation (did you mean train.rollout.num_generations")
    assert len(r.stderr) < 200, r.stderr
    from comarl.config import load_config
    from comarl.core.config_io import ConfigError

    with pytest.raises(ConfigError, match=r"train\.rollout\.batch_size \(did you mean train\.run\.batch_size\?\)"):
        load_config(DEMO, ["train.rollout.batch_size=8"])  # a key of another section
    with pytest.raises(ConfigError) as e:  # nothing close: the sections, not every key
        load_config(DEMO, ["train.colour=red"])
    assert ("none of train's keys is close; it has algorithm, critic, estimator, hardware, loss, preference, rollout, "
            "run") in str(e.value) and len(str(e.value)) < 250
    with pytest.raises(TypeError, match=r"TrainConfig\(\) got an unknown argument 'num_generation' \(did you mean "
                                        r"rollout=RolloutConfig\(num_generations=\.\.\.\)"):
        TrainConfig(num_generation=4)
