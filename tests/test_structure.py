"""The package's modules form layers: the engine's stages import only downward (``LAYERS``), and
no import cycle among s3arch and s3arch_airflow modules, counting the imports made inside
functions (a cycle hidden in a function still ties the two modules together; it only moves the
failure from import time to the first call).

Parsed with ``ast``, nothing is imported. ``from package import name`` depends on the module
``package.name`` when there is one, else on ``package`` itself (its ``__init__``)."""

from __future__ import annotations

import ast
import re
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
# is below them). format is bytes in, bytes out; stored reads and writes its objects in S3. ops sits on protocol: the scrub asks the commit protocol's own question, which
# objects of a day no part holds (protocol/parts.py). s3arch's __init__ and __main__ sit on the
# CLI, the Airflow layer on everything.
LAYERS = (("core",), ("io",), ("format",), ("stored",), ("produce", "restore"), ("protocol",), ("ops",), ("archive",), ("cli",),
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


# --- Tests patch no private name --------------------------------------------------------------

def _dotted_root(node: ast.AST) -> ast.AST:
    """The innermost value of ``a.b(c)[d].e``: the name ``a``."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _reaches_private(node: ast.AST) -> bool:
    """Whether ``a._b.c`` passes through a private attribute on its way."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _is_private(name: str) -> bool:
    return name.isidentifier() and name.startswith("_") and not name.startswith("__")


def _ours(nodes: list[ast.AST]) -> set[str]:
    """The names a test module binds to s3arch or s3arch_airflow (``nodes``: its imports and
    assignments): what it imports from them, and (to a fixpoint, whatever the scope) the
    names it assigns from expressions on those, such as ``pool = connections.ConnectionPool(...)``
    or ``compressor = s3arch.x.Y``."""
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                      if alias.name.split(".")[0] in PACKAGES}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES and not node.level:
            found |= {alias.asname or alias.name for alias in node.names}
    assigns = [node for node in nodes if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value]
    while True:
        before = len(found)
        for node in assigns:
            root = _dotted_root(node.value)
            if isinstance(root, ast.Name) and root.id in found:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found |= {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        if len(found) == before:
            return found


# What a module must contain to patch a private name at all (a private name quoted, a dotted
# target with a private part, a private attribute given with a name, an assignment to a
# private attribute): the others are not parsed.
_MAY_PATCH = re.compile(r"""(["'])_[A-Za-z0-9]\w*\1|["']s3arch[\w.]*\._|\._[A-Za-z0-9]\w*\s*"""
                        r"""(,\s*["']|=[^=]|[-+*/|&]=)""")


def private_patches(source: str, where: str = "") -> list[str]:
    """Where a test module patches a private name of s3arch or s3arch_airflow: a call given
    one of their objects and a private attribute name (``monkeypatch.setattr(workers,
    "_run")``, ``mock.patch.object``, ``setattr``, or a helper of the test's own such as
    ``slowed(monkeypatch, CommitProtocol, "_clean_stale", 5)``), a patch target reached
    through a private name (``monkeypatch.setattr(pipeline._Stream, "run", ...)``), a dotted
    target with a private part (``mock.patch("s3arch.cli._run")``), or an assignment to a
    private attribute of one of their objects (``lease._etag = ...``)."""
    if not _MAY_PATCH.search(source):
        return []
    nodes = [node for node in ast.walk(ast.parse(source))
             if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Call))]
    ours = _ours(nodes)

    def on_ours(node: ast.AST) -> bool:
        root = _dotted_root(node)
        return isinstance(root, ast.Name) and root.id in ours

    found = []
    for node in nodes:
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")):
            args = [*node.args, *(k.value for k in node.keywords)]
            texts = [a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not texts:
                continue
            targets = [a for a in args if on_ours(a)]
            for text in texts:
                parts = text.split(".")
                if parts[0] in PACKAGES and len(parts) > 1 and any(_is_private(p) for p in parts):
                    found.append(f"{where}:{node.lineno}: {text}")
                elif _is_private(text) and targets:
                    found.append(f"{where}:{node.lineno}: {ast.unparse(targets[0])}.{text}")
            if any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args[1:2]) and \
                    any(_reaches_private(a) for a in targets):
                found.append(f"{where}:{node.lineno}: {ast.unparse(targets[0])}")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Attribute) and _is_private(target.attr) and on_ours(target.value):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(target)} = ...")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def test_the_private_patch_finder_names_each_way_of_patching():
    source = '''
import s3arch.protocol.commit
from unittest import mock
from s3arch.produce.segments import workers
from s3arch.io.connections import ConnectionPool
import botocore.handlers

def test(monkeypatch):
    pool = ConnectionPool(None, "h", 80, None, None, 1)
    monkeypatch.setattr(workers, "_run_workers", None)
    monkeypatch.setattr(pool, "_open", None)
    slowed(monkeypatch, s3arch.protocol.commit.CommitProtocol, "_clean_stale", 5)
    monkeypatch.setattr(s3arch.produce.pipeline._Stream, "run", None)
    mock.patch("s3arch.cli._run")
    pool._idle = []
    monkeypatch.setattr(workers, "run_workers", None)
    monkeypatch.setattr(botocore.handlers, "_handle_200_error", None)
    getattr(pool, "_open")
    pool.opened = 0
'''
    assert [line.split(": ", 1)[1] for line in private_patches(source)] == [
        "workers._run_workers", "pool._open", "s3arch.protocol.commit.CommitProtocol._clean_stale",
        "s3arch.produce.pipeline._Stream", "s3arch.cli._run", "pool._idle = ..."]
    alone = "import s3arch.produce.pipeline\nmonkeypatch.setattr(s3arch.produce.pipeline._Stream, 'run', None)\n"
    assert [line.split(": ", 1)[1] for line in private_patches(alone)] == ["s3arch.produce.pipeline._Stream"]


