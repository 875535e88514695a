"""Shared by the BFCL tests: the 440 parallel questions of ../shared/data/bfcl_v4, loaded once per session."""
import functools

import pytest

from comarl.envs.tools.bfcl import load_parallel

@functools.lru_cache(maxsize=1)
def _load(folder):
    return load_parallel(folder, "all", None)


@pytest.fixture
def items(shared_data):
    out = _load(str(shared_data / "bfcl_v4"))
    assert len(out) == 440
    return out
