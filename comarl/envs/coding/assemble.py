"""The joint program of a function-level task (HumanEval, MBPP, CoopHumanEval).

Order of the program: imports (prompt's, agents', then any missing standard
ones) / the prompt's context (other functions and constants the prompt
defines, unless an agent defines the same name) / the helper agent's code / the main agent's code.

Per role, definitions are picked from the agent's code: the helper's code
contributes everything except a definition of the entry point; the main
agent's code contributes everything except a definition of the helper (so the
helper agent's ``aux`` is the one used).

With a helper, the sandbox runs each role's code as its own program in its own
process (``helper_program``, ``main_program``: imports, the prompt's context,
that role's code) and the main program calls ``aux`` across (``TestJob.helper``),
so neither agent's code can rebind, trace or swap the other's. ``program`` (the
two joined) is what "the joint program parses" is checked on. Duplicated definitions inside one
response keep only the last (what Python would keep). Top-level statements
other than imports, definitions and assignments (example calls, prints,
``if __name__ == "__main__":`` blocks) are dropped.
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from .extract import Block, extract_code, is_stub, last_def, parses, quiet_parse, split_blocks

_KEEP = ("import", "def", "class", "assign")

# name used but never defined -> import line that defines it
_MODULES = ("math re string collections itertools functools heapq bisect random statistics operator copy "
            "fractions decimal datetime json hashlib sys time cmath array numbers textwrap unicodedata calendar "
            "typing").split()
_FROM = {
    "typing": "List Dict Tuple Set FrozenSet Optional Any Union Callable Iterable Iterator Sequence".split(),
    "collections": "Counter defaultdict deque OrderedDict namedtuple".split(),
    "functools": "reduce lru_cache cmp_to_key".split(),
    "itertools": ("permutations combinations combinations_with_replacement product accumulate groupby chain "
                  "zip_longest").split(),
    "math": "sqrt gcd floor ceil factorial isqrt comb".split(),
    "heapq": "heappush heappop heapify".split(),
    "bisect": "bisect_left bisect_right".split(),
}
_IMPORT_FOR = {m: f"import {m}" for m in _MODULES}
_IMPORT_FOR.update({n: f"from {m} import {n}" for m, names in _FROM.items() for n in names})


def missing_imports(code: str) -> list[str]:
    """Import lines for standard names ``code`` uses but never defines.

    Only names in a fixed table are added (``math``, ``re``, ``List``,
    ``Counter``, ``reduce``...). Returns [] when ``code`` does not parse.
    """
    try:
        tree = quiet_parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return []
    used: set[str] = set()
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return sorted({_IMPORT_FOR[n] for n in used - defined if n in _IMPORT_FOR})


def prompt_context(prompt: str, entry_point: str) -> tuple[list[str], list[Block]]:
    """(import lines, other definition blocks) that a HumanEval-style prompt provides.

    The entry point's own (unfinished) definition is left out. Prompts that do
    not parse contribute only their ``import``/``from`` lines.
    """
    blocks = split_blocks(prompt)
    if blocks and all(b.node is None for b in blocks):
        imports = [l for l in prompt.splitlines() if l.startswith(("import ", "from "))]
        return imports, []
    imports = [b.text for b in blocks if b.kind == "import"]
    others = [b for b in blocks if b.kind in ("def", "class", "assign") and b.name != entry_point]
    return imports, others


def entry_signature(prompt: str, entry_point: str) -> str | None:
    """The prompt's definition of the entry point (signature + docstring)."""
    b = last_def(split_blocks(prompt), entry_point)
    return b.text if b else None


def _role_blocks(code: str, exclude: str | None) -> list[Block]:
    """Blocks an agent contributes: imports/defs/classes/assigns, last definition wins, ``exclude`` dropped."""
    blocks = [b for b in split_blocks(code) if b.kind in _KEEP and not (b.kind == "def" and b.name == exclude)]
    last = {}
    for i, b in enumerate(blocks):
        if b.kind in ("def", "class") and b.name:
            last[(b.kind, b.name)] = i
    return [b for i, b in enumerate(blocks)
            if not (b.kind in ("def", "class") and b.name and last[(b.kind, b.name)] != i)]


def _as_function(code: str, entry_point: str, signature: str | None) -> str:
    """A bare indented body (completion style) becomes the body of the prompt's signature."""
    first = next((l for l in code.splitlines() if l.strip()), "")
    if signature and first[:1] in (" ", "\t") and last_def(split_blocks(code), entry_point) is None:
        return signature.rstrip() + "\n" + code
    return code


