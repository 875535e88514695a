"""Code extraction and joint-program assembly (pure, no sandbox)."""
from comarl.envs.coding.assemble import (assemble, calls_helper, ignores_helper_result, is_thin_wrapper,
                                         missing_imports, prompt_context)
from comarl.envs.coding.class_merge import merge_class, parse_agent_code, split_methods
from comarl.envs.coding.extract import extract_code, parses, split_blocks
from comarl.envs.coding.testcases import check_snippets

PROMPT = 'from typing import List\n\n\ndef add_all(xs: List[int]) -> int:\n    """Sum of xs."""\n'


def test_extract_fenced_with_chatter():
    text = ("Sure! Here is the helper:\n```python\ndef aux(x):\n    return x + 1\n```\n"
            "This adds one.\n```text\nnot code\n```")
    assert extract_code(text) == "def aux(x):\n    return x + 1"


def test_extract_unterminated_fence_and_several_blocks():
    text = "```py\ndef a():\n    return 1\n```\nand\n```\ndef b():\n    return 2"
    assert extract_code(text) == "def a():\n    return 1\n\ndef b():\n    return 2"


def test_extract_unfenced_prose_before_between_after():
    text = ("Here is my solution:\ndef aux(x):\n    return x * 2\nNow the main part.\n"
            "def f(x):\n    return aux(x)\nExplanation\nThis doubles x.")
    assert extract_code(text) == "def aux(x):\n    return x * 2\ndef f(x):\n    return aux(x)"


def test_extract_keeps_docstring_text_at_column_zero():
    code = "def f(x):\n    '''Doc.\nFor example:\n>>> f(1)\n1\n'''\n    return x\nThat is all."
    assert extract_code(code) == "def f(x):\n    '''Doc.\nFor example:\n>>> f(1)\n1\n'''\n    return x"


def test_split_blocks_unparseable_code_keeps_the_error_in_its_block():
    blocks = split_blocks("import math\n\ndef aux(x):\n    return x +\n\ndef f(x):\n    return aux(x)\n")
    assert [(b.kind, b.name) for b in blocks] == [("import", None), ("def", "aux"), ("def", "f")]
    assert blocks[1].node is None and "return x +" in blocks[1].text


def test_parses_reports_line_and_message():
    ok, err = parses("x = 1\ndef f(:\n    pass\n")
    assert not ok and err.startswith("line 2:")


def test_assemble_helper_main_picks_definitions_per_role():
    helper = ("```python\ndef aux(xs):\n    return sum(xs)\n\n"
              "def add_all(xs):\n    return 0  # helper also wrote main\n```")
    main = ("def aux(xs):\n    return -1  # main redefined aux\n\n"
            "def add_all(xs: List[int]) -> int:\n    total = aux(xs)\n    return total\n\nprint(add_all([1]))")
    a = assemble(PROMPT, "add_all", main, helper)
    assert a.helper_defined and a.main_defined and a.compiled
    assert "return -1" not in a.program and "return 0" not in a.program and "print(" not in a.program
    assert a.program.startswith("from typing import List\n")
    assert a.program.index("def aux") < a.program.index("def add_all")
    ns = {}
    exec(a.program, ns)
    assert ns["add_all"]([1, 2, 3]) == 6


def test_assemble_duplicate_definition_keeps_last_and_adds_missing_import():
    main = "def add_all(xs):\n    return 0\n\ndef add_all(xs):\n    return math.floor(sum(xs))\n"
    a = assemble(PROMPT, "add_all", main, None)
    assert a.program.count("def add_all") == 1 and "import math" in a.program
    ns = {}
    exec(a.program, ns)
    assert ns["add_all"]([1, 2]) == 3


def test_assemble_body_only_completion_gets_the_prompt_signature():
    a = assemble(PROMPT, "add_all", "    return sum(xs)\n", None)
    assert a.main_defined and a.compiled
    ns = {}
    exec(a.program, ns)
    assert ns["add_all"]([4, 5]) == 9


def test_assemble_stub_and_missing_main_and_syntax_error():
    assert not assemble(PROMPT, "add_all", "def add_all(xs):\n    pass\n", None).main_defined
    assert not assemble(PROMPT, "add_all", "def other(xs):\n    return 1\n", None).main_defined
    a = assemble(PROMPT, "add_all", "def add_all(xs):\n    return sum(xs\n", "def aux():\n    return 1\n")
    assert a.main_defined and a.helper_defined and not a.compiled and a.syntax_error.startswith("line ")


def test_prompt_context_keeps_other_functions_not_entry():
    prompt = "import math\n\ndef poly(xs, x):\n    return 1\n\ndef find_zero(xs):\n    '''doc'''\n"
    imports, others = prompt_context(prompt, "find_zero")
    assert imports == ["import math"] and [b.name for b in others] == ["poly"]
    assert "def poly" in assemble(prompt, "find_zero", "def find_zero(xs):\n    return poly(xs, 0)\n").program


def test_missing_imports_table():
    code = "def f(xs: List[int]):\n    return Counter(xs), math.pi, re.sub('a', 'b', 'a')\n"
    assert missing_imports(code) == ["from collections import Counter", "from typing import List", "import math",
                                     "import re"]
    assert missing_imports("import math\nx = math.pi\n") == []


def _main(code):
    return assemble(PROMPT, "add_all", code, "def aux(x):\n    return x\n").main_node


def test_cooperation_checks():
    wrapper = _main("def add_all(xs):\n    '''d'''\n    return aux(xs)\n")
    wrapper2 = _main("def add_all(xs):\n    r = aux(xs)\n    return r\n")
    real = _main("def add_all(xs):\n    s = aux(xs)\n    return sum(s) + 1\n")
    ignored = _main("def add_all(xs):\n    aux(xs)\n    return sum(xs)\n")
    none = _main("def add_all(xs):\n    return sum(xs)\n")
    assert is_thin_wrapper(wrapper) and is_thin_wrapper(wrapper2) and not is_thin_wrapper(real)
    assert calls_helper(real) and calls_helper(ignored) and not calls_helper(none)
    assert ignores_helper_result(ignored) and not ignores_helper_result(real)


def test_check_snippets_split_asserts_and_fallback():
    test = "M = 1\n\ndef check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3, 'msg'\n"
    snips = check_snippets(test, "inc")
    assert len(snips) == 2 and "candidate = inc" in snips[0] and snips[1].rstrip().endswith("'msg'")
    ns = {"inc": lambda x: x + 1}
    for s in snips:
        exec(s, ns)
    loop = "def check(candidate):\n    for i in range(3):\n        assert candidate(i) == i + 1\n"
    assert check_snippets(loop, "inc") == [loop + "\ncheck(inc)\n"]


def test_split_methods_rules():
    ms = ["a", "b", "c", "d", "e"]
    assert split_methods(ms, 2, "alternate") == [["a", "c", "e"], ["b", "d"]]
    assert split_methods(ms, 2, "halves") == [["a", "b", "c"], ["d", "e"]]
    assert split_methods(ms, 3, "halves") == [["a", "b"], ["c", "d"], ["e"]]


ITEM = {"methods": ["inc", "dec"], "class_name": "C", "import_statement": ["import math"],
        "class_constructor": "class C: \n    def __init__(self):\n        self.v = 0\n\n",
        "class_description": '    """A counter."""\n'}


def test_merge_class_assigned_first_overlap_and_stub():
    a0 = "```python\nclass C:\n    def inc(self):\n        self.v += 1\n        return self.v\n```"
    a1 = "def inc(self):\n    self.v += 10\n    return self.v\n\ndef helper(x):\n    return x\n"
    m = merge_class(ITEM, [a0, a1], [["inc"], ["dec"]])
    assert m.compiled and m.written == (("inc",), ("inc",)) and m.overlap == ("inc",)
    assert m.method_share == 0.5
    ns = {}
    exec(m.program, ns)
    c = ns["C"]()
    assert c.inc() == 1  # agent 0 owns inc
    assert ns["helper"](3) == 3
    try:
        c.dec()
        raise AssertionError("stub should raise")
    except NotImplementedError:
        pass


def test_parse_agent_code_methods_from_class_and_top_level():
    code = parse_agent_code("import re\nclass C:\n    def a(self):\n        return 1\ndef b(self, x):\n    return x\n")
    assert sorted(code.methods) == ["a", "b"] and code.imports == ["import re"] and code.helpers == []
