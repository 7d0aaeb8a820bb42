"""The services' structure: no hetpool import hidden inside a function (the way cycles were
dodged), and no import cycle among server/services modules (services/__init__.py gives
the layering).

Both checks read the source with `ast`; each is also run on a small bad example, so a
checker that stopped finding anything would fail here too.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "hetpool"
# Where an import inside a function is never needed (DESIGN.md: a cycle means a module is
# in the wrong place). Optional third-party packages may still be imported lazily.
NO_LAZY_HETPOOL_IMPORTS = ("server", "scheduling", "governance", "core", "catalog", "sim")
SERVICES = "hetpool.server.services"


def _is_hetpool(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "hetpool"
    return any(alias.name.split(".")[0] == "hetpool" for alias in node.names)


def lazy_hetpool_imports(source: str, filename: str = "<src>") -> list[str]:
    """'file:line function' for each hetpool import placed inside a function."""
    found = []
    for fn in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _is_hetpool(node):
                    found.append(f"{filename}:{node.lineno} in {getattr(fn, 'name', 'lambda')}()")
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import that can run: at module level, in try/if blocks and inside functions
    (a deferred import is still a dependency), but not under `if TYPE_CHECKING:`."""
    out: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))
    return out


def service_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module name (e.g. 'tasks') → the service modules it imports."""
    graph: dict[str, set[str]] = {name: set() for name in sources}
    for name, source in sources.items():
        for node in _runtime_imports(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif node.module == SERVICES:  # from hetpool.server.services import tasks, audit
                targets = [f"{SERVICES}.{a.name}" for a in node.names]
            else:
                targets = [node.module or ""]
            for target in targets:
                if target.startswith(SERVICES + "."):
                    dep = target[len(SERVICES) + 1 :].split(".")[0]
                    if dep in sources and dep != name:
                        graph[name].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _service_sources(src: Path = SRC) -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted((src / "server" / "services").glob("*.py")) if p.stem != "__init__"}


def test_no_hetpool_import_inside_a_function() -> None:
    found = []
    for package in NO_LAZY_HETPOOL_IMPORTS:
        for path in sorted((SRC / package).rglob("*.py")):
            found += lazy_hetpool_imports(path.read_text(), str(path.relative_to(SRC)))
    assert not found, "hetpool imports inside functions (move the module instead):\n" + "\n".join(found)


def test_no_import_cycle_among_services() -> None:
    found = cycles(service_graph(_service_sources()))
    assert not found, f"import cycles among server/services: {found}"


def _imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in _runtime_imports(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        else:
            names.update([node.module or "", *(f"{node.module}.{a.name}" for a in node.names)])
    return names


def test_workers_share_code_through_services_not_each_other() -> None:
    """Each pipeline stands alone (the reconciler completes a preemption through
    services/task_lifecycle, not the scheduler worker); only loop.py, which runs them
    all, lanes.py, which runs the dispatcher's submits, and the services never import a worker module."""
    workers = SRC / "server" / "workers"
    found = []
    for path in sorted([*workers.glob("*.py"), *(SRC / "server" / "services").glob("*.py")]):
        if path.name in ("loop.py", "lanes.py", "__init__.py") and path.parent == workers:
            continue
        for name in _imported_modules(path.read_text()):
            if name.startswith("hetpool.server.workers.") and name.split(".")[3] != path.stem:
                found.append(f"{path.relative_to(SRC)} imports {name}")
    assert not found, "\n".join(found)


def test_services_import_only_modules_listed_before_them_in_the_package_docstring() -> None:
    """services/__init__.py lists the modules bottom-up: the list must name every module
    once, and each module may import only those listed before it."""
    sources = _service_sources()
    doc = ast.get_docstring(ast.parse((SRC / "server" / "services" / "__init__.py").read_text())) or ""
    # The indented block: a layer's name, then its modules; what is in parentheses explains.
    listed = "\n".join(line[15:] for line in doc.splitlines() if line.startswith("  "))
    order = []
    for word in re.findall(r"[a-z_]+", re.sub(r"\([^)]*\)", "", listed)):
        if word in sources and word not in order:
            order.append(word)
    assert sorted(order) == sorted(sources), f"not in the list: {sorted(set(sources) - set(order))}"
    position = {name: i for i, name in enumerate(order)}
    upward = [f"{name} imports {dep}" for name, deps in service_graph(sources).items() for dep in deps if position[dep] > position[name]]
    assert not upward, "imports against the layering of services/__init__.py:\n" + "\n".join(upward)


def test_the_lazy_import_check_finds_one() -> None:
    source = textwrap.dedent(
        """
        import json
        from hetpool.core.errors import SpecError

        def f():
            import ray  # optional third-party: allowed
            from hetpool.server.services import tasks
            return tasks

        async def g():
            from . import sibling
        """
    )
    assert lazy_hetpool_imports(source, "m.py") == ["m.py:7 in f()", "m.py:11 in g()"]


def test_the_cycle_check_finds_one_and_ignores_type_checking_imports() -> None:
    sources = {
        "a": "from hetpool.server.services import b\n",
        "b": "from hetpool.server.services.c import x\n",
        "c": "import hetpool.server.services.a\n",
        "d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hetpool.server.services.e import E\n",
        "e": "from hetpool.server.services import d\n",
        "f": "def g():\n    from hetpool.server.services import a\n",  # deferred: still an edge
        "g": "from hetpool.server.services import f\n",
    }
    assert cycles(service_graph(sources)) == [["a", "b", "c"]]
    sources["a"] += "def h():\n    from hetpool.server.services import g\n"
    assert cycles(service_graph(sources)) == [["a", "b", "c", "f", "g"]]


def dict_stashes(source: str, filename: str = "<src>") -> list[str]:
    """'file:line' for each value written into or read from an object's `__dict__` by name
    (`x.__dict__["k"] = …`, `x.__dict__.setdefault("k", …)`, `.get("k")`, `.pop("k")`):
    state hidden from the class that should declare it."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        target = None
        if isinstance(node, ast.Subscript):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("setdefault", "get", "pop"):
            target = node.func.value
        if isinstance(target, ast.Attribute) and target.attr == "__dict__":
            found.append(f"{filename}:{node.lineno}")
    return found


def test_no_value_is_stashed_in_an_objects_dict() -> None:
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in dict_stashes(path.read_text(), str(path.relative_to(SRC)))]
    assert not found, "values stashed in __dict__ (declare a field, a cached_property or use ctx.process_state):\n" + "\n".join(found)


def test_the_stash_check_finds_one() -> None:
    bad = 'def f(ctx):\n    ctx.__dict__["cache"] = 1\n    return ctx.__dict__.setdefault("other", 2)\n'
    assert dict_stashes(bad) == ["<src>:2", "<src>:3"]
