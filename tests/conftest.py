import os
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# tiny models gain nothing from a second thread, and two threads thrash when the cores are shared
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(TESTS))  # tests in subfolders import toy_tasks from here


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA
