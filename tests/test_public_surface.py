"""The harness's public surface (speccond.harness.PUBLIC): the names scripts/ import, each read from the module
that defines it when first used. The scripts import only these, never a harness room by path."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import speccond.harness as harness

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_resolves_to_the_object_its_module_defines():
    import importlib

    for name, where in harness.PUBLIC.items():
        module, attribute = where if isinstance(where, tuple) else (where, name)
        assert getattr(harness, name) is getattr(importlib.import_module(module), attribute), name


def test_an_unknown_name_is_an_attribute_error_that_lists_the_public_ones():
    try:
        harness.tune_everything  # noqa: B018
    except AttributeError as error:
        assert "has no attribute 'tune_everything'" in str(error) and "TrainConfig" in str(error)
    else:
        raise AssertionError("an unknown name resolved")


def test_importing_the_harness_loads_none_of_its_rooms():
    code = ("import sys, speccond.harness; "
            "sys.exit(any(m.startswith('speccond.harness.') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_the_scripts_import_the_harness_only_through_its_public_surface():
    for script in sorted((ROOT / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("speccond.harness"):
                assert node.module == "speccond.harness", f"{script.name} imports {node.module}"
                assert all(alias.name in harness.PUBLIC for alias in node.names), script.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("speccond.harness.") for a in node.names), script.name
