"""Nothing needs the withdrawn archive any more (the 1.0.0 source release of the benchmark package that once
held CIFAR-10 and the labelled English text): no code path, test, script or doc names it, except history.

The rule for history: a file under docs/results/ (committed results, kept as they were run), or a line that
says "withdrawn" itself (a labelled note in docs/RESULTS.md or elsewhere). Every other tracked text file of
the repository is searched, README and docs included.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = "big" + "bench"  # spelt in two pieces, so this file does not name it
HISTORY = "docs/results/"


def tracked_files() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout: {error}")
    return [name for name in listed.decode().split("\0") if name]


def test_no_file_outside_the_labelled_history_names_the_withdrawn_archive():
    found = []
    for name in tracked_files():
        if name.startswith(HISTORY) or not (ROOT / name).is_file():
            continue
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images and other binary files
        found += [f"{name}:{number}: {line.strip()[:100]}" for number, line in enumerate(text.splitlines(), start=1)
                  if NAME in line.lower() and "withdrawn" not in line.lower()]
    assert not found, f"{len(found)} lines still name the withdrawn archive:\n" + "\n".join(found)
