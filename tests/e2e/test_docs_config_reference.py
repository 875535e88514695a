"""The Configuration reference (docs/gen_config_reference.py) lists exactly the keys the dataclasses have.

The generator is checked on small fake configs (nested, list, optional and dict sections, fields without a
docstring or default, init=False fields), then on comarl's own ExperimentConfig against an independent
walk of its dataclasses and a regex reading of their source. The pages written for the site that name
config keys are checked against the same list, so a renamed key cannot linger in them.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from comarl.config import ExperimentConfig

ROOT = Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", ROOT / "docs" / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


# ---------------------------------------------------------------- a small fake config


@dataclass
class FakeLeaf:
    """A section's own docstring."""

    rate: float = 0.5
    """How fast | how often."""
    tags: list[str] = field(default_factory=lambda: ["a", "b"])
    """Labels."""


@dataclass
class FakeAgent:
    model: str
    """Required: no default."""
    leaf: Optional[FakeLeaf] = None
    """An optional section."""
    undocumented: int = 3
    cache: dict = field(default_factory=dict, init=False)
    """Not a config key (init=False)."""


@dataclass
class FakeRoot:
    agents: list[FakeAgent] = field(default_factory=lambda: [FakeAgent("m")])
    """The team."""
    named: dict[str, FakeLeaf] = field(default_factory=dict)
    """Sections by name."""
    leaf: FakeLeaf = field(default_factory=FakeLeaf)
    flag: bool = True
    """On or off; see ``other.key`` and *this*."""


def test_docstrings_are_the_string_after_each_field():
    docs = gen.field_docs(FakeAgent)
    assert docs == {"model": "Required: no default.", "leaf": "An optional section.",
                    "cache": "Not a config key (init=False)."}


def test_walk_reaches_list_dict_optional_and_nested_sections():
    sections = {s.path: s for s in gen.walk(FakeRoot)}
    assert list(sections) == ["", "agents.<i>", "agents.<i>.leaf", "named.<name>", "leaf"]
    keys = {k.path: k for s in sections.values() for k in s.keys}
    assert list(keys) == ["flag", "agents.<i>.model", "agents.<i>.undocumented", "agents.<i>.leaf.rate",
                          "agents.<i>.leaf.tags", "named.<name>.rate", "named.<name>.tags", "leaf.rate", "leaf.tags"]
    assert keys["agents.<i>.model"] == gen.Key("agents.<i>.model", "str", "required", "Required: no default.")
    assert keys["agents.<i>.undocumented"].doc == ""
    assert keys["leaf.tags"] == gen.Key("leaf.tags", "list[str]", '["a", "b"]', "Labels.")
    assert keys["flag"].default == "true"
    assert sections["agents.<i>.leaf"].type == "Optional[FakeLeaf]"
    assert sections["agents.<i>.leaf"].default == "null"
    assert sections["agents.<i>"].default == "1 x FakeAgent()"
    assert sections["agents.<i>"].doc == "The team."


def test_defaults_are_written_as_yaml_writes_them():
    assert [gen.format_default(v) for v in (None, False, 1e-5, "x", (0.9, 0.999), {})] == \
        ["null", "false", "1e-05", '"x"', "[0.9, 0.999]", "{}"]


def test_page_escapes_table_breaking_text_and_keeps_code():
    page = gen.render(FakeRoot)
    assert "How fast \\| how often." in page
    assert "see `other.key` and \\*this\\*." in page
    row = next(line for line in page.splitlines() if "`agents.<i>.leaf.rate`" in line)
    assert row.count(" | ") == 3  # four cells: key, type, default, description
    assert '<span id="agents.i.leaf.rate"></span>' in row


def test_a_recursive_dataclass_ends():
    @dataclass
    class Node:
        value: int = 0
        """A value."""
        child: Optional["Node"] = None
        """The next node."""

    Node.__annotations__["child"] = Optional[Node]  # local class: resolve the forward reference by hand
    keys = [k.path for k in gen.all_keys(Node)]
    assert keys == ["value", "child"]


# ---------------------------------------------------------------- comarl's ExperimentConfig


