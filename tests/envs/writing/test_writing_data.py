"""Writing loaders: local JSON/JSONL through datasets.load_dataset, hub ids offline, the demo set."""
import json
import os
from pathlib import Path

import pytest

from comarl.envs.writing import arxiv, tldr

ROOT = str(Path(__file__).resolve().parents[3])
TLDR = os.path.join(ROOT, "tests", "data", "writing", "tldr_sample.jsonl")
ARXIV = os.path.join(ROOT, "tests", "data", "writing", "arxiv_sample.jsonl")


def test_tldr_local_file():
    items = tldr.load_items(TLDR, "train", None)
    assert len(items) == 12
    first = items[0]
    assert first["prompt"].startswith("SUBREDDIT: r/relationships\nTITLE: ") and first["prompt"].endswith("TL;DR:")
    assert first["text"].endswith("without starting a fight?") and "TL;DR:" not in first["text"]
    assert first["completion"] == ("Boyfriend keeps forgetting our plans because of work stress; "
                                   "how do I raise it without a fight?")


def test_limit_and_split_slice():
    assert len(tldr.load_items(TLDR, "test", 4)) == 4
    sliced = tldr.load_items(TLDR, "train[2:5]", None)
    assert [it["prompt"].split("\n")[0] for it in sliced] == ["SUBREDDIT: r/cooking", "SUBREDDIT: r/AskReddit",
                                                             "SUBREDDIT: r/dogs"]
    with pytest.raises(ValueError, match="data.limit"):
        tldr.load_items(TLDR, "train", -1)


def test_folder_source_reads_split_file(tmp_path):
    (tmp_path / "test.jsonl").write_text(json.dumps({"prompt": "POST: hi there\nTL;DR:", "completion": "hi"}) + "\n")
    (items,) = tldr.load_items(str(tmp_path), "test", None)
    assert items["text"] == "POST: hi there"
    with pytest.raises(FileNotFoundError, match="without train.jsonl or train.json"):
        tldr.load_items(str(tmp_path), "train", None)


def test_json_array_file(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"abstract_text": "Plain text abstract."}, {"abstract": "Another one."}]))
    items = arxiv.load_items(str(path), None, None)
    assert [it["text"] for it in items] == ["Plain text abstract.", "Another one."]


def test_bad_rows_name_the_row(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "POST: a\nTL;DR:"}) + "\n" + json.dumps({"title": "no prompt"}) + "\n")
    with pytest.raises(ValueError, match=r"row 1 has no text field 'prompt'"):
        tldr.load_items(str(path), "train", None)
    path.write_text(json.dumps({"abstract_text": 3}) + "\n")
    with pytest.raises(ValueError, match=r"row 0 needs 'abstract_text'"):
        arxiv.load_items(str(path), "train", None)


def test_missing_path():
    with pytest.raises(FileNotFoundError, match="no such file"):
        tldr.load_items("tests/data/writing/nope.jsonl", "train", None)


def test_arxiv_sentences_joined_and_tags_removed():
    items = arxiv.load_items(ARXIV, "train", None)
    assert len(items) == 8 and items[0]["article_id"] == "sample-000"
    assert items[0]["text"].startswith("We study how teams of small language models can share a writing task. "
                                       "Each model")
    assert items[4]["text"].startswith("robots that operate in homes must grasp objects")
    assert "<S>" not in items[4]["text"] and "</S>" not in items[4]["text"]
    assert items[0]["abstract"] == items[0]["text"]


def test_hub_source_fails_offline_with_a_clear_message(monkeypatch):
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(RuntimeError, match=r"could not load hub dataset 'trl-lib/tldr' split 'test'.*local JSON/JSONL"):
        tldr.load_items(None, "test", 2)
    with pytest.raises(RuntimeError, match=r"'OpenMLRL/arXiv_abstract'"):
        arxiv.load_items(None, None, 2)


def test_demo_items():
    items = tldr.demo_items()
    assert len(items) == 24
    assert all(it["text"].startswith("SUBREDDIT: r/") and "POST: " in it["text"] and it["completion"] for it in items)
    env = tldr.build(2)
    assert len(env.reset(items[0]).prompts) == 2