def test_no_test_patches_a_private_name():
    """A test that needs to reach inside the engine does it through a public seam (a public
    name, a parameter) or through a real server (MinIO on loopback, tests/faultproxy.py), so
    that the engine's private names may change without the tests noticing (issue 45,
    Deliver 5). Names of other libraries (botocore's hooks) are not this check's business."""
    found = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        found += private_patches(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "tests patching private names of s3arch or s3arch_airflow:\n" + "\n".join(found)


# The S3 boundary (tasks/io/store.py): above tasks/io, nothing speaks boto3, botocore or awscrt,
# and nothing classifies their exceptions itself. The exceptions, each for its reason:
BOUNDARY_EXCEPTIONS = {
    "s3arch.cli.clients": {"boto3"},  # the CLI makes the boto3 Session its flags describe
}
SPEAKS_S3 = ("boto3", "botocore", "awscrt")
CLASSIFIES = {"IO_ERRORS", "translate"}


def _boundary_crossings(name: str, path: Path) -> list[str]:
    crossings = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom):
            modules, names = [node.module or ""], [alias.name for alias in node.names]
        else:
            continue
        allowed = BOUNDARY_EXCEPTIONS.get(name, set())
        crossings += [f"{name}:{node.lineno} imports {m}" for m in modules
                      if m.split(".")[0] in SPEAKS_S3 and m.split(".")[0] not in allowed
                      and not (isinstance(node, ast.ImportFrom) and m.startswith("mypy_boto3"))]
        crossings += [f"{name}:{node.lineno} imports {n}" for n in names if n in CLASSIFIES]
    return crossings


def test_nothing_above_the_s3_boundary_speaks_boto3_or_classifies_its_errors():
    above = {name: path for name, path in _modules().items()
             if not name.startswith("s3arch.io") and name != "s3arch.core.errors"}
    crossings = [c for name, path in sorted(above.items()) for c in _boundary_crossings(name, path)]
    assert crossings == [], "send S3 requests through the store (tasks/io/store.py):\n" + "\n".join(crossings)


# --- The fast tier guards crash safety ----------------------------------------------------------

def fast_tests() -> list[str]:
    """The tests ``make test-fast`` runs (not marked slow, by a decorator or the module's
    ``pytestmark``), as ``file::name``. Read line by line, not parsed: every test module is
    read, and this check runs in the fast tier too."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        text = path.read_text()
        if re.search(r"^pytestmark\s*=.*\bslow\b", text, re.M):
            continue
        decorators = None  # the decorator lines above the next top-level def, once one starts
        for line in text.splitlines():
            if line.startswith("@"):
                decorators = (decorators or "") + line
            elif decorators is not None and line[:1] in (" ", "\t", ")", "]", "}"):
                decorators += line  # a decorator's continuation
            else:
                name = re.match(r"def (test_\w+)", line)
                if name and not re.search(r"\bslow\b", decorators or ""):
                    found.append(f"{path.name}::{name.group(1)}")
                decorators = None
    return found


def test_the_fast_tier_keeps_a_kill_a_lost_lease_a_lost_answer_and_a_deletion():
    """``make test-fast``, the loop run after each change, exercises crash safety: a SIGKILL,
    a lease lost or taken over, a write whose answer was lost, a source deletion (issue 45,
    Deliver 5). Moving the last of a kind to the slow tier fails here."""
    fast = fast_tests()
    kinds = {"kill": r"sigkill|on_kill|killed", "lease loss": r"lease.*(lost|loses|taken_over)|lost_lease",
             "lost answer": r"answer_was_lost", "deletion": r"delet"}
    missing = [kind for kind, pattern in kinds.items() if not any(re.search(pattern, test) for test in fast)]
    assert not missing, f"make test-fast runs no test of: {', '.join(missing)}"
