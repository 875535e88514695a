"""``comarl view`` in a real browser: headless Chromium (Debian's package, driven by Playwright, as
tests/e2e/test_docs_site.py does) opens the page for three tiny runs trained here (the demo task, a two-turn run,
a staged run: configs/demo/*_smoke.yaml) and checks what a person sees: curves drawn, a sample's text, the tree's
nodes, filters changing the list, a note for bad lines, new lines of a running run appearing. Screenshots at
desktop and phone widths go to a temporary folder and to $COMARL_VIEW_SCREENSHOTS (docs/view.md's come from there).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from comarl.cli import main
from comarl.config import load_config
from comarl.experiment import build_trainer
from comarl.view import find_runs, start

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {"demo": "writing_view_smoke", "two_turn": "writing_2turn_smoke", "staged": "writing_staged_smoke"}
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDTHS = {"desktop": 1400, "mobile": 390}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("view_runs")
    for name, config in CONFIGS.items():
        cfg = load_config(ROOT / "configs" / "demo" / f"{config}.yaml",
                          [f"train.run.output_dir={out / name}", "train.run.progress_bar=false",
                           "train.run.max_steps=2"])
        build_trainer(cfg).train()
    return {name: out / name for name in CONFIGS}


def trees(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "trees.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def browser():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no Chromium on this machine: install Debian's chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the docs extra)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS, timeout=60_000)
        yield b
        b.close()


@pytest.fixture(scope="module")
def served(runs):
    server, thread = start(find_runs([str(runs[name]) for name in CONFIGS]))
    yield server.url
    server.stop()
    thread.join(5)


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("view_screenshots")


def open_page(browser, url: str, width: int = 1400):
    page = browser.new_page(viewport={"width": width, "height": 1000 if width > 600 else 844})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url, wait_until="load", timeout=60_000)
    page.wait_for_selector(".item", timeout=30_000)
    return page, errors


def shot(page, name: str, folder: Path, locator=None) -> Path:
    out = folder / name
    (locator or page).screenshot(path=str(out))
    extra = os.environ.get("COMARL_VIEW_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(extra) / name)
    assert out.stat().st_size > 5000  # a page, not a blank one
    return out


DRAWN_JS = """(id) => {  // pixels of the chart's plot canvas in a series colour (not the grey axes and grid)
  const c = document.querySelector(`.chart[data-chart="${id}"] canvas`);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    const hi = Math.max(d[i], d[i + 1], d[i + 2]), lo = Math.min(d[i], d[i + 1], d[i + 2]);
    if (d[i + 3] > 0 && hi - lo > 60) n++;
  }
  return n;
}"""


def text_of(rec: dict) -> str:
    """What the page's search looks in: every prompt and completion of a record, lower case."""
    parts = []
    for node in rec["nodes"]:
        parts += [p for ps in node["prompts"].values() for p in (ps if isinstance(ps, list) else [ps])]
        parts += [s["text"] for ss in node["samples"].values() for s in ss]
    return "\n".join(parts).lower()


def visible_items(page) -> int:
    return page.locator("#items > .item").count()


