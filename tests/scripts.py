"""Import a file of scripts/ or benchmarks/ (not packages) as a module, so tests can call its functions."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).parents[1] / "scripts"


def load_script(name: str, folder: str = "scripts") -> ModuleType:
    """<folder>/<name>.py as a module (its ``main`` is not run), registered as ``<folder>.<name>`` while it
    runs, as dataclasses need of the module that defines one."""
    spec = importlib.util.spec_from_file_location(f"{folder}.{name}", SCRIPTS.parent / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
