"""``train.hardware.generator: hf | vllm`` and ``train.hardware.vllm``: read from YAML and overrides, and every refusal
made when the config is loaded (before any model), one line naming the key. Needs no vLLM."""
import pytest

import comarl
from comarl.config import load_config
from comarl.core.config_io import ConfigError
from comarl.generation.team import generate_for_agents
from comarl.generation.vllm_settings import EngineSettings, vllm_installed

VLLM = ["train.hardware.generator=vllm"]


def test_the_generator_and_engine_settings_are_config_keys(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train:\n  hardware:\n    generator: hf\n    vllm: {cpu_kv_cache_gib: 0.5, cpu_threads: 2, "
                   "extra: {max_num_seqs: 8}}\n")
    c = load_config(cfg, ["train.hardware.vllm.dtype=bfloat16"])  # the flat alias reaches the same section
    assert c.train.hardware.generator == "hf" and c.train.hardware.generator == "hf"
    assert c.train.hardware.vllm == EngineSettings(cpu_kv_cache_gib=0.5, cpu_threads=2, dtype="bfloat16",
                                                   extra={"max_num_seqs": 8})
    assert load_config(None).train.hardware.generator == "hf"  # the default


@pytest.mark.parametrize("overrides, message", [
    (["train.hardware.generator=sglang"], r"train\.hardware\.generator: must be hf or vllm, got 'sglang'"),
    (VLLM + ["train.hardware.agent_devices=[cuda:1]"],
     r"train\.hardware\.agent_devices: an in-process vLLM engine .* got cuda:1; "
     r"set train\.hardware\.vllm\.in_process: false"),
    (VLLM + ["train.hardware.vllm.agent_cpus=[0]"],
     r"train\.hardware\.vllm\.agent_cpus: binds each agent's engine .*in_process: false"),
    (VLLM + ["train.hardware.vllm.in_process=false", "train.hardware.vllm.agent_cpus=[0, 1]"],
     r"train\.hardware\.vllm\.agent_cpus: has 2 entries for 1 agents"),
    (VLLM + ["train.hardware.vllm.in_process=false", "train.hardware.vllm.agent_cpus=[1-0]"],
     r"train\.hardware\.vllm\.agent_cpus\[0\]: must list CPUs as in \"0-3,8\", got '1-0'"),
    (VLLM + ["train.hardware.vllm.push_timeout_s=-1"], r"train\.hardware\.vllm\.push_timeout_s: must be >= 0"),
    (["train.run.step_timeout_s=-1"], r"train\.run\.step_timeout_s: must be >= 0"),
    (["train.run.max_restarts=-1"], r"train\.run\.max_restarts: must be >= 0"),
    (VLLM + ["train.hardware.vllm.gpu_memory_utilization=1.5"],
     r"train\.hardware\.vllm\.gpu_memory_utilization: must be in"),
    (VLLM + ["train.hardware.vllm.cpu_kv_cache_gib=0"], r"train\.hardware\.vllm\.cpu_kv_cache_gib: must be > 0"),
    (VLLM + ["train.hardware.vllm.dtype=fp8"], r"train\.hardware\.vllm\.dtype: must be float32, bfloat16"),
    (VLLM + ["train.hardware.vllm.max_loras=0"], r"train\.hardware\.vllm\.max_loras: must be >= 1"),
    (["train.loss.tis_cap=2"],
     r"train\.loss\.tis_cap: corrects for the log-probs of a policy other than the trainer's; it needs "
     r"train\.hardware\.generator: vllm or train\.rollout\.max_staleness >= 1"),
    (VLLM + ["train.loss.tis_cap=0"], r"train\.loss\.tis_cap: must be > 0"),
    (VLLM + ["train.algorithm=madpo", "train.loss.tis_cap=2"],
     r"train\.loss\.tis_cap: madpo learns from a sequence-level DPO"),
    (VLLM + ["train.algorithm=madpo_offline", "train.preference.pairs.pairs_in=missing.jsonl"],
     r"train\.hardware\.generator: madpo_offline learns from a pairs file and samples nothing"),
], ids=["unknown", "second_gpu", "cpus_in_process", "cpus_count", "cpus_syntax", "push_timeout", "step_timeout",
        "max_restarts", "gpu_fraction", "kv_cache", "dtype", "max_loras", "tis_without_vllm",
        "tis_cap", "tis_dpo", "madpo_offline"])
def test_refused_when_the_config_is_loaded(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.mark.skipif(not vllm_installed(), reason="vllm is not installed: the config is refused for that first")
def test_torchrun_ranks_and_sharding_are_accepted_an_indexed_gpu_per_rank_is_not(monkeypatch):
    """One engine per rank (docs/vllm.md): several ranks and FSDP2 load; under torchrun each rank's engines take
    the rank's GPU, so an agent pinned to another GPU is refused."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert load_config(None, VLLM + ["train.hardware.sharding=fsdp"]).train.hardware.sharding == "fsdp"
    with pytest.raises(ConfigError, match=r"train\.hardware\.agent_devices: under torchrun each rank's vLLM "
                                          r"engines run on its own GPU \(cuda:LOCAL_RANK\), got cuda:1"):
        load_config(None, VLLM + ["train.hardware.agent_devices=[cuda:1]", "train.hardware.vllm.in_process=false"])


def test_engine_limits_and_agent_cpus_are_config_keys():
    c = load_config(None, ["train.hardware.vllm.push_timeout_s=30", "train.hardware.vllm.call_timeout_s=0",
                           "train.hardware.vllm.in_process=false", "train.hardware.vllm.agent_cpus=['0-1']",
                           "train.run.step_timeout_s=120", "train.run.step_timeout_factor=5",
                           "train.run.max_restarts=2", "train.run.restart_backoff_s=1"])
    v, r = c.train.hardware.vllm, c.train.run
    assert (v.push_timeout_s, v.call_timeout_s, v.agent_cpus) == (30, 0, ["0-1"])
    assert (r.step_timeout_s, r.step_timeout_factor, r.max_restarts, r.restart_backoff_s) == (120, 5, 2, 1)
    defaults = load_config(None)
    assert defaults.train.hardware.vllm.push_timeout_s == 600 and defaults.train.run.step_timeout_s == 0
    assert defaults.train.run.max_restarts == 0


@pytest.mark.skipif(vllm_installed(), reason="vllm is installed here")
def test_without_vllm_the_error_says_how_to_install_it():
    with pytest.raises(ConfigError, match=r"train\.hardware\.generator: vllm is not installed; GPU: pip install "
                                          r"-e '\.\[vllm\]'.*scripts/install_vllm_cpu\.sh"):
        load_config(None, VLLM)


def test_the_trainer_refuses_before_building_a_model():
    """A config error from Trainer(...) comes before any model is read: agents named by a path that does not
    exist would fail otherwise."""
    env = comarl.FunctionEnv(formatters=[lambda it: "a", lambda it: "b"], reward_fn=lambda r, it: 0.0)
    missing = ["/nonexistent/model", "/nonexistent/model"]
    cfg = comarl.TrainConfig(hardware=comarl.HardwareConfig(generator="vllm", agent_devices=["cuda:1", "cuda:1"]))
    with pytest.raises(ConfigError, match=r"TrainConfig\.hardware\.agent_devices: an in-process vLLM engine runs on"):
        comarl.Trainer(missing, env, [{"x": 1}], cfg)
    with pytest.raises(ConfigError, match=r"TrainConfig\.hardware\.generator: vllm and Trainer\(generator=\.\.\.\) "
                                          r"both choose"):
        comarl.Trainer(missing, env, [{"x": 1}], comarl.TrainConfig(hardware=comarl.HardwareConfig(generator="vllm")),
                       generator=generate_for_agents)
