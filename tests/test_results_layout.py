"""docs/results/ stays small (docs/RESULTS_LAYOUT.md): what the pages quote and the tests read is tracked,
run records are packed. The repository's tracked files under it stay below 300."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 300  # tracked files under docs/results/ (the layout's acceptance figure)


def _tracked_results() -> list[str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the tracked files cannot be listed")
    inside = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if inside.returncode != 0 or Path(inside.stdout.strip()).resolve() != ROOT.resolve():
        pytest.skip(f"{ROOT} is not a git checkout (an unpacked sdist?): no tracked files to count")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "docs/results"], capture_output=True, check=True)
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_the_tracked_files_under_docs_results_stay_below_300():
    files = _tracked_results()
    assert files, "git ls-files lists nothing under docs/results"
    assert len(files) < LIMIT, (f"{len(files)} tracked files under docs/results/ (limit {LIMIT - 1}): pack run "
                                "records into a kept archive and fold loose manifests (docs/RESULTS_LAYOUT.md)")
