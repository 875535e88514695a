"""Shared by the BFCL tests: the 440 parallel questions of ../shared/data/bfcl_v4, loaded once per session, and
bfcl-eval's own decoding and checking (``bfcl``)."""
import functools
import importlib
import importlib.util
import sys
import types
import warnings
from collections import defaultdict

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


BFCL_VERSION = "2026.3.23"  # the bfcl-eval release compared with (the Makefile installs it)


def _stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


@pytest.fixture(scope="session")
def bfcl():
    """bfcl-eval's decoding and checking, imported without the packages ``--no-deps`` leaves out:
    stand-ins for the Java/JavaScript parsers (tree-sitter), ``tenacity`` (retries of API calls) and the
    model registry (no model renames '.' to '_'); none of them is on the Python AST path."""
    pytest.importorskip("bfcl_eval", reason=f"pip install --no-deps bfcl-eval=={BFCL_VERSION} (the Makefile does)")
    noop = lambda *a, **k: None  # noqa: E731
    stubs = {
        "bfcl_eval.model_handler.parser.java_parser": _stub("java_parser", parse_java_function_call=noop),
        "bfcl_eval.model_handler.parser.js_parser": _stub("js_parser", parse_javascript_function_call=noop),
        "bfcl_eval.constants.model_config": _stub("model_config", MODEL_CONFIG_MAPPING=defaultdict(
            lambda: types.SimpleNamespace(underscore_to_dot=False))),
    }
    if importlib.util.find_spec("tenacity") is None:
        stubs["tenacity"] = _stub("tenacity", retry=noop, retry_if_exception_message=noop,
                                  retry_if_exception_type=noop, wait_random_exponential=noop)
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        utils = importlib.import_module("bfcl_eval.model_handler.utils")
        checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
        fmt_ok = importlib.import_module("bfcl_eval.utils").is_function_calling_format_output
        enums = importlib.import_module("bfcl_eval.constants.enums")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def decode(text, fmt="python"):
        """What BFCL's runner hands its checker, or None where it reports a decoder failure. The first
        line is the Qwen prompting handler's reading of a response (``_parse_query_response_prompting``,
        not importable without vLLM's client): the text after the last ``</think>``."""
        text = text.split("</think>")[-1].lstrip("\n") if "</think>" in text else text
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)  # eval of "1 is 1", "1[0]"...
                out = utils.default_decode_ast_prompting(text, getattr(enums.ReturnFormat, fmt.upper()))
        except Exception:
            return None
        return out if fmt_ok(out) else None

    def exact(item, text, fmt="python"):
        decoded = decode(text, fmt)
        return decoded is not None and checker.ast_checker(
            item["function"], decoded, item["ground_truth"], enums.Language.PYTHON, item["category"], "test")["valid"]

    return types.SimpleNamespace(decode=decode, exact=exact, module_names=frozenset(vars(utils)))
