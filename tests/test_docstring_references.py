"""Docstrings and comments point at what holds a claim: a file of the repository (a doc page, a test, a
script), never an issue number a reader of the code cannot open."""
from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/**/*.py")])
ISSUE = re.compile(r"\bissues? (?:#\s*)?[0-9]", re.IGNORECASE)  # the word, then a number
CITED = re.compile(r"(?<![\w/.])((?:docs|tests|scripts|benchmarks)/[\w./*-]*\w\.(?:md|py|sh|json))")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_and_every_cited_file_exists(path):
    text = path.read_text()
    issues = [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group()!r}" for m in ISSUE.finditer(text)]
    missing = [m.group(1) for m in CITED.finditer(text) if not glob.glob(str(ROOT / m.group(1)))]
    assert issues == [], f"{path}: name the feature, doc or test instead of the issue"
    assert missing == [], f"{path} cites files the repository does not hold"
