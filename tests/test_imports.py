"""The package's imports: no cycles, none that runs back up, no side effects on import.

Every module of the installed package (engines/, stream/, sleap_live/) is parsed
with `ast`, not imported, and its imports of other package modules make a graph:
at module level (what runs on import), and with the imports inside functions too
(what runs when a function is first called). Neither may have a cycle, and
engines/export/ (the exporters) never imports engines/runners/ (the engines that
run the exports): the loader calls down into the exporters, never the reverse.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Where each part of the `sleap_live` namespace package lives (pyproject's package-dir).
PARTS = {
    "sleap_live.engines": ROOT / "engines",
    "sleap_live.stream": ROOT / "stream",
    "sleap_live.cli": ROOT / "sleap_live" / "cli",
}
PACKAGE = "sleap_live"


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for path in (ROOT / "sleap_live").glob("*.py"):
        name = PACKAGE if path.name == "__init__.py" else f"{PACKAGE}.{path.stem}"
        found[name] = path
    for prefix, folder in PARTS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((prefix, *parts))] = path
    return {name: path for name, path in found.items() if path.is_file()}


def imported(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[str, bool]]:
    """(module imported, at module level) for each import in `tree`, absolute."""
    package = module if is_package else module.rpartition(".")[0]
    for node, top in _imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, top
            continue
        base = node.module or ""
        if node.level:
            anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            base = f"{anchor}.{base}" if base else anchor
        yield base, top
        for alias in node.names:  # `from package import module`
            yield f"{base}.{alias.name}", top


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import statement, and whether it runs on import (not inside a function,
    and not under `if TYPE_CHECKING:`)."""

    def walk(node: ast.AST, top: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, top
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, False)
            elif isinstance(child, ast.If) and _type_checking(child.test):
                yield from walk(ast.Module(body=child.orelse, type_ignores=[]), top)
            else:
                yield from walk(child, top)

    yield from walk(tree, True)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def graph(*, module_level: bool) -> dict[str, set[str]]:
    """Module -> the package modules it imports (at module level, or anywhere)."""
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for target, top in imported(tree, name, path.name == "__init__.py"):
            if target in known and target != name and (top or not module_level):
                edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _is_parent(parent: str, child: str) -> bool:
    return child.startswith(parent + ".")


def without_parent_packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph without a package's imports of its own submodules (an `__init__`
    re-exporting them): Python imports a module's parent packages before it, so a
    submodule importing a sibling through its parent is not a cycle of itself."""
    return {
        name: {target for target in targets if not _is_parent(name, target)}
        for name, targets in edges.items()
    }


def test_the_walk_finds_the_package_and_its_imports():
    known = modules()
    assert "sleap_live.engines.runners.load" in known and "sleap_live.stream.pipeline" in known
    edges = graph(module_level=True)
    assert "sleap_live.engines.runners.base" in edges["sleap_live.engines.runners.load"]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


@pytest.mark.parametrize("module_level", [True, False], ids=["module level", "with functions"])
def test_no_import_cycles(module_level):
    found = cycles(without_parent_packages(graph(module_level=module_level)))
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_exporters_never_import_the_runners():
    edges = graph(module_level=False)
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in edges.items()
        if name.startswith("sleap_live.engines.export")
        for target in targets
        if target.startswith("sleap_live.engines.runners")
    )
    assert upward == []


def test_importing_the_engines_changes_nothing_in_the_process():
    code = (
        "import os, sys\n"
        "before = dict(os.environ)\n"
        "import sleap_live.engines, sleap_live.engines.export, sleap_live.engines.runners.load\n"
        "print(dict(os.environ) == before, 'torch' in sys.modules)\n"
    )
    environment = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=False
    )
    assert result.stdout.split() == ["True", "False"], result.stderr


def test_the_engines_import_nothing_from_the_stream():
    edges = graph(module_level=False)
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in edges.items()
        if name.startswith("sleap_live.engines")
        for target in targets
        if target.startswith("sleap_live.stream")
    )
    assert upward == []
