"""The package's modules form layers: the engine's stages import only downward (``LAYERS``), and
no import cycle among s3arch and s3arch_airflow modules, counting the imports made inside
functions (a cycle hidden in a function still ties the two modules together; it only moves the
failure from import time to the first call).

Parsed with ``ast``, nothing is imported. ``from package import name`` depends on the module
``package.name`` when there is one, else on ``package`` itself (its ``__init__``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"s3arch": ROOT / "tasks", "s3arch_airflow": ROOT / "plugins" / "s3arch_airflow"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        out |= {target for target in targets if target in modules and target != name}
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in {component}")


def test_the_graph_sees_every_module_and_imports_inside_functions():
    graph = import_graph()
    assert {"s3arch", "s3arch.io.s3", "s3arch.produce.segments.plan", "s3arch_airflow.operators"} <= set(graph)
    assert "s3arch.archive" in graph["s3arch"]  # imported inside archive_prefix()
    assert "s3arch.core.errors" in graph["s3arch.produce.segments.workers"]


def test_the_cycle_finder_prints_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycle_among_s3arch_modules():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


# The engine's stages, lowest first: a module imports from its own stage and the stages below
# it, never from a stage above or beside it (produce and restore are siblings that share what
# is below them). ops sits on protocol: the scrub asks the commit protocol's own question, which
# objects of a day no part holds (protocol/parts.py). s3arch's __init__ and __main__ sit on the
# CLI, the Airflow layer on everything.
LAYERS = (("core",), ("io",), ("format",), ("produce", "restore"), ("protocol",), ("ops",), ("archive",), ("cli",),
          ("__init__", "__main__"), ("s3arch_airflow",))
LEVEL = {stage: level for level, stages in enumerate(LAYERS) for stage in stages}


def stage(module: str) -> str:
    package, _, rest = module.partition(".")
    return package if package != "s3arch" else (rest.split(".")[0] or "__init__")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module from a stage above or beside its own, as 'a -> b (stage of a
    -> stage of b)'."""
    found = []
    for module in sorted(graph):
        for target in sorted(graph[module]):
            here, there = stage(module), stage(target)
            if here != there and LEVEL[there] >= LEVEL[here]:
                found.append(f"{module} -> {target} ({here} imports {there}, "
                             f"{'beside' if LEVEL[there] == LEVEL[here] else 'above'} it)")
    return found


def test_every_module_is_in_a_stage_of_the_layer_order():
    unplaced = sorted({stage(module) for module in import_graph()} - set(LEVEL))
    assert not unplaced, f"stages missing from LAYERS in tests/test_structure.py: {unplaced}"


def test_the_layer_check_names_an_upward_and_a_sideways_import():
    graph = {"s3arch.io.listing": {"s3arch.format.tarwriter", "s3arch.core.cost"},
             "s3arch.restore.extract": {"s3arch.produce.pipeline"}, "s3arch.cli": {"s3arch.archive"}}
    assert upward_imports(graph) == [
        "s3arch.io.listing -> s3arch.format.tarwriter (io imports format, above it)",
        "s3arch.restore.extract -> s3arch.produce.pipeline (restore imports produce, beside it)"]


def test_the_engine_stages_import_only_downward():
    found = upward_imports(import_graph())
    order = " < ".join(", ".join(stages) for stages in LAYERS)
    assert not found, f"imports against the layer order {order}:\n" + "\n".join(found)


def test_no_module_imports_another_modules_private_name():
    """A name with a leading underscore is its module's own: another module that needs it
    needs a public name (issue 45, Deliver 5)."""
    found = []
    for path in [*(ROOT / "tasks").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("s3arch"):
                found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, "private names imported across modules:\n" + "\n".join(found)
