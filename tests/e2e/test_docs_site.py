"""The documentation site builds strictly, and a reader's browser shows it working.

One strict build (`mkdocs build --strict`, as `make docs` runs it) per module: a broken link or anchor, a page
left out of the navigation, a missing API object or a warning of any plugin fails it. The built Quickstart and
Configuration pages are then opened in headless Chromium (Debian's package, driven by Playwright) over HTTP,
as a reader would: the navigation, highlighted code blocks with their copy buttons (added by the theme's
JavaScript), and the search (its index loaded by a web worker) must work.
"""
from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]' (make test does)")


def docs_env() -> dict[str, str]:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=docs_env(), capture_output=True, text=True, timeout=240)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "WARNING" not in log, log[-4000:]
    return out


def test_site_builds_strictly_with_every_page(site):
    for page in ["index.html", "quickstart/index.html", "concepts/index.html", "reference/configuration/index.html",
                 "api/trainer/index.html", "benchmarks/index.html", "benchmarks/results/index.html",
                 "search/search_index.json"]:
        assert (site / page).is_file(), page
    for md in sorted((ROOT / "docs").glob("*.md")):  # every page of docs/ is published (nav or not)
        assert (site / md.stem / "index.html").is_file(), md.name


def test_home_is_the_readme_with_links_into_the_site(site):
    home = (site / "index.html").read_text()
    assert "What none of its peers does" in home
    assert 'href="quickstart/"' in home and 'href="docs/quickstart.md"' not in home
    assert 'href="benchmarks/"' in home


def test_api_reference_renders_the_public_surface(site):
    trainer = (site / "api/trainer/index.html").read_text()
    assert 'id="comarl.Trainer"' in trainer and 'id="comarl.Trainer.train"' in trainer
    assert ":class:" not in trainer  # Sphinx roles turned into code (docs/griffe_rst_roles.py)
    config = (site / "api/config/index.html").read_text()
    for name in ["comarl.config.TrainConfig", "comarl.config.ExperimentConfig", "comarl.agents.AgentConfig",
                 "comarl.config.load_config"]:
        assert f'id="{name}"' in config, name
    envs = (site / "api/envs/index.html").read_text()
    for name in ["comarl.envs.base.FunctionEnv", "comarl.envs.registry.register_env"]:
        assert f'id="{name}"' in envs, name
    assert 'id="comarl.sandbox.Sandbox"' in (site / "api/sandbox/index.html").read_text()


def test_configuration_page_has_an_anchor_per_key(site):
    from test_docs_config_reference import gen
    from comarl.config import ExperimentConfig

    html = (site / "reference/configuration/index.html").read_text()
    missing = [k.path for k in gen.all_keys(ExperimentConfig) if f'id="{gen._anchor(k.path)}"' not in html]
    assert not missing


def load_hooks():
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "site_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page, link, site_link", [
    ("index.md", "[Q](docs/quickstart.md#install)", "[Q](quickstart.md#install)"),  # README as home
    ("index.md", "[B](benchmarks/README.md)", "[B](benchmarks/index.md)"),
    ("benchmarks/index.md", "[R](RESULTS.md)", "[R](results.md)"),
    ("benchmarks/index.md", "[P](../docs/benchmarks_peers.md#how-to-run)", "[P](../benchmarks_peers.md#how-to-run)"),
    ("shared_prefix.md", "[b](../benchmarks/README.md#a)", "[b](benchmarks/index.md#a)"),
    ("api/envs.md", "[E](../environments.md)", "[E](../environments.md)"),
    ("quickstart.md", "[cfg](../configs/demo/writing.yaml)", "cfg"),  # a repository file the site does not publish
    ("quickstart.md", "[gone](../nothing/here.md)", "[gone](../nothing/here.md)"),  # left for --strict to name
    ("quickstart.md", "[x](https://example.org/a.md)", "[x](https://example.org/a.md)"),
    ("quickstart.md", "[x](#install)", "[x](#install)"),
])
def test_links_written_for_the_repository_point_into_the_site(page, link, site_link):
    assert load_hooks().rewrite_links(f"see {link}.\n", page) == f"see {site_link}.\n"


