"""The layers of docs/architecture.md, enforced: who may import whom, and no import circles.

Every ``import`` in every module counts, function-local ones included (a circle hidden in a
function is still a circle), except those under ``if TYPE_CHECKING:`` (annotations only).
Modules found by name at run time (task discovery, the store finding interop's formats)
are plug-in lookups, not imports, and are not seen here by design.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# package prefix -> source folder (pyproject's package-dir: tokenizers/ and tasks/ install inside tokformer)
ROOTS = {"tokformer.tokenizers": REPO / "tokenizers", "tokformer.tasks": REPO / "tasks",
         "tokformer": REPO / "tokformer"}
#: layer -> the layers it may import (itself included)
ALLOWED = {
    "core": {"core"},
    "tokenizers": {"core", "tokenizers"},
    "runtime": {"core", "runtime"},
    "store": {"core", "runtime", "store"},
    "engine": {"core", "runtime", "store", "engine"},
    "interop": {"core", "tokenizers", "runtime", "store", "interop"},
    "tasks": {"core", "tokenizers", "engine", "interop", "tasks"},
}


def layer(module: str) -> str:
    """The layer of a tokformer module name."""
    parts = module.split(".")
    if parts[:2] == ["tokformer", "tokenizers"]:
        return "tokenizers"
    if parts[:2] == ["tokformer", "tasks"]:
        return "tasks"
    if len(parts) > 1 and parts[1] in ("runtime", "store", "engine", "interop"):
        return parts[1]
    return "core"


def modules() -> dict[str, Path]:
    """Every tokformer module name -> its file (the CLI, a symlink to the top-level cli.py, excluded)."""
    found = {}
    for prefix, root in ROOTS.items():
        for file in root.rglob("*.py"):
            relative = file.relative_to(root).with_suffix("")
            if prefix == "tokformer" and relative.parts[0] in ("cli",):
                continue
            parts = [p for p in relative.parts if p != "__init__"]
            found[".".join([prefix, *parts])] = file
    return found


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def exported(package: Path) -> set[str]:
    """The names a package's ``__init__.py`` lists in ``__all__`` (its public surface)."""
    init = package / "__init__.py"
    if not init.is_file():
        return set()
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def imports(file: Path, known: dict[str, Path]) -> set[str]:
    """The tokformer modules ``file`` imports: ``from pkg import name`` is the submodule ``pkg.name``
    unless ``pkg`` exports ``name`` (``from tokformer.engine import progress`` is the function)."""
    tree = ast.parse(file.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = set()
    for node in ast.walk(tree):
        if _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("tokformer")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tokformer"):
            public = exported(known[node.module].parent) if node.module in known else set()
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known and alias.name not in public else node.module)
    return {name for name in found if name in known}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(file, known) - {name} for name, file in known.items()}


def test_the_module_map_finds_every_layer(graph: dict[str, set[str]]) -> None:
    layers = {layer(name) for name in graph}
    assert layers == set(ALLOWED), layers
    assert "tokformer.store.loader" in graph and "tokformer.tasks.lm" in graph and "tokformer.tokenizers.bpe" in graph


def test_no_module_imports_a_layer_above_its_own(graph: dict[str, set[str]]) -> None:
    upward = sorted(f"{name} ({layer(name)}) imports {target} ({layer(target)})"
                    for name, targets in graph.items() for target in targets
                    if layer(target) not in ALLOWED[layer(name)])
    assert not upward, "\n".join(upward)


def test_tasks_use_the_engine_through_its_public_names_only(graph: dict[str, set[str]]) -> None:
    internal = sorted(f"{name} imports {target}" for name, targets in graph.items() if layer(name) == "tasks"
                      for target in targets if layer(target) == "engine" and target != "tokformer.engine")
    assert not internal, "\n".join(internal)


def test_docs_engine_md_lists_every_public_engine_name() -> None:
    """A task may import only what ``tokformer.engine`` exports, so docs/engine.md's table of them must be whole."""
    import tokformer.engine

    section = (REPO / "docs" / "engine.md").read_text(encoding="utf-8").split("### The engine's public surface")[1]
    table = section.split("\n\n")[2]  # the heading, the paragraph, then the table
    listed = {name for row in table.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert listed == set(tokformer.engine.__all__), (sorted(set(tokformer.engine.__all__) - listed),
                                                     sorted(listed - set(tokformer.engine.__all__)))


def test_there_are_no_import_circles(graph: dict[str, set[str]]) -> None:
    """Between modules, and between layers (a package-level circle: A's module imports B's and back)."""
    cycles = [cycle for cycle in _cycles(graph)]
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)
    layers: dict[str, set[str]] = {}
    for name, targets in graph.items():
        layers.setdefault(layer(name), set()).update(layer(t) for t in targets if layer(t) != layer(name))
    assert not list(_cycles(layers)), layers


def _cycles(graph: dict[str, set[str]]):
    """One circle per strongly connected component with more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
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

    found: list[list[str]] = []
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_sees_a_circle_and_an_upward_import() -> None:
    """The checks can fail: a made-up graph with both faults is caught."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert layer("tokformer.store.loader") == "store" and "engine" not in ALLOWED["store"]
