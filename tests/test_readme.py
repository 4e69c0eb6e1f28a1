"""The README and the docs pages it links: their Python snippets run as written, their links lead to files
that exist, the README starts where a user starts, and its test command is what CI runs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = ("README.md", "docs/GUIDE.md", "docs/MODELS.md", "docs/HARNESS.md", "docs/RECOMMENDATIONS.md", "docs/GPU.md",
         "docs/THEORY.md")
SNIPPETS = [(page, index, code) for page in PAGES
            for index, code in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S))]


@pytest.mark.parametrize("page, index, code", SNIPPETS, ids=[f"{page}-{index}" for page, index, _ in SNIPPETS])
def test_readme_snippet_runs(page, index, code):
    exec(compile(code, f"{page} snippet {index}", "exec"), {"__name__": "__readme__"})


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_of_a_page_leads_to_a_file(page):
    text = (ROOT / page).read_text()
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not t.startswith(("http", "#"))]
    missing = [t for t in targets if not ((ROOT / page).parent / t).exists()]
    assert not missing, f"{page} links to files that do not exist: {missing}"


def test_the_readme_starts_where_a_user_starts():
    """What it is, install and set-up in the first 40 lines, then Quick start, then the recommendation; the
    whole page under 400 lines (the rest lives in docs/)."""
    lines = README.splitlines()
    assert len(lines) < 400
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:4] == ["## Install and set-up", "## Quick start", "## What it does", "## What we recommend"]
    setup = lines.index("## Install and set-up")
    assert setup < 40 and any("pip install -e" in line for line in lines[setup:40])
    assert any(line.startswith("./run main") for line in lines[setup:40])
    assert any(line.startswith("./run test") for line in lines[setup:40])


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

    section = (ROOT / "docs" / "MODELS.md").read_text().split("## Supported models", 1)[1].split("\n## ", 1)[0]
    section = section.split("### Every family", 1)[0]  # the architecture table has its own test
    listed = re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.M)
    assert len(listed) == len(set(listed))
    assert set(listed) == {c.name for c in ADAPTER_CASES} | {c.name for c in CORE_CASES}
    for case in [*ADAPTER_CASES, *CORE_CASES]:  # the backends column says what the tests exercise
        row = next(line for line in section.splitlines() if line.startswith(f"| `{case.name}` |"))
        assert ("activation" in row.split("|")[-2]) == case.activation_ok, case.name
