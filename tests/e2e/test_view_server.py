"""``comarl view``'s reading of run folders and its server, without a browser: tolerant reading from a cursor,
the bounds on every request, the idle timeout and the lifetime, the CLI's errors and --out."""
import http.client
import json
import threading
import time
from pathlib import Path

import pytest

from comarl.cli import main
from comarl.view import find_runs, snapshot, standalone_page
from comarl.view.runs import ViewError, new_cursor, poll, read_lines
from comarl.view.server import ViewServer, start


def fake_run(folder: Path, steps=(1, 2), pid=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"run_id": "abc", "pid": pid or 0}))
    with open(folder / "metrics.jsonl", "a") as f:
        for s in steps:
            f.write(json.dumps({"step": s, "reward/mean": 0.1 * s}) + "\n")
    return folder


def test_reading_skips_bad_lines_with_a_note_and_waits_for_an_unfinished_one(tmp_path):
    run = fake_run(tmp_path / "r")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/mean": NaN}\n[1, 2]\n{"step": 4, "rew')  # NaN, not an object, unfinished
    runs = find_runs([str(run)])
    first = poll(runs, new_cursor(runs))
    assert [r["step"] for r in first["rows"][0]["metrics"]] == [1, 2, 3]
    assert first["rows"][0]["metrics"][2]["reward/mean"] is None  # JSON has no NaN: the page would not parse it
    assert [(n["line"], n["text"]) for n in first["notes"]] == [(4, "a JSON list, not an object: skipped")]
    again = poll(runs, first["cursor"])  # the last line did not grow: cut short
    assert [(n["line"], n["text"]) for n in again["notes"]] == [(5, "no end of line (cut short?): skipped")]
    with open(run / "metrics.jsonl", "a") as f:
        f.write('\n{"step": 5}\n')
    later = poll(runs, again["cursor"])
    assert [r["step"] for r in later["rows"][0]["metrics"]] == [5] and later["notes"][0]["line"] == 6
    snap = snapshot(runs)  # a snapshot notes everything at once
    assert len(snap["notes"]) == 2 and snap["live"] is False


def test_an_unfinished_line_that_grows_is_read_once_whole(tmp_path):
    run = fake_run(tmp_path / "r", steps=())
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 1,')
    runs = find_runs([str(run)])
    first = poll(runs, new_cursor(runs))
    assert first["rows"][0]["metrics"] == [] and first["notes"] == []
    with open(run / "metrics.jsonl", "a") as f:
        f.write(' "x": 2}\n')
    assert poll(runs, first["cursor"])["rows"][0]["metrics"] == [{"step": 1, "x": 2}]


def test_a_poll_reads_at_most_its_budget_and_says_there_is_more(tmp_path):
    run = fake_run(tmp_path / "r", steps=range(1, 201))
    runs = find_runs([str(run)])
    cursor, steps, polls = new_cursor(runs), [], 0
    while True:
        got = poll(runs, cursor, budget=1000)
        steps += [r["step"] for r in got["rows"][0]["metrics"]]
        cursor, polls = got["cursor"], polls + 1
        if not got["more"]:
            break
    assert steps == list(range(1, 201)) and polls > 5


def test_a_rewritten_file_is_read_again_and_marked_reset(tmp_path):
    run = fake_run(tmp_path / "r", steps=(1, 2, 3))
    runs = find_runs([str(run)])
    first = poll(runs, new_cursor(runs))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")  # a resumed run truncated its logs
    again = poll(runs, first["cursor"])
    assert again["reset"] == [[0, "metrics"]] and again["rows"][0]["metrics"] == [{"step": 1}]


def test_a_line_longer_than_a_poll_is_read_whole(tmp_path):
    run = fake_run(tmp_path / "r", steps=())
    big = {"step": 1, "text": "x" * 5000}
    (run / "metrics.jsonl").write_text(json.dumps(big) + "\n" + json.dumps({"step": 2}) + "\n")
    lines, state = read_lines(run / "metrics.jsonl", 0, 0, 0, budget=4 << 20, final=False)
    assert len(lines) == 2
    from comarl.view import runs as runs_mod

    old = runs_mod.BUDGET
    runs_mod.BUDGET = 2048  # a whole budget smaller than the line: it is read on to its end
    try:
        lines, state = read_lines(run / "metrics.jsonl", 0, 0, 0, budget=2048, final=False)
    finally:
        runs_mod.BUDGET = old
    assert [n for n, _ in lines] == [1] and json.loads(lines[0][1]) == big and state["more"]


def test_a_run_is_running_while_its_process_has_one_of_its_files_open(tmp_path):
    import os

    from comarl.view.runs import run_status

    run = fake_run(tmp_path / "r", pid=os.getpid())
    assert run_status(run, {"pid": os.getpid()}) == "stopped"  # this process is alive but writes nothing there
    with open(run / "metrics.jsonl", "a"):
        assert run_status(run, {"pid": os.getpid()}) == "running"
    assert run_status(run, {"pid": 2**22 + 12345}) == "stopped" and run_status(run, {}) == "stopped"


