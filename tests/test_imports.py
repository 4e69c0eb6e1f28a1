"""The import graph of src/speccond (issue 16): no cycle anywhere, and the library never imports the
experiment harness.

Every ``import`` and ``from ... import`` of a speccond module counts, at module level or inside a
function (a lazy import hides a cycle, it does not remove it), except under ``if TYPE_CHECKING:``,
which never runs (annotations only). The implicit import of a parent package
(``speccond.adapters.base`` runs ``speccond/adapters/__init__.py``) is not an edge: Python imports
packages before their modules by design.
"""
from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"
HARNESS = ("speccond.experiments", "speccond.detection")
MAY_IMPORT_THE_HARNESS = ("speccond.experiments", "speccond.detection", "speccond.cli", "speccond.__main__")


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
    typing_only = {
        id(inner) for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for statement in node.body for inner in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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


def test_the_walker_reads_lazy_imports_and_from_imports_of_modules():
    edges = graph()
    assert "speccond.diagnostics" in edges["speccond.experiments.train"]  # inside train._tracker
    assert "speccond.experiments.checkpoint" in edges["speccond.experiments.train"]  # from package import module
    assert "speccond.api" in edges["speccond"]


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
