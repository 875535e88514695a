"""The three classes of BFCL texts that made scoring raise before #46, each now a score: a format string that raises
(``'%(x)s' % {}``: KeyError), integers past Python's 4,300-digit text limit (``10 ** 4096 * 10 ** 4096``, a long hex
literal, chained powers), and the parser's own MemoryError (``x x x ...``); and, under a 1.5 GB address-space cap,
these and the pathological texts of ``texts.py`` read by both readers in each call format."""
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from comarl.envs.tools.bfcl import build_multiturn_flat, build_parallel

SCHEMAS = [{"name": "f", "parameters": {"type": "dict", "required": ["n"], "properties": {
    "n": {"type": "integer"}, "timezone": {"type": "string"}}}}]
ITEM = {"id": "t0", "category": "parallel", "request": "Call f with n=1.", "function": SCHEMAS,
        "ground_truth": [{"f": {"n": [1], "timezone": ["", "UTC"]}}]}
CRASHES = {
    "format string raising KeyError": ["[f(n=1, timezone='%(x)s' % {})]", "f(n=1, timezone='%(x)s' % {})"],
    "integer past 4,300 digits": ["[f(n=10 ** 4096 * 10 ** 4096)]", "[f(n=0x" + "f" * 5000 + ")]",
                                  "[f(n=2 ** 2 ** 2 ** 2 ** 2)]", "[f(n=9 ** 9 ** 9)]", "[f(n=(10 ** 4000) ** 4000)]",
                                  '[{"function": "f", "parameters": {"n": ' + "9" * 4400 + "}}]"],
    "MemoryError of the parser": ["x " * 3000, "[f(n=1)]\n" + "x " * 3000, "f(n=" + "x " * 3000 + ")"],
}
ENVS = [build_parallel(2, call_format=fmt, scoring=scoring) for fmt in ("python", "python_list", "json", "auto")
        for scoring in ("lenient", "bfcl")] + [build_multiturn_flat(2, scoring="bfcl")]


@pytest.mark.parametrize("kind", sorted(CRASHES))
def test_each_crash_class_is_a_decode_failure(kind):
    for env in ENVS:
        for text in CRASHES[kind]:
            start = time.perf_counter()
            reward, metrics = env.score(ITEM, [text, "[]"])
            assert time.perf_counter() - start < 1.0, (kind, text[:60])
            assert math.isfinite(reward) and metrics["exact_bfcl"] == 0, (kind, text[:60])
            assert metrics["bfcl_decode_fail"] == 0.5, (kind, text[:60])  # the text's agent; "[]" decodes
            if env.scoring == "bfcl":
                assert metrics["exact"] == 0


def test_the_same_calls_without_the_crash_are_exact():
    """The failure is the crashing value's, not the call's: written plainly, the call is the answer."""
    for env in ENVS[:2]:
        assert env.score(ITEM, ["[f(n=1, timezone='UTC')]", "[]"])[1]["exact"] == 1
        assert env.score(ITEM, ["[f(n=1 + 0 * 2 ** 5000)]", "[]"])[1]["exact"] == 1


CAPPED = """
import resource, sys
sys.path[:0] = [{here!r}]
resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
from test_bfcl_crashes import CRASHES, ENVS, ITEM
from texts import ADVERSARIAL
texts = [t for ts in CRASHES.values() for t in ts] + ADVERSARIAL
envs = [e for e in ENVS if e.scoring == "bfcl" and e.name == "bfcl_parallel" and e.call_format != "python_list"]
for env in envs:  # each reads every text both ways (lenient and BFCL's): one per call format
    for text in texts:
        env.score(ITEM, [text, "[]"])
print("scored", len(texts) * len(envs))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS caps the address space on Linux")
def test_bfcl_scores_the_pathological_texts_under_a_memory_cap():
    here = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3]),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(CAPPED.format(here=here))], capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("scored")
