"""Config values mean what the user typed: YAML 1.2 values in files and in ``key=value`` overrides, and a ``str``
field takes the text as written (issue #33). PyYAML alone reads YAML 1.1: ``[4:8]`` became ``[248]`` (base 60),
``no``/``on`` booleans, ``2026-01-01`` a date, and ``1e-3`` a string."""
import datetime
from pathlib import Path

import pytest
import yaml

from comarl.config import ExperimentConfig, load_config
from comarl.core.config_io import ConfigError, Written, from_dict, load_yaml, parse_value, read_yaml, to_dict

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs/demo/writing.yaml"
CONFIGS = sorted(ROOT.glob("configs/**/*.yaml"))


def test_override_slice_text_is_a_string_not_base_60():
    cfg = load_config(DEMO, ["data.eval.split=[4:8]"])
    assert cfg.data.eval.split == "[4:8]"  # YAML 1.1: [248] and "expected a string"


def test_clock_times_dates_and_yes_no_words_stay_text():
    cfg = load_config(DEMO, ["agents.0.name=12:30", "env.args.at=12:30", "env.args.day=2026-01-01",
                             "env.args.answer=no", "env.args.light=on", "train.hardware.mixed_precision=no"])
    assert cfg.agents[0].name == "12:30"  # YAML 1.1: 750
    assert cfg.env.args == {"at": "12:30", "day": "2026-01-01", "answer": "no", "light": "on"}
    assert cfg.train.hardware.mixed_precision == "no"  # YAML 1.1: False, "expected a string"


def test_yaml_file_reads_1e_minus_3_as_a_number_and_no_as_text(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("agents: [{model: tiny, name: 007}]\n"
                 "env: {name: demo_writing, args: {lr: 1e-3, big: 1E+3, day: 2026-01-01, t: 12:30, octal: 010}}\n"
                 "data: {eval: {split: 12:30}}\n"
                 "train: {hardware: {mixed_precision: no}, rollout: {num_generations: 2}}\n")
    cfg = load_config(f)
    assert cfg.env.args == {"lr": 0.001, "big": 1000.0, "day": "2026-01-01", "t": "12:30", "octal": 10}
    assert type(cfg.env.args["lr"]) is float  # YAML 1.1: the string "1e-3"
    assert cfg.agents[0].name == "007"  # a str field: the text as written, not 7
    assert cfg.data.eval.split == "12:30"
    assert cfg.train.hardware.mixed_precision == "no"


def test_core_schema_values():
    got = load_yaml("a: 0x1f\nb: 0o17\nc: 010\nd: .5\ne: -.inf\nf: 1_000\ng: ~\nh: TRUE\ni: yes\nj: 1.\n"
                    "k: +12\nl: 2001-12-14t21:59:43.10-05:00\nm: '1'\n")
    assert got["a"] == 31 and got["b"] == 15 and got["c"] == 10 and got["d"] == 0.5
    assert got["e"] == float("-inf") and got["f"] == "1_000" and got["g"] is None and got["h"] is True
    assert got["i"] == "yes" and got["j"] == 1.0 and got["k"] == 12 and got["m"] == "1"
    assert got["l"] == "2001-12-14t21:59:43.10-05:00" and not isinstance(got["l"], datetime.date)


def test_typed_fields_still_get_typed_values():
    cfg = load_config(DEMO, ["train.run.max_steps=0x10", "agents.*.lr=1e-5", "train.run.shuffle=false",
                             "train.run.resume=null", "agents.1.name='a b'", "train.run.report_to=[jsonl]",
                             "train.hardware.agent_devices=[cuda:0, cuda:1]", "agents.0.betas=[0.9, 0.95]",
                             "train.run.save_steps=1_000", "data.allow_overlap=yes"])
    t = cfg.train
    assert t.run.max_steps == 16 and t.run.shuffle is False and t.run.resume is None and t.run.save_steps == 1000
    assert [a.lr for a in cfg.agents] == [1e-5, 1e-5] and cfg.agents[1].name == "a b"
    assert t.run.report_to == ["jsonl"] and t.hardware.agent_devices == ["cuda:0", "cuda:1"]
    assert cfg.agents[0].betas == (0.9, 0.95) and cfg.data.allow_overlap is True


def test_list_of_str_takes_each_element_as_written():
    cfg = load_config(DEMO, ["agents.0.lora.target_modules=[q_proj, 1, 2e3]"])
    assert cfg.agents[0].lora.target_modules == ["q_proj", "1", "2e3"]


def test_a_list_set_by_an_override_can_be_indexed_by_a_later_one():
    cfg = load_config(DEMO, ["train.hardware.agent_devices=[cpu, cpu]", "train.hardware.agent_devices.1=meta"])
    assert cfg.train.hardware.agent_devices == ["cpu", "meta"]


def test_bad_values_still_name_the_key():
    with pytest.raises(ConfigError, match=r"train\.run\.max_steps: expected an integer, got 'ten'"):
        load_config(DEMO, ["train.run.max_steps=ten"])
    with pytest.raises(ConfigError, match=r"train\.run\.max_steps: expected an integer, got 1000\.0"):
        load_config(DEMO, ["train.run.max_steps=1e3"])
    with pytest.raises(ConfigError, match=r"train\.run\.shuffle: expected true/false, got 'maybe'"):
        load_config(DEMO, ["train.run.shuffle=maybe"])
    with pytest.raises(ConfigError, match=r"agents\.0\.model_kwargs: expected a mapping, got 5"):
        load_config(DEMO, ["agents.0.model_kwargs=5"])


def test_no_wrapper_leaks_into_the_resolved_config():
    cfg = load_config(DEMO, ["env.args.k=[1, {a: 2.5, b: true}]", "agents.0.model_kwargs.seed=7"])
    assert cfg.env.args == {"k": [1, {"a": 2.5, "b": True}]}
    assert type(cfg.env.args["k"][0]) is int and type(cfg.agents[0].model_kwargs["seed"]) is int
    yaml.safe_dump(to_dict(cfg))  # a Written left anywhere would not be representable


def test_parse_value_keeps_the_typed_text():
    assert parse_value(" [4:8] ") == Written(["4:8"], "[4:8]")
    assert parse_value("12:30") == "12:30" and parse_value("") is None
    assert parse_value("'x: y'") == "x: y" and parse_value("{bad") == "{bad"


def _old_reading(path: Path) -> dict:
    """What a config resolved to before issue #33: PyYAML's YAML 1.1 values, filled into the dataclasses."""
    return to_dict(from_dict(ExperimentConfig, yaml.safe_load(path.read_text(encoding="utf-8"))))


# config -> dotted keys that YAML 1.1 misread (the bugs this change fixes); none of configs/ has one today
MISREAD_BY_YAML_11: dict[str, set[str]] = {}


def _flat(d, prefix=""):
    if isinstance(d, dict):
        return {k: v for key, sub in d.items() for k, v in _flat(sub, f"{prefix}{key}.").items()}
    if isinstance(d, list):
        return {k: v for i, sub in enumerate(d) for k, v in _flat(sub, f"{prefix}{i}.").items()}
    return {prefix[:-1]: (type(d).__name__, d)}


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(ROOT / "configs")) for p in CONFIGS])
def test_every_config_resolves_as_before(path):
    new = _flat(to_dict(from_dict(ExperimentConfig, read_yaml(path))))
    old = _flat(_old_reading(path))
    skip = MISREAD_BY_YAML_11.get(str(path.relative_to(ROOT)), set())
    assert {k: v for k, v in new.items() if k not in skip} == {k: v for k, v in old.items() if k not in skip}
    load_config(path)  # and it still validates
