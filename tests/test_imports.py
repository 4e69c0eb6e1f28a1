"""The import graph of src/speccond: no cycle anywhere, the library never imports the experiment harness,
the core never imports the public verbs, and the harness's rooms import downwards only, in the order the
README's Development section gives (LAYERS below).

Every ``import`` and ``from ... import`` of a speccond module counts, at module level, inside a function (a
lazy import hides a cycle, it does not remove it) and under ``if TYPE_CHECKING:`` (a cycle of annotations
is still two modules that cannot be understood apart). The implicit import of a parent package
(``speccond.adapters.base`` runs ``speccond/adapters/__init__.py``) is not an edge: Python imports
packages before their modules by design. A module named by its import path is not an edge either: a
task's file in the task registry (harness/tasks/registry.py) or a task's plugin (harness/tasks/plugins.py);
that is how a plugin stays above the rooms that run it.
"""
from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"
HARNESS = "speccond.harness"
MAY_IMPORT_THE_HARNESS = ("speccond.harness", "speccond.__main__")  # __main__: ``python -m speccond`` is the CLI
CORE = "speccond.core"
# The harness's rooms, lowest first: a module imports only modules of its own room or of rooms below it.
# Each entry is a module prefix; a module belongs to the longest prefix it starts with.
LAYERS = (
    ("speccond.harness.values", "speccond.harness.methods", "speccond.harness.models.registry",
     "speccond.harness.packages", "speccond.harness.tasks.registry", "speccond.harness.tasks.catalogue"),  # catalogues
    ("speccond.harness.config",),  # TrainConfig checks its names against the catalogues
    ("speccond.harness.tasks",),  # how each task reads its data; plugins by path
    ("speccond.harness.models",),  # what a run trains
    ("speccond.harness.training",),  # one run: the loop, its folder, reading it back
    ("speccond.harness.reporting",),  # tables and plots from run folders
    ("speccond.harness.protocol",),  # comparisons and tuning
    ("speccond.harness.tasks.detection",),  # a plugin task: above all that runs it, imported by none
    ("speccond.harness.cli", "speccond.harness.cli_advice", "speccond.harness.demo"),  # the command line
)


def modules() -> dict[str, Path]:
    found = {}
    for path in (SOURCE / "speccond").rglob("*.py"):
        name = ".".join(path.relative_to(SOURCE).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The speccond modules ``name`` imports (a ``from package import module`` names the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {target for target in out if target in known and target != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_walker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_walker_reads_lazy_typing_and_from_imports_of_modules():
    edges = graph()
    assert "speccond.diagnostics" in edges["speccond.harness.training.train"]  # inside train._tracker
    assert "speccond.harness.training.checkpoint" in edges["speccond.harness.training.train"]  # from package import module
    assert "speccond.harness.config.train_config" in edges["speccond.harness.protocol.engines"]  # under TYPE_CHECKING
    assert "speccond.api" in edges["speccond"]


def layer(module: str) -> int | None:
    """The index in LAYERS of the harness room ``module`` belongs to (its longest matching prefix), or None."""
    matches = [(len(prefix), index) for index, prefixes in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    return max(matches)[1] if matches else None


def test_every_harness_module_has_a_room():
    assert [name for name in graph() if name.startswith(HARNESS + ".") and layer(name) is None] == []


def test_the_layering_check_sees_an_upward_import():
    assert layer("speccond.harness.tasks.detection.task") > layer("speccond.harness.training.train") > layer(
        "speccond.harness.tasks.datasets") > layer("speccond.harness.config.train_config") > layer("speccond.harness.methods")


def test_no_import_cycle_in_speccond():
    assert cycles(graph()) == []


def test_the_library_never_imports_the_harness():
    wrong = sorted(
        (name, target)
        for name, targets in graph().items()
        if not name.startswith(MAY_IMPORT_THE_HARNESS)
        for target in targets
        if target.startswith(HARNESS)
    )
    assert wrong == []


def test_the_harness_rooms_import_downwards_only():
    upward = sorted(
        (name, target)
        for name, targets in graph().items() if layer(name) is not None
        for target in targets if layer(target) is not None and layer(target) > layer(name)
    )
    assert upward == []


def test_the_core_never_imports_the_public_verbs_or_anything_above_it():
    wrong = sorted((name, target) for name, targets in graph().items() if name.startswith(CORE)
                   for target in targets if not target.startswith(CORE))
    assert wrong == []