def test_links_inside_code_blocks_are_left_alone():
    text = "```python\nx = a[0](docs/quickstart.md)\n```\n[Q](docs/quickstart.md)\n"
    assert load_hooks().rewrite_links(text, "index.md") == ("```python\nx = a[0](docs/quickstart.md)\n```\n"
                                                           "[Q](quickstart.md)\n")


# ---------------------------------------------------------------- in a real browser


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def served(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(served, tmp_path_factory):
    exe = chromium_path()
    if exe is None:
        pytest.skip("no Chromium on this machine: install Debian's chromium (make test does, as root with apt)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the docs extra is not installed (playwright)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS, timeout=60_000)
        yield b
        b.close()


def open_page(browser, url, width: int = 1400):
    page = browser.new_page(viewport={"width": width, "height": 1000 if width > 600 else 844})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load", timeout=60_000)
    return page, errors


def search(page, text):
    """Type into the theme's search box; -> the result links (the index is loaded by a web worker)."""
    page.click("input.md-search__input", timeout=30_000)
    page.keyboard.type(text, delay=20)  # key by key, as the theme listens for (fill() sets the value silently)
    page.wait_for_selector(".md-search-result__item a", timeout=60_000)
    return [a.get_attribute("href") for a in page.query_selector_all(".md-search-result__item > a")]


def shot(page, name, folder: Path | None = None) -> Path | None:
    """Screenshot of the viewport into ``folder`` and into $COMARL_DOCS_SCREENSHOTS (to look at by eye)."""
    out = None
    for where in (folder, os.environ.get("COMARL_DOCS_SCREENSHOTS")):
        if where:
            Path(where).mkdir(parents=True, exist_ok=True)
            out = Path(where) / name
            page.screenshot(path=str(out), full_page=False)
    return out


def test_quickstart_in_a_browser(browser, served):
    page, errors = open_page(browser, f"{served}/quickstart/")
    assert page.title().startswith("Quickstart")
    nav = {a.get_attribute("href") for a in page.query_selector_all("nav.md-nav--primary a.md-nav__link")}
    for target in ["../concepts/", "../algorithm_families/", "../reference/configuration/", "../api/trainer/"]:
        assert target in nav, (target, sorted(nav))
    assert "Which to start with" in page.inner_text("nav.md-nav--primary")
    blocks = page.query_selector_all("div.highlight pre code")
    assert len(blocks) >= 4
    python = next(b for b in blocks if "comarl.FunctionEnv" in b.inner_text())
    assert len(python.query_selector_all("span.kn, span.k")) > 0  # highlighted, not plain text
    page.wait_for_selector("button.md-code__button[data-md-type=copy]", state="attached",
                           timeout=30_000)  # the theme's JS ran
    assert len(page.query_selector_all("button.md-code__button[data-md-type=copy]")) == len(blocks)
    shot(page, "quickstart.png")
    hits = search(page, "num_generations")
    assert any("reference/configuration" in h for h in hits), hits
    shot(page, "quickstart_search.png")
    assert not errors, errors


def test_configuration_page_in_a_browser(browser, served):
    from test_docs_config_reference import gen
    from comarl.config import ExperimentConfig

    page, errors = open_page(browser, f"{served}/reference/configuration/")
    assert page.inner_text("article h1").startswith("Configuration reference")
    keys = gen.all_keys(ExperimentConfig)
    rows = page.query_selector_all(".config-reference table tbody tr")
    assert len(rows) == len(keys)
    row = page.locator("tr", has=page.locator("#train\\.algorithm"))
    assert row.inner_text().split("\t")[:3] == ["train.algorithm", "str", '"magrpo"']
    assert row.is_visible()
    toc = page.inner_text("nav.md-nav--secondary")
    assert "train.critic" in toc and "agents.<i>" in toc
    shot(page, "configuration.png")
    hits = search(page, "reward_scale")
    assert any("reference/configuration" in h for h in hits), hits
    assert not errors, errors


# ---------------------------------------------------------------- layout at desktop and phone widths

# the page's layout as the browser computed it: the content column, the font sizes, and every box a table, a code
# block or an image sits in (its outermost ancestor below the column that scrolls or clips, or itself)
LAYOUT_JS = """() => {
  const col = document.querySelector('.md-content__inner');
  const c = document.querySelector('.md-content').getBoundingClientRect();  // the column with its margins
  const size = (sel) => {
    const e = col.querySelector(sel);
    return e ? parseFloat(getComputedStyle(e).fontSize) : null;
  };
  const boxOf = (e) => {  // the outermost box below the column that clips e (Material's scrollwrap), or e
    let box = e;
    for (let a = e; a && a !== col; a = a.parentElement) {
      const st = getComputedStyle(a);  // overflow does not apply to an element laid out as a table
      if (['auto', 'scroll', 'hidden'].includes(st.overflowX) && !st.display.includes('table')) box = a;
    }
    return box;
  };
  const boxes = [];
  for (const e of col.querySelectorAll('table, pre, img, .highlight')) {
    const box = boxOf(e), r = box.getBoundingClientRect();
    if (r.width === 0) continue;
    boxes.push({tag: e.tagName.toLowerCase(), text: e.innerText.slice(0, 60), left: r.left, right: r.right,
                scrolls: box.scrollWidth > box.clientWidth + 1,
                scrollable: ['auto', 'scroll'].includes(getComputedStyle(box).overflowX)});
  }
  return {viewport: window.innerWidth, doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,
          left: c.left, right: c.right, width: col.clientWidth, text: size('p'), code: size('pre code'),
          table: size('table td'), boxes};
}"""

LAYOUT_PAGES = {"home": "", "quickstart": "quickstart/", "configuration": "reference/configuration/",
                "results": "results/", "logs": "logs/"}
WIDTHS = {"desktop": 1400, "mobile": 390}


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", LAYOUT_PAGES)
def test_pages_fit_the_screen(browser, served, screenshots, name, width):
    """Desktop 1400 px and phone 390 px: nothing sticks out of the page or the content column (a wide table or
    code block scrolls inside its own box), the column is wide enough for code at desktop width, text stays
    legible, and the screenshot shows a page (not a blank one)."""
    page, errors = open_page(browser, f"{served}/{LAYOUT_PAGES[name]}", WIDTHS[width])
    page.wait_for_selector(".md-content__inner p", timeout=30_000)
    path = shot(page, f"{name}_{width}.png", screenshots)
    assert path is not None and _looks_like_a_page(path)
    m = page.evaluate(LAYOUT_JS)
    assert m["doc"] <= m["viewport"] and m["body"] <= m["viewport"], m  # no sideways scrolling of the page
    assert m["right"] <= m["viewport"] and m["left"] >= 0, m
    outside = [b for b in m["boxes"] if b["left"] < m["left"] - 1 or b["right"] > m["right"] + 1]
    assert not outside, outside  # every table, code block and image within the column...
    cut = [b for b in m["boxes"] if b["scrolls"] and not b["scrollable"]]
    assert not cut, cut  # ...and one wider than it scrolls (not clipped)
    if width == "desktop":
        assert m["width"] >= 850, m["width"]  # ~105 columns of code, ~5 more table columns than Material's 690 px
    assert m["text"] >= 13.5, m
    for key in ("code", "table"):
        assert m[key] is None or m[key] >= 11, m
    assert not errors, errors


def _looks_like_a_page(path: Path) -> bool:
    """Text on a background: many distinct grey levels, dark (text) and light (page) pixels both common."""
    from PIL import Image

    img = Image.open(path).convert("L")
    hist = img.histogram()
    total = sum(hist)
    dark, light = sum(hist[:100]) / total, sum(hist[200:]) / total
    return sum(1 for h in hist if h) > 40 and dark > 0.005 and light > 0.3


def test_a_wide_table_scrolls_inside_its_box_on_a_phone(browser, served):
    """The results page's 10- and 11-column tables do not fit 390 px: each scrolls sideways in its own box."""
    page, errors = open_page(browser, f"{served}/results/", 390)
    m = page.evaluate(LAYOUT_JS)
    tables = [b for b in m["boxes"] if b["tag"] == "table"]
    assert tables and any(b["scrolls"] for b in tables), tables
    assert all(b["scrollable"] for b in tables if b["scrolls"])
    assert not errors, errors
