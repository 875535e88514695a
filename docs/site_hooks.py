"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- Pages that live outside ``docs/`` join the site as they are in the repository: the README is the
  home page, ``benchmarks/README.md`` and ``benchmarks/RESULTS.md`` the benchmark pages. One source
  each, so GitHub and the site never disagree.
- The Configuration reference is generated from the config dataclasses on every build
  (``docs/gen_config_reference.py``), and the list of metric keys at the end of "Understanding the logs"
  from the source (``docs/gen_metric_keys.py``).
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


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == LOGS:
        markdown = with_metric_index(markdown)
    return rewrite_links(markdown, page.file.src_uri)
