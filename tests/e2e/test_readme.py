"""The README's Python API example runs as written."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_python_example_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    code = blocks[0]
    assert len(code.strip().splitlines()) <= 26
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert (tmp_path / "runs/readme/final/agent1/config.json").exists()
    assert len(scope["history"]) == 2


def test_the_demo_number_is_the_same_everywhere():
    """README and the quickstart quote the demo's expected held-out score as comarl.demo states it (measured over
    three seeds; the demo prints it after a 300-step run)."""
    from comarl import demo

    expected = demo.expected_summary()
    for page in ("README.md", "docs/quickstart.md"):
        text = " ".join((ROOT / page).read_text().split())
        assert expected in text, page
        assert "0.412 -> 0.791" not in text and "0.412 → 0.791" not in text, page  # the number before 2026-12-05


def test_the_readme_quotes_the_second_runs_error_as_python_users_get_it(tmp_path, monkeypatch):
    """Running the README's example twice: the refusal it quotes is the one a Python user gets."""
    import pytest

    from comarl.core.config_io import ConfigError

    code = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    with pytest.raises(ConfigError) as e:
        exec(compile(code, "README.md", "exec"), {})
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = str(e.value)
    head, tail = said.split(" (", 1)[0], said.split(")", 1)[1]  # the folder's listing differs by machine
    assert f"`{head} (...){tail}`" in readme, said
