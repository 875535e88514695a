"""From a model's free text to Python code, and from code to named blocks.

``extract_code`` strips markdown fences and chatter; ``split_blocks`` cuts code
into top-level blocks (imports, function/class definitions, assignments,
other statements) so that an assembler can pick, per role, the definitions it
wants. Both work on code that does not parse: blocks then come from
indentation, and a syntax error stays inside its block so that the joint
program still reports it.
"""
from __future__ import annotations

import ast
import re
import textwrap
import warnings
from dataclasses import dataclass

_CODE_LANGS = {"", "python", "py", "python3", "py3"}
_CODE_START = re.compile(
    r"^(?:(?:def|class|async|import|from|if|elif|else|for|while|with|try|except|finally|return|raise|assert|"
    r"global|nonlocal|pass|del|yield)\b|@|#|print\()")
_CONTINUES = ("(", "[", "{", ",", "\\", "=", "+", "-", "*", "/", "and", "or")


def quiet_parse(code: str) -> ast.Module:
    """``ast.parse`` without SyntaxWarning/DeprecationWarning noise (model code often has bad escapes).

    Whatever the parser refuses raises SyntaxError, so that one ``except SyntaxError`` covers model text:
    a null byte (ValueError), nesting past the recursion limit (RecursionError), and CPython's parser
    running out of memory on some plain inputs (MemoryError on ~2,000 bare names in a row, ``x x x ...``).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(code)
        except (ValueError, RecursionError, MemoryError) as e:
            raise SyntaxError(f"{type(e).__name__}: {e}") from None


def fences(text: str) -> list[tuple[str, str]]:
    """``(language tag, body)`` of each markdown fence: three backticks, optional spaces or tabs, the tag
    (letters, digits, ``_+.-``), the rest of that line, then the body up to the next three backticks or the
    end of the text. One pass with ``str.find``: the regex it replaces
    (``r"```[ \\t]*([\\w+.-]*)[^\\n]*\\n(.*?)(?:```|\\Z)"``, same matches) backtracked quadratically on rows
    of backticks.

    ``fences("a\n```py3 x\nf()\n```") == [("py3", "f()\n")]``.
    """
    out, pos = [], 0
    while (start := text.find("```", pos)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:
            break
        info = text[start + 3:newline].lstrip(" \t")
        n = next((i for i, c in enumerate(info) if not (c.isalnum() or c in "_+.-")), len(info))  # \w is isalnum or _
        end = text.find("```", newline + 1)
        out.append((info[:n], text[newline + 1:] if end < 0 else text[newline + 1:end]))
        if end < 0:
            break
        pos = end + 3
    return out


def _is_code_line(line: str) -> bool:
    """A column-0 line outside any string: code or prose?"""
    s = line.strip()
    if _CODE_START.match(s):
        return True
    if s.endswith(_CONTINUES):
        return True
    try:
        tree = quiet_parse(s)
    except SyntaxError:
        return False
    # a lone word ("Output", "Explanation") or a lone literal is prose, not code
    if (len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr)
            and isinstance(tree.body[0].value, (ast.Name, ast.Constant))):
        return False
    return True


def _strip_prose(text: str) -> str:
    """Drop column-0 prose lines (outside triple-quoted strings); code that parses is kept whole."""
    if parses(text)[0]:
        return text.strip("\n")
    out, in_string = [], False
    for line in text.splitlines():
        quotes = line.count('"""') + line.count("'''")
        if in_string or not line.strip() or line[:1] in (" ", "\t") or quotes % 2 or _is_code_line(line):
            out.append(line)
        if quotes % 2:
            in_string = not in_string
    return "\n".join(out).strip("\n")


def extract_code(text: str) -> str:
    """The Python code in a model response.

    Rules: if the text has markdown fences, the code is the concatenation of
    the fenced blocks tagged python/py or untagged (an unterminated last fence,
    i.e. a truncated answer, runs to the end). Otherwise prose lines at column
    0 (before, between or after code, outside triple-quoted strings) are
    dropped, unless the text parses as it is. Indented lines are kept as they are.
    """
    text = text.replace("\r\n", "\n")
    blocks = [(lang.lower(), body) for lang, body in fences(text)]
    code_blocks = [body for lang, body in blocks if lang in _CODE_LANGS]
    if code_blocks:
        return _strip_prose("\n\n".join(b.strip("\n") for b in code_blocks))
    return _strip_prose(text)