@dataclass(frozen=True)
class Assembly:
    """A joint program and what the reward needs to know about it.

    Attributes:
        program: the joint program text (the one the sandbox runs in single mode; its parse is ``compiled``).
        helper_program / main_program: with a helper, each role's own program (the sandbox runs them apart).
        helper_code / main_code: the kept code of each role ("" if none).
        helper_defined: the helper agent defined ``helper_name`` with a body.
        main_defined: the main agent defined the entry point with a body.
        compiled: the program parses; ``syntax_error`` is "line N: msg" otherwise.
        main_node: the parsed entry-point function (None if not parsed).
    """

    program: str
    helper_code: str
    main_code: str
    helper_defined: bool
    main_defined: bool
    compiled: bool
    syntax_error: str | None
    main_node: ast.FunctionDef | None
    helper_program: str = ""
    main_program: str = ""


def assemble(prompt: str, entry_point: str, main_response: str, helper_response: str | None = None,
             helper_name: str = "aux") -> Assembly:
    """Build the joint program from raw responses.

    ``helper_response=None`` is the single-agent mode: one agent writes every
    function, including any helper it wants.
    """
    signature = entry_signature(prompt, entry_point)
    main_raw = _as_function(extract_code(main_response), entry_point, signature)
    exclude_in_main = helper_name if helper_response is not None else None
    main_blocks = _role_blocks(main_raw, exclude_in_main)
    helper_blocks = _role_blocks(extract_code(helper_response), entry_point) if helper_response is not None else []

    main_def = last_def(main_blocks, entry_point)
    helper_def = last_def(helper_blocks, helper_name)
    ctx_imports, ctx_blocks = prompt_context(prompt, entry_point)
    agent_names = {b.name for b in helper_blocks + main_blocks if b.name}
    ctx_defs = [b.text for b in ctx_blocks if b.name not in agent_names]  # an agent's own version wins
    agent_imports = [b.text for b in helper_blocks + main_blocks if b.kind == "import"]
    helper_code = "\n\n".join(b.text for b in helper_blocks if b.kind != "import")
    main_code = "\n\n".join(b.text for b in main_blocks if b.kind != "import")

    def module(code_blocks: list[Block], code: str) -> str:
        names = {b.name for b in code_blocks if b.name}
        defs = [b.text for b in ctx_blocks if b.name not in names]  # an agent's own version wins
        body = "\n\n\n".join(p for p in ["\n\n".join(defs), code] if p.strip())
        imports = list(dict.fromkeys(ctx_imports + [b.text for b in code_blocks if b.kind == "import"]))
        extra = [l for l in missing_imports("\n".join(imports) + "\n\n" + body) if l not in imports]
        return "\n".join(imports + extra) + "\n\n\n" + body + "\n"

    body = "\n\n\n".join(p for p in ["\n\n".join(ctx_defs), helper_code, main_code] if p.strip())
    imports = list(dict.fromkeys(ctx_imports + agent_imports))
    head = "\n".join(imports)
    extra = [l for l in missing_imports(head + "\n\n" + body) if l not in imports]
    program = "\n".join(imports + extra) + "\n\n\n" + body + "\n"
    ok, err = parses(program)
    split = helper_response is not None
    main_node = main_def.node if main_def is not None and isinstance(main_def.node, ast.FunctionDef) else None
    return Assembly(
        program=program,
        helper_code=helper_code,
        main_code=main_code,
        helper_defined=helper_def is not None and not is_stub(helper_def),
        main_defined=main_def is not None and not is_stub(main_def),
        compiled=ok,
        syntax_error=err,
        main_node=main_node,
        helper_program=module(helper_blocks, helper_code) if split else "",
        main_program=module(main_blocks, main_code) if split else "",
    )


# ---- cooperation checks (on the main function's AST) ----

def _body_without_docstring(fn: ast.FunctionDef) -> list[ast.stmt]:
    body = list(fn.body)
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    return body


def _is_call_to(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def calls_helper(fn: ast.FunctionDef | None, helper_name: str = "aux") -> bool:
    """The function calls ``helper_name(...)`` somewhere in its body."""
    return fn is not None and any(_is_call_to(n, helper_name) for n in ast.walk(fn))


def is_thin_wrapper(fn: ast.FunctionDef | None, helper_name: str = "aux") -> bool:
    """The body (docstring aside) is only ``return aux(...)``, or ``x = aux(...)`` then ``return x``."""
    if fn is None:
        return False
    body = _body_without_docstring(fn)
    if len(body) == 1:
        return isinstance(body[0], ast.Return) and _is_call_to(body[0].value, helper_name)
    if len(body) == 2:
        a, r = body
        return (isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
                and _is_call_to(a.value, helper_name) and isinstance(r, ast.Return)
                and isinstance(r.value, ast.Name) and r.value.id == a.targets[0].id)
    return False


def ignores_helper_result(fn: ast.FunctionDef | None, helper_name: str = "aux") -> bool:
    """Some call ``aux(...)`` stands alone as a statement, its result thrown away."""
    return fn is not None and any(isinstance(n, ast.Expr) and _is_call_to(n.value, helper_name) for n in ast.walk(fn))