def _dataclass_of(hint):
    """(dataclass, how) for a field's type: '' direct, 'list' items, 'dict' values; (None, '') otherwise."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint, ""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _dataclass_of(inner[0]) if len(inner) == 1 else (None, "")
    if origin is list and args:
        return (_dataclass_of(args[0])[0], "list") if _dataclass_of(args[0])[0] else (None, "")
    if origin is dict and len(args) == 2:
        return (_dataclass_of(args[1])[0], "dict") if _dataclass_of(args[1])[0] else (None, "")
    return None, ""


def expected_keys(cls, prefix=""):
    """Key path -> (class, field name) for every leaf key, walking the dataclasses with get_type_hints."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        inner, how = _dataclass_of(hints[f.name])
        if inner is None:
            out[path] = (cls, f.name)
        else:
            out.update(expected_keys(inner, {"list": f"{path}.<i>", "dict": f"{path}.<name>"}.get(how, path)))
    return out


def source_doc(cls, name):
    """The docstring after field ``name``, read with a regex from the class source (not with ast)."""
    for klass in cls.__mro__:
        if not dataclasses.is_dataclass(klass):
            continue
        m = re.search(rf'^\s+{name}\s*:[^\n]*\n\s+"""(.*?)"""', inspect.getsource(klass), re.M | re.S)
        if m:
            return inspect.cleandoc(m.group(1))
    return None


def test_reference_lists_every_key_of_experiment_config():
    listed = {k.path: k for k in gen.all_keys(ExperimentConfig)}
    expected = expected_keys(ExperimentConfig)
    assert sorted(listed) == sorted(expected), (
        f"missing: {sorted(set(expected) - set(listed))}, extra: {sorted(set(listed) - set(expected))}")
    for path, (cls, name) in expected.items():
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        if f.default is not dataclasses.MISSING:
            assert listed[path].default == gen.format_default(f.default), path
        assert listed[path].doc == (source_doc(cls, name) or ""), path


def test_every_config_key_has_a_docstring():
    missing = [k.path for k in gen.all_keys(ExperimentConfig) if not k.doc]
    assert not missing, f"config fields without a docstring line (the reference shows them blank): {missing}"


def test_stable_keys_read_as_in_the_source():
    keys = {k.path: k for k in gen.all_keys(ExperimentConfig)}
    assert (keys["train.algorithm"].type, keys["train.algorithm"].default) == ("str", '"magrpo"')
    assert keys["train.algorithm"].doc.startswith("Algorithm name")
    assert keys["env.name"].default == '"demo_writing"'
    assert keys["agents.<i>.model"].default == '"tiny"'
    page = gen.render()
    assert "| <span id=\"train.algorithm\"></span>`train.algorithm` | `str` | `\"magrpo\"` |" in page


# ---------------------------------------------------------------- key names in the site's own pages

OWN_PAGES = ["README.md", "docs/quickstart.md", "docs/concepts.md", "docs/algorithm_families.md",
             "docs/environments.md", "docs/scaling.md", "docs/runs.md", "docs/logs.md", "docs/install.md",
             "docs/faq.md", "docs/changelog.md", "docs/gallery.md"]
KEY_MENTION = re.compile(r"\b((?:agents\.(?:<i>|\*|\d+)|env|data|train)(?:\.[a-z_]+)+)(?![\w(])")  # not env.reset(
# keys the pages misspell on purpose, to show the error a misspelling gets (docs/runs.md, docs/quickstart.md)
MISSPELT_ON_PURPOSE = {"train.num_generation", "train.rollout.batch_size"}


def test_config_keys_named_in_the_site_pages_exist():
    sections = gen.walk(ExperimentConfig)
    known = {s.path for s in sections} | {k.path for s in sections for k in s.keys}  # old spellings are not
    free = {k.path for s in sections for k in s.keys if k.type.startswith("dict")}  # env.args.<anything>
    unknown = []
    for page in OWN_PAGES:  # a page that explains the old keys marks them (tests/unit/test_one_spelling.py)
        text = re.sub(r"<!-- old keys[^>]*-->.*?<!-- /old keys -->", "", (ROOT / page).read_text(), flags=re.S)
        for m in KEY_MENTION.finditer(text):
            key = re.sub(r"^agents\.(\*|\d+)", "agents.<i>", m.group(1))
            if key not in known | MISSPELT_ON_PURPOSE and not any(key.startswith(d + ".") for d in free):
                unknown.append(f"{page}: {m.group(1)}")
    assert not unknown, f"pages name config keys that do not exist: {unknown}"


@pytest.mark.parametrize("text, key", [("train.rollout.num_generations=8", "train.rollout.num_generations"),
                                       ("`agents.*.lr=1e-5`", "agents.*.lr"),
                                       ("agents.0.temperature", "agents.0.temperature"),
                                       ("env.step_batch(states)", None)])
def test_key_mentions_are_found(text, key):
    m = KEY_MENTION.search(text)
    assert (m.group(1) if m else None) == key
