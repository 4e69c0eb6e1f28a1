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


def test_supported_models_table_lists_exactly_the_test_cases():
    from tests.adapter_models import CASES as ADAPTER_CASES
    from tests.models import CASES as CORE_CASES

    section = README.split("## Supported models", 1)[1].split("\n## ", 1)[0]
    section = section.split("### Every family", 1)[0]  # the architecture table has its own test
    listed = re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.M)
    assert len(listed) == len(set(listed))
    assert set(listed) == {c.name for c in ADAPTER_CASES} | {c.name for c in CORE_CASES}
    for case in [*ADAPTER_CASES, *CORE_CASES]:  # the backends column says what the tests exercise
        row = next(line for line in section.splitlines() if line.startswith(f"| `{case.name}` |"))
        assert ("activation" in row.split("|")[-2]) == case.activation_ok, case.name
