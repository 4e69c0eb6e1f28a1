"""The README's Python snippets run as written, and its test command is what CI runs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SNIPPETS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(index):
    exec(compile(SNIPPETS[index], f"README.md snippet {index}", "exec"), {"__name__": "__readme__"})


def test_readme_has_snippets():
    assert len(SNIPPETS) >= 2


def test_ci_runs_the_readme_test_command():
    command = re.search(r"^(\./run test)\b", README, flags=re.M)
    assert command, "README must show the test command ./run test"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec \./run test$", ci, flags=re.M)
