"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- Pages that live outside ``docs/`` join the site as they are in the repository: the README is the
  home page, ``benchmarks/README.md`` and ``benchmarks/RESULTS.md`` the benchmark pages. One source
  each, so GitHub and the site never disagree.
- The Configuration reference is generated from the config dataclasses on every build
  (``docs/gen_config_reference.py``), the list of metric keys at the end of "Understanding the logs" from the
  source (``docs/gen_metric_keys.py``), the API index from ``comarl.__all__`` (``api_index``) and the
  examples gallery from ``examples/*.py`` (``gallery``).
- Links are written for the repository (they work on GitHub and in an editor); this hook maps each
  relative link to the page the site publishes for that file. A link to a repository file the site
  does not publish (a config, a source file) keeps its text without the link; a link to nothing
  stays as written, so ``mkdocs build --strict`` names it.
"""
from __future__ import annotations

import importlib.util
import posixpath
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
# site page -> the repository file it shows
INCLUDED = {
    "index.md": "README.md",
    "benchmarks/index.md": "benchmarks/README.md",
    "benchmarks/results.md": "benchmarks/RESULTS.md",
}
CONFIG_REFERENCE = "reference/configuration.md"
LOGS = "logs.md"  # gets the metric keys found in the source (docs/gen_metric_keys.py)
API_INDEX = "api/index.md"  # gets the table of what `import comarl` gives (api_index)
GALLERY = "gallery.md"  # gets every script of examples/ (gallery)
GALLERY_MARKER = "<!-- examples -->"
API_MARKER = "<!-- api-index -->"
_DIRECTIVE = re.compile(r"^::: ([\w.]+)", re.M)
_ROLE = re.compile(r":\w+:`~?([^`]+)`")  # a Sphinx role in a docstring, :class:`Agent`
_SITE_OF = {repo: site for site, repo in INCLUDED.items()}
_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _load(name: str):
    """The generator module ``docs/<name>.py``."""
    if str(ROOT) not in sys.path:  # mkdocs run from the checkout: document this checkout's comarl
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def version(root: Path = ROOT) -> str:
    """The package version, as ``pyproject.toml`` gives it."""
    m = re.search(r'^version = "([^"]+)"', (root / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    return m.group(1) if m else "unknown"


def on_config(config):
    config["copyright"] = f"comarl {version()} (Changelog in Reference), Apache-2.0 licence"
    return config


def on_files(files, config):
    for site, repo in INCLUDED.items():
        files.append(File.generated(config, site, content=(ROOT / repo).read_text(encoding="utf-8")))
    files.append(File.generated(config, CONFIG_REFERENCE, content=_load("gen_config_reference").render()))
    return files


def repo_path_of(src_uri: str) -> str:
    """The repository file a site page comes from."""
    return INCLUDED.get(src_uri, f"docs/{src_uri}")


def site_page_of(repo_path: str) -> str | None:
    """The site page that publishes repository file ``repo_path``, or None."""
    if repo_path in _SITE_OF:
        return _SITE_OF[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    return None


def rewrite_links(markdown: str, src_uri: str, root: Path = ROOT) -> str:
    """Map the relative links of page ``src_uri`` (written for the repository) to site pages."""
    here = posixpath.dirname(repo_path_of(src_uri))
    site_dir = posixpath.dirname(src_uri)

    def fix(m: re.Match) -> str:
        bang, text, target = m.groups()
        if _SCHEME.match(target) or target.startswith(("#", "/")):
            return m.group(0)
        path, hash_, anchor = target.partition("#")
        repo = posixpath.normpath(posixpath.join(here, path))
        site = site_page_of(repo)
        if site is not None:
            rel = posixpath.relpath(site, site_dir or ".")
            return f"{bang}[{text}]({rel}{hash_}{anchor})"
        if not bang and not repo.startswith("..") and (root / repo).exists():
            return text  # a config or source file: named, not published
        return m.group(0)

    out, in_fence = [], False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
            out.append(line)
        else:
            out.append(line if in_fence else _LINK.sub(fix, line))
    return "".join(out)


def with_metric_index(markdown: str) -> str:
    """docs/logs.md with the list of metric keys found in the source where its marker stands."""
    keys = _load("gen_metric_keys")
    return markdown.replace(keys.INDEX_MARKER, keys.render_index(keys.code_keys(ROOT)))


def api_anchor(name: str, obj, pages: dict[str, list[str]]) -> tuple[str, str] | None:
    """(API page, anchor) where ``comarl.<name>`` is documented: a ``:::`` directive naming it (as
    ``comarl.<name>`` or by its defining module), or one for a module that holds it; None if no page does."""
    canonical = f"{obj.__module__}.{obj.__qualname__}"
    for page, directives in pages.items():
        for d in directives:
            if d in (f"comarl.{name}", canonical):
                return page, d
            if canonical == f"{d}.{obj.__qualname__}" or d == f"{obj.__module__}.{name}":
                return page, canonical
    return None


def api_index(root: Path = ROOT) -> str:
    """The table of comarl's top-level names (``comarl.__all__``): what each is (its docstring's first
    sentence) and a link to the API page documenting it."""
    import inspect

    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import comarl

    api = root / "docs" / "api"
    pages = {p.name: _DIRECTIVE.findall(p.read_text(encoding="utf-8")) for p in sorted(api.glob("*.md"))}
    rows = ["| Name | What it is |", "|---|---|"]
    for name in comarl.__all__:
        obj = getattr(comarl, name)
        where = api_anchor(name, obj, pages)
        doc = inspect.getdoc(obj) or ""
        if doc.startswith(f"{obj.__name__}("):  # a dataclass without a docstring: Python's generated signature
            doc = ""
        paragraph = doc.split("\n\n")[0].replace("\n", " ")
        sentence = re.match(r"(.+?\.)(\s|$)", paragraph)
        first = _ROLE.sub(r"`\1`", sentence.group(1) if sentence else paragraph).replace("|", "\\|") or \
            f"Its keys: the [Configuration reference](../{CONFIG_REFERENCE})."
        label = f"[`{name}`]({where[0]}#{where[1]})" if where else f"`{name}`"
        rows.append(f"| {label} | {first} |")
    return "\n".join(rows) + "\n"


def gallery(root: Path = ROOT) -> str:
    """One section per script of ``examples/``: its docstring's first line as the title, the rest as the text,
    then the code itself (the page shows what the test suite runs)."""
    import ast

    parts = []
    for path in sorted((root / "examples").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        doc = ast.get_docstring(tree) or path.stem
        title, _, text = doc.partition("\n")
        body = source.splitlines()[tree.body[0].end_lineno:] if ast.get_docstring(tree) else source.splitlines()
        code = "\n".join(body).strip("\n")
        parts.append(f"## {title.rstrip('.')}\n\n{text.strip()}\n\n`python examples/{path.name}`\n\n"
                     f"```python\n{code}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == LOGS:
        markdown = with_metric_index(markdown)
    if page.file.src_uri == API_INDEX:
        markdown = markdown.replace(API_MARKER, api_index())
    if page.file.src_uri == GALLERY:
        markdown = markdown.replace(GALLERY_MARKER, gallery())
    return rewrite_links(markdown, page.file.src_uri)