@dataclass(frozen=True)
class Block:
    """One top-level piece of code.

    Attributes:
        kind: "import", "def" (function), "class", "assign" or "other".
        name: the defined name for def/class/assign (first target), else None.
        text: the block's source (dedented to column 0).
        node: the parsed node when the code parsed, else None.
    """

    kind: str
    name: str | None
    text: str
    node: ast.AST | None = None


def parses(code: str) -> tuple[bool, str | None]:
    """(True, None) if ``code`` compiles, else (False, "line N: message")."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<program>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return False, f"line {e.lineno}: {e.msg}"
    except (ValueError, MemoryError, RecursionError) as e:  # null bytes, absurd nesting
        return False, f"line 1: {e}"
    return True, None


def _kind_of(node: ast.AST) -> tuple[str, str | None]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return "import", None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return "def", node.name
    if isinstance(node, ast.ClassDef):
        return "class", node.name
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        return "assign", target.id if isinstance(target, ast.Name) else None
    return "other", None


_HEAD = re.compile(r"^(?:async\s+)?(def|class)\s+(\w+)|^(import|from)\s")


def _blocks_by_indent(code: str) -> list[Block]:
    """Fallback for code that does not parse: a new block at each column-0 line."""
    chunks: list[list[str]] = []
    pending_decorators: list[str] = []
    in_string = False
    for line in code.splitlines():
        starts = not in_string and line.strip() and line[:1] not in (" ", "\t", ")", "]", "}")
        if line.count('"""') % 2 or line.count("'''") % 2:
            in_string = not in_string
        if starts and line.startswith("@"):
            pending_decorators.append(line)
            continue
        if starts or not chunks:
            chunks.append(pending_decorators + [line])
            pending_decorators = []
        else:
            chunks[-1].append(line)
    out = []
    for chunk in chunks:
        text = "\n".join(chunk).strip("\n")
        if not text.strip():
            continue
        first = next(l for l in chunk if l.strip() and not l.startswith("@"))
        m = _HEAD.match(first.strip()) if first[:1] not in (" ", "\t") else None
        if m and m.group(1):
            out.append(Block("def" if m.group(1) == "def" else "class", m.group(2), text))
        elif m and m.group(3):
            out.append(Block("import", None, text))
        elif re.match(r"^\w+\s*(:[^=]*)?=[^=]", first):
            out.append(Block("assign", first.split("=")[0].split(":")[0].strip(), text))
        else:
            out.append(Block("other", None, text))
    return out


def split_blocks(code: str) -> list[Block]:
    """Top-level blocks of ``code``, in order (decorators belong to their def).

    Parsed with ``ast`` when possible; otherwise split at column-0 lines.
    An indented snippet (e.g. a bare function body) is one "other" block.
    """
    try:
        tree = quiet_parse(code)
    except SyntaxError:
        return _blocks_by_indent(code)
    lines = code.splitlines()
    out = []
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        text = "\n".join(lines[start - 1:node.end_lineno])
        kind, name = _kind_of(node)
        out.append(Block(kind, name, textwrap.dedent(text), node))
    return out


def is_stub(block: Block) -> bool:
    """True if a def has no real body (only a docstring, ``pass`` or ``...``)."""
    node = block.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # unparsed def: a stub if nothing but the signature / docstring lines
        body = [l.strip() for l in block.text.splitlines()[1:] if l.strip()]
        return not body or all(l in ("pass", "...") or l.startswith(("'", '"', "#")) for l in body)
    for stmt in node.body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring or ``...``
        return False
    return True


def last_def(blocks: list[Block], name: str) -> Block | None:
    """The last top-level ``def name`` (Python keeps the last definition)."""
    found = [b for b in blocks if b.kind == "def" and b.name == name]
    return found[-1] if found else None
