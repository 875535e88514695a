"""Annotated prompts: a schema and a prefill on one prompt, kept through pickles, plain str when empty."""
import pickle

import pytest

from comarl.core.prefill import prefill_of, with_prefill
from comarl.core.prompt_notes import AnnotatedPrompt, annotate
from comarl.core.schema import Schema, Slot, schema_of, with_schema


def test_schema_and_prefill_compose_in_either_order():
    schema = Schema(('{"a": "', Slot(4), '}'))
    for p in (with_prefill(with_schema("Plan.", schema), '{"a'), with_schema(with_prefill("Plan.", '{"a'), schema)):
        assert p == "Plan." and schema_of(p) is schema and prefill_of(p) == '{"a'


def test_notes_survive_pickling_and_plain_prompts_stay_str():
    schema = Schema(('x', Slot(2)))
    p = pickle.loads(pickle.dumps(with_prefill(with_schema("Go.", schema), "x")))
    assert isinstance(p, AnnotatedPrompt) and p.prefill == "x" and p.schema == schema
    assert type(with_prefill("Go.", "")) is str and type(with_schema("Go.", None)) is str
    assert type(annotate(with_prefill("Go.", "x"), prefill="")) is str  # the last note removed
    assert schema_of("Go.") is None and prefill_of("Go.") == ""
    with pytest.raises(TypeError, match="unknown prompt notes \\['shema'\\]"):
        annotate("Go.", shema=schema)