def test_find_runs_refuses_a_folder_without_a_run_and_names_the_runs_inside(tmp_path):
    fake_run(tmp_path / "runs" / "a")
    with pytest.raises(ViewError, match=r"holds no run .*runs inside it: .*runs/a"):
        find_runs([str(tmp_path / "runs")])
    with pytest.raises(ViewError, match="is not a folder"):
        find_runs([str(tmp_path / "nope")])
    named = find_runs([str(fake_run(tmp_path / "x" / "latest")), str(fake_run(tmp_path / "y" / "latest"))])
    assert [r.name for r in named] == ["x/latest", "y/latest"]


def test_cli_writes_one_self_contained_page_and_names_bad_folders(tmp_path, capsys):
    run = fake_run(tmp_path / "r")
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "note": "</script><script>alert(1)</script>"}) + "\n")
    assert main(["view", str(run), "--out", str(tmp_path / "page.html")]) == 0
    html = (tmp_path / "page.html").read_text()
    assert "uPlot" in html and 'id="comarl-data"' in html
    assert "<script src" not in html and '<link rel="stylesheet"' not in html  # nothing to fetch: all inlined
    assert "</script><script>alert" not in html  # a run's text cannot close the data's script element
    data = json.loads(html.split('id="comarl-data">')[1].split("</script>")[0])
    assert data["rows"][0]["metrics"][2]["note"].startswith("</script>")
    assert main(["view", str(tmp_path / "missing")]) == 2
    assert "comarl: view error: comarl view: " in capsys.readouterr().err


def test_cli_serves_until_its_idle_timeout(tmp_path):
    import re
    import subprocess
    import sys
    import urllib.request

    run = fake_run(tmp_path / "r")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "comarl.cli", "view", str(run), "--idle-timeout", "2"],
                            stdout=subprocess.PIPE, text=True, cwd=root, env={**__import__("os").environ,
                                                                              "PYTHONPATH": str(root)})
    try:
        first = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", first).group(0)
        assert b"comarl view" in urllib.request.urlopen(url, timeout=10).read()
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "stopped (no request for 2 s)" in out


def request(server, method="GET", path="/", host=None, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest(method, path, skip_host=True)
    conn.putheader("Host", host or f"127.0.0.1:{server.port}")
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


@pytest.fixture
def server(tmp_path):
    srv, thread = start(find_runs([str(fake_run(tmp_path / "r"))]))
    yield srv
    srv.stop()
    thread.join(5)


def test_the_server_answers_the_page_assets_and_polls(server):
    assert server.server_address[0] == "127.0.0.1"
    code, body = request(server)
    assert code == 200 and b"assets/view.js" in body
    assert request(server, path="/assets/uPlot.iife.min.js")[0] == 200
    code, body = request(server, path="/api/poll")
    data = json.loads(body)
    assert code == 200 and data["live"] and [r["step"] for r in data["rows"][0]["metrics"]] == [1, 2]
    again = json.loads(request(server, path="/api/poll?cursor=" + json.dumps(data["cursor"]).replace(" ", ""))[1])
    assert again["rows"][0]["metrics"] == [] and again["runs"][0]["status"] == "stopped"


def test_the_server_bounds_its_requests(server):
    assert request(server, host="evil.example:80")[0] == 403  # a DNS name pointed at 127.0.0.1
    assert request(server, host=f"localhost:{server.port}")[0] == 200
    assert request(server, "POST", "/", body=b"x")[0] == 405
    assert request(server, path="/assets/../../etc/passwd")[0] == 404
    assert request(server, path="/api/poll?cursor=" + "1" * 9000)[0] == 414
    assert request(server, path="/api/poll?cursor=%7B%22runs%22%3A5%7D")[0] == 400
    assert request(server, path="/api/poll?cursor=nope")[0] == 400
    assert request(server, "GET", "/", body=b"abc")[0] == 413


def test_the_server_stops_after_its_idle_timeout_and_its_lifetime(tmp_path):
    runs = find_runs([str(fake_run(tmp_path / "r"))])
    idle = ViewServer(runs, idle_timeout=0.5)
    t0 = time.monotonic()
    assert idle.serve() == "no request for 0.5 s" and time.monotonic() - t0 < 5
    busy = ViewServer(runs, idle_timeout=60, max_lifetime=1.0)
    keep = threading.Event()

    def ask():  # a page that keeps asking: only the lifetime stops it
        while not keep.is_set():
            try:
                request(busy, path="/api/poll")
            except OSError:
                return
            time.sleep(0.1)

    threading.Thread(target=ask, daemon=True).start()
    t0 = time.monotonic()
    assert busy.serve() == "lifetime of 1 s reached" and time.monotonic() - t0 < 6
    keep.set()


def test_standalone_page_escapes_every_tag_in_the_data():
    html = standalone_page({"runs": [], "rows": [], "notes": [{"text": "<b>&</b>\u2028"}]})
    holder = html.split('id="comarl-data">')[1].split("</script>")[0]
    assert "<" not in holder and json.loads(holder)["notes"][0]["text"] == "<b>&</b>\u2028"
