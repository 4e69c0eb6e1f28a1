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


# -- the README's command lines, run as written ---------------------------------------------------------------
def cli_examples() -> list[str]:
    """Every command line the README gives: the lines of its bash blocks that call ``./run`` or ``speccond``
    (continuations joined, comments cut) and its inline ``./run`` spans that are not forms, each once."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("./run ", "speccond ")) or line in ("./run", "speccond"):
                commands.append(" ".join(line.split()))
    commands += [" ".join(span.split()) for span in re.findall(r"`(\./run [^`]*)`", README)
                 if "..." not in span and not re.search(r"\b[A-Z]{3,}\b", span)]  # not a form (a script's NAME placeholder ...)
    return list(dict.fromkeys(commands))


# The job shrunk as the README says the tests shrink it (SPECCOND_MAIN_ARGS, read by ./run after the line's own).
SHRUNK = "--seeds 1 --set train_size=64 --set test_size=32 --set batch_size=16 --set warmup_steps=1 --set track_every=2"
CLI_EXAMPLES = cli_examples()


def test_the_readme_gives_its_command_lines():
    assert {"./run main", "./run test", "./run demo", "./run main --dry-run"} <= set(CLI_EXAMPLES)
    assert sum(c.startswith("speccond ") for c in CLI_EXAMPLES) >= 2


@pytest.mark.parametrize("command", CLI_EXAMPLES)
def test_readme_cli_example_runs_as_written(command, tmp_path, monkeypatch, capsys):
    """``./run`` lines run through ./run itself (the main job shrunk by SPECCOND_MAIN_ARGS, as the README says);
    ``speccond`` lines through the command line's main, as written. The ones that name your data (a folder
    under /data) or your cluster run as written too and stop, in one line, at the data this machine lacks."""
    import shlex
    import subprocess
    import sys

    words = shlex.split(command)
    if words[:2] == ["./run", "test"]:
        pytest.skip("./run test is this test suite (test_ci_runs_the_readme_test_command checks CI runs it)")
    if words[0] == "./run":
        venv = Path(sys.prefix)
        stamp = venv / ".speccond-installed"
        import hashlib

        want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
        if not stamp.is_file() or stamp.read_text().strip() != want:
            pytest.skip(f"{venv} is not a ./run environment of this pyproject.toml (./run would install one)")
        if words[1] == "main" and not Path("/usr/share/datasets/fashion-mnist").is_dir():
            pytest.skip("needs the Debian package dataset-fashion-mnist (./run installs it as root)")
        env = {**__import__("os").environ, "SPECCOND_VENV": str(venv), "SPECCOND_DATA": str(tmp_path / "data"),
               "SPECCOND_MAIN_ARGS": f"--out {tmp_path / 'out'} {SHRUNK}", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT / "src")}
        done = subprocess.run(["bash", *words], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        if "--dry-run" in words:
            assert "estimated training time" in done.stdout and not (tmp_path / "out").exists()
        elif words[1] == "main":
            assert "| baseline | 1 |" in done.stdout and "| spectral-svd | 1 |" in done.stdout
            assert "baseline seed 0" in done.stderr  # each bar names its run
        return
    from speccond.harness.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    code = main(words[1:])
    said = capsys.readouterr().err
    yours = [word for word in words if "/data/" in word]
    if yours:  # the user's data: refused before anything is written, naming it
        assert code == 2 and "/data/pets is not an image folder" in said and "Traceback" not in said, said
        assert not any(tmp_path.iterdir()) or [p.name for p in tmp_path.iterdir()] == ["data"]
    else:
        assert code == 0, said