def test_demo_run_curves_samples_and_filters(browser, served, runs, screenshots):
    page, errors = open_page(browser, served)
    for chart in ("reward", "eval", "agents", "adv", "loss", "clip", "tput"):
        page.wait_for_selector(f'.chart[data-chart="{chart}"] canvas', timeout=30_000)
    assert page.evaluate(DRAWN_JS, "reward") > 50 and page.evaluate(DRAWN_JS, "eval") > 20
    legend = page.inner_text('.chart[data-chart="reward"] .u-legend')
    assert all(f"{name} · reward/mean" in legend for name in CONFIGS)  # the three runs overlaid
    recs = trees(runs["demo"])
    newest = [r for r in recs if r["step"] == 2]
    first = page.locator("#items > .item").first  # newest step, item order, the first card open
    assert first.get_attribute("data-step") == "2" and first.get_attribute("data-item") == "0"
    texts = first.locator(".node .agent[data-agent='0'] .sample .text")
    assert texts.count() == 4 and texts.nth(1).text_content() == newest[0]["nodes"][0]["samples"]["0"][1]["text"]
    assert first.locator(".node").count() == 1 and first.locator(".joint").count() == 4
    assert "A = R − group mean" in first.inner_text()
    shot(page, "view_desktop.png", screenshots)

    page.select_option("#f-step", "all")
    assert visible_items(page) == len(recs) == 4
    cut = sorted(r["reward"] for r in recs)[2]
    page.fill("#f-min", str(cut))  # reward >= the third lowest: two items left
    assert visible_items(page) == sum(r["reward"] >= cut for r in recs) == 2
    page.fill("#f-min", "")
    word = newest[1]["nodes"][0]["samples"]["1"][2]["text"].strip()[:5]
    page.fill("#f-search", word)
    wanted = sum(word.lower() in text_of(r) for r in recs)
    assert visible_items(page) == wanted >= 1 and page.locator("#items mark").count() >= 1
    page.fill("#f-search", "")
    page.select_option("#f-sort", "best")
    rewards = [float(x.split()[1]) for x in page.locator("#items > .item .facts .reward").all_inner_texts()]
    assert rewards == sorted(rewards, reverse=True)
    assert not errors, errors

    mobile, errors = open_page(browser, served, WIDTHS["mobile"])
    assert mobile.evaluate("document.documentElement.scrollWidth") <= WIDTHS["mobile"]  # no sideways scrolling
    shot(mobile, "view_mobile.png", screenshots)
    mobile.locator("#samples").scroll_into_view_if_needed()
    shot(mobile, "view_mobile_samples.png", screenshots)
    assert not errors, errors


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def expand_all(item) -> None:
    """Open every collapsed branch of an item card, level by level (children are drawn when opened)."""
    for _ in range(6):
        closed = item.locator("details.branch:not([open]) > summary")
        if closed.count() == 0:
            return
        for _ in range(closed.count()):
            closed.first.click()


def test_two_turn_run_draws_the_whole_tree_with_feedback(browser, served, runs, screenshots):
    page, errors = open_page(browser, served)
    page.select_option("#f-run", "1")
    rec = next(r for r in trees(runs["two_turn"]) if r["step"] == 2 and r["item"] == 0)
    item = page.locator("#items > .item").first
    assert item.locator(".overview rect").count() == 5 and item.locator(".overview circle").count() == 4 + 16
    item.locator('.overview circle[data-node="3"][data-joint="1"]').click()  # a turn-1 leaf: its branch opens
    expect(item.locator('.node[data-node="3"]')).to_have_count(1)
    expand_all(item)
    assert len(rec["nodes"]) == 5  # the root and a turn-1 node per joint action
    expect(item.locator(".node")).to_have_count(5)  # (a branch's node is drawn when it opens)
    assert item.locator('.node[data-turn="1"]').count() == 4
    turn1 = item.locator('.node[data-turn="1"]').first
    turn1.locator("details.prompt > summary").first.click()
    assert "new since turn 0" in turn1.locator("details.prompt > summary").first.inner_text()
    assert turn1.locator("mark.add").count() > 0  # the environment's feedback, highlighted
    assert turn1.locator(".sample .text").first.text_content() == rec["nodes"][1]["samples"]["0"][0]["text"]
    page.select_option("#f-sort", "improved")
    assert "over its turns" in page.locator("#items > .item").first.inner_text()
    shot(page, "view_two_turn.png", screenshots, page.locator("#samples"))
    assert not errors, errors


def test_staged_run_shows_which_stage_read_which_output(browser, served, runs, screenshots):
    page, errors = open_page(browser, served, WIDTHS["mobile"])
    page.select_option("#f-run", "2")
    item = page.locator("#items > .item").first
    assert "Team graph, stage 0: short (branch) → stage 1: long (branch; reads long ← short)" in item.inner_text()
    stage1 = item.locator('.node[data-stage="1"]')
    assert stage1.count() == 2  # one long-writer node per short summary
    assert [stage1.nth(k).locator(".reads").inner_text() for k in range(2)] == ["reads short #0", "reads short #1"]
    page.select_option("#f-agent", "1")  # only the long writer's samples
    assert item.locator('.agent[data-agent="0"]').count() == 0 and item.locator('.agent[data-agent="1"]').count() == 2
    shot(page, "view_staged_mobile.png", screenshots, item)
    assert not errors, errors


def test_bad_lines_are_skipped_with_a_note_never_a_blank_page(browser, runs, tmp_path, screenshots):
    run = tmp_path / "broken"
    shutil.copytree(runs["demo"], run, ignore=shutil.ignore_patterns("checkpoint-*"))
    lines = (run / "trees.jsonl").read_text().splitlines(keepends=True)
    (run / "trees.jsonl").write_text(lines[0] + lines[1][: len(lines[1]) // 2] + "\n" + "".join(lines[2:])
                                     + lines[0][:100])  # a line cut in the middle, and a last line cut short
    assert main(["view", str(run), "--out", str(tmp_path / "page.html")]) == 0
    page, errors = open_page(browser, (tmp_path / "page.html").as_uri())
    notes = page.inner_text("#notes")
    assert "2 lines could not be read" in notes
    assert "trees.jsonl line 2: not valid JSON" in notes and "trees.jsonl line 5: no end of line" in notes
    page.select_option("#f-step", "all")
    assert visible_items(page) == 3 and page.evaluate(DRAWN_JS, "reward") > 20
    shot(page, "view_note.png", screenshots)
    assert not errors, errors


def test_a_run_without_trees_shows_its_flat_sample_rows(browser, runs, tmp_path):
    """Runs logged before trees.jsonl (or the offline DPO pairs) have samples.jsonl only: one node per item."""
    run = tmp_path / "old"
    shutil.copytree(runs["demo"], run, ignore=shutil.ignore_patterns("checkpoint-*", "trees.jsonl"))
    rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert main(["view", str(run), "--out", str(tmp_path / "page.html")]) == 0
    page, errors = open_page(browser, (tmp_path / "page.html").as_uri())
    first = page.locator("#items > .item").first
    newest = [r for r in rows if r["step"] == 2 and r["item"] == 0]
    assert first.locator(".node").count() == 1 and first.locator(".joint").count() == len(newest)
    assert first.locator(".sample .text").first.text_content() == newest[0]["agents"][0]["response"]
    assert not errors, errors


def test_the_page_follows_a_running_run(browser, runs, tmp_path):
    run = tmp_path / "running"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "x", "pid": os.getpid()}))  # alive: this process
    metrics = (runs["demo"] / "metrics.jsonl").read_text().splitlines(keepends=True)
    tree_lines = (runs["demo"] / "trees.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text(metrics[0])
    (run / "trees.jsonl").write_text("".join(t for t in tree_lines if json.loads(t)["step"] == 1))
    server, thread = start(find_runs([str(run)]))
    writing = open(run / "metrics.jsonl", "a")  # a trainer keeps its metrics file open while it trains
    try:
        page, errors = open_page(browser, server.url)
        assert page.inner_text("#runs .badge") == "running"
        assert page.locator("#f-step option").all_inner_texts() == ["all steps (1)", "step 1 (2 items)"]
        writing.write("".join(metrics[1:]))
        writing.flush()
        with open(run / "trees.jsonl", "a") as f:
            f.write("".join(t for t in tree_lines if json.loads(t)["step"] == 2))
        # (the page's Content-Security-Policy refuses eval, so wait on selectors, not on a JS string)
        page.wait_for_selector("#f-step option:nth-child(3)", state="attached", timeout=15_000)
        page.wait_for_selector('#items > .item[data-step="2"]', timeout=5_000)  # "newest step" follows it
        assert page.locator("#summary").inner_text().startswith("step 2")
        page.evaluate("() => { document.querySelector('#items > .item').dataset.seen = 'yes'; }")
        writing.write(json.dumps({**json.loads(metrics[-1]), "step": 3}) + "\n")  # metrics only: cards stay
        writing.flush()
        page.wait_for_selector("#summary >> text=step 3", timeout=15_000)
        assert page.locator('#items > .item[data-seen="yes"]').count() == 1
        assert not errors, errors
        writing.close()
        page.wait_for_selector("#runs .badge.stopped", timeout=15_000)  # training ended: the file is closed
    finally:
        writing.close()
        server.stop()
        thread.join(5)
