"""The import rule of DESIGN.md, checked on every package of src/hetpool.

Imports point inward only: core ← catalog ← scheduling ← governance ← server;
core ← engines (engines also read catalog.devices, so catalog is allowed there);
core ← agent (agent also reads the catalog); scheduling ← sim. The outer packages
(server, web, cli, client) have explicit allowed sets: web, cli and client may use the
typed API models of `hetpool.server.schemas` (which import only pydantic, the standard
library and hetpool.core), not the server's services or database, except in the few
modules named in ALLOWANCES, each with its reason.

Every import counts: `import a.b`, `from a import b`, `from hetpool import x`, relative
imports (resolved against the importing module) and imports inside functions or under
TYPE_CHECKING. A new package without a rule fails. Module size and function length are
guarded here too (STYLE.md: modules under ~600 lines, functions under ~100), and so is the
absence of hetpool imports inside functions in the core packages and the server.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hetpool"

# Web frameworks, databases, HTTP clients, servers, CLI toolkits and engine SDKs: none of
# them belongs in the domain or the scheduling core.
OUTSIDE_WORLD = frozenset(
    {"fastapi", "starlette", "sqlalchemy", "alembic", "httpx", "uvicorn", "requests", "psycopg", "jinja2", "typer", "kubernetes", "ray", "urllib3"}
)
# What an engine may not use: it talks to its engine (HTTP clients and the engine's own
# SDK are its job) but serves nothing, stores nothing in hetpool's database, renders no
# page and parses no command line.
NOT_FOR_ENGINES = frozenset({"fastapi", "starlette", "sqlalchemy", "alembic", "psycopg", "jinja2", "typer", "uvicorn"})
SERVER_SIDE = frozenset({"sqlalchemy", "alembic", "psycopg", "uvicorn"})


@dataclass(frozen=True)
class Rule:
    """What the modules of one package may import (besides the package itself)."""

    hetpool: frozenset[str]  # dotted prefixes: "hetpool.core" covers hetpool.core.*
    forbidden: frozenset[str] = frozenset()  # third-party top-level packages it must not import
    only: frozenset[str] | None = None  # when set: the only third-party packages allowed (besides the stdlib)


def _hp(*names: str) -> frozenset[str]:
    return frozenset(f"hetpool.{n}" for n in names)


# package (a path under src/hetpool; the longest match wins) → its rule
RULES: dict[str, Rule] = {
    "core": Rule(_hp(), OUTSIDE_WORLD),
    "catalog": Rule(_hp("core"), OUTSIDE_WORLD),
    "scheduling": Rule(_hp("core", "catalog"), OUTSIDE_WORLD),
    "governance": Rule(_hp("core", "catalog", "scheduling"), OUTSIDE_WORLD),
    "sim": Rule(_hp("core", "catalog", "scheduling", "governance"), OUTSIDE_WORLD),
    "agent": Rule(_hp("core", "catalog"), OUTSIDE_WORLD),
    "engines": Rule(_hp("core", "catalog"), NOT_FOR_ENGINES),
    "server": Rule(_hp("core", "catalog", "scheduling", "governance", "engines", "sim"), frozenset({"typer"})),
    "server/schemas": Rule(_hp("core", "server.schemas"), only=frozenset({"pydantic"})),
    "web": Rule(_hp("core", "server.schemas"), SERVER_SIDE | {"typer"}),
    "client": Rule(_hp("core", "server.schemas"), NOT_FOR_ENGINES),
    "cli": Rule(_hp("core", "catalog", "governance", "sim", "agent", "client", "server.schemas"), NOT_FOR_ENGINES - {"typer"}),
}

# Named exceptions: module (path under src/hetpool) → what it may import beyond its rule.
ALLOWANCES: dict[str, frozenset[str]] = {
    # The app mounts the dashboard.
    "server/app.py": _hp("web.routes"),
    # The dashboard signs users in with the server's own session and token services.
    "web/routes.py": _hp("server.services.auth", "server.services.web_sessions"),
    "web/session.py": _hp("server.services.web_sessions"),
    # The dashboard renders a task's explanation (reason code + facts) with the core's one
    # renderer, in its reader's language.
    "web/reasons.py": _hp("scheduling.explain"),
    # `hetpool up`/`serve` runs the server in-process.
    "cli/serve.py": _hp("server") | {"uvicorn"},
    # `hetpool db` migrates, checks and backs up the database itself.
    "cli/db.py": _hp("server") | {"sqlalchemy", "alembic"},
    # `hetpool admin reset-token` needs the database when no admin token is left.
    "cli/main.py": _hp("server.db.session", "server.services.auth", "server.settings"),
    # `hetpool audit verify --offline` checks the chain straight from the database.
    "cli/audit_offline.py": _hp("server.config_file", "server.services.audit_anchor") | {"sqlalchemy"},
}

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100
# The scheduling core is read one phase at a time (issue 16): its functions stay shorter.
MAX_SCHEDULING_FUNCTION_LINES = 80
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass
class Tree:
    """A source tree of the `hetpool` package to check (the real one, or a fake one in tests)."""

    root: Path  # the directory of the hetpool package
    rules: dict[str, Rule] = field(default_factory=lambda: RULES)
    allowances: dict[str, frozenset[str]] = field(default_factory=lambda: ALLOWANCES)

    def packages(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and (p / "__init__.py").exists())

    def modules(self, package: str = "") -> list[Path]:
        return sorted((self.root / package).rglob("*.py"))

    def is_module(self, dotted: str) -> bool:
        parts = dotted.split(".")[1:]
        path = self.root.joinpath(*parts) if parts else self.root
        return (path / "__init__.py").exists() or path.with_suffix(".py").exists()

    def rule_for(self, rel: Path) -> tuple[str, Rule] | None:
        parts = rel.parts[:-1]
        for n in range(len(parts), 0, -1):
            key = "/".join(parts[:n])
            if key in self.rules:
                return key, self.rules[key]
        return None


def imported_names(tree: Tree, path: Path) -> list[str]:
    """Every module `path` imports, as absolute dotted names, relative imports resolved.

    `from x import y` counts as `x.y` where that is a module (so that `from hetpool
    import server` or `from hetpool.server import schemas` name what they import), else as `x`.
    """
    rel = path.relative_to(tree.root)
    package = ["hetpool", *rel.parts[:-1]]  # the package the module belongs to
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                names.append(candidate if module.split(".")[0] == "hetpool" and tree.is_module(candidate) else module)
    return names


def _allowed(name: str, prefixes: frozenset[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(tree: Tree, package: str) -> list[str]:
    """Imports in `package` that its rule (and the named allowances) do not allow."""
    found = []
    for path in tree.modules(package):
        rel = path.relative_to(tree.root)
        matched = tree.rule_for(rel)
        if matched is None:
            found.append(f"{rel}: no rule for its package")
            continue
        key, rule = matched
        own = frozenset({"hetpool." + key.replace("/", ".")})
        extra = tree.allowances.get(rel.as_posix(), frozenset())
        for name in imported_names(tree, path):
            top = name.split(".")[0]
            if top == "hetpool":
                # The root package itself holds only __version__.
                if name != "hetpool" and not _allowed(name, rule.hetpool | own | extra):
                    found.append(f"{rel} imports {name}")
            elif top in STDLIB or top in extra:
                continue
            elif top in rule.forbidden or (rule.only is not None and top not in rule.only):
                found.append(f"{rel} imports {name}")
    return found


def packages_without_a_rule(tree: Tree) -> list[str]:
    return [p for p in tree.packages() if p not in tree.rules]


def long_modules(tree: Tree, limit: int = MAX_MODULE_LINES) -> list[str]:
    return [f"{p.relative_to(tree.root)}: {n}" for p in tree.modules() if (n := len(p.read_text().splitlines())) > limit]


def long_functions(tree: Tree, limit: int = MAX_FUNCTION_LINES, package: str = "") -> list[str]:
    found = []
    for path in tree.modules(package):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (n := node.end_lineno - node.lineno + 1) > limit:
                found.append(f"{path.relative_to(tree.root)}:{node.lineno} {node.name}: {n}")
    return found


def imports_inside_functions(tree: Tree, packages: tuple[str, ...]) -> list[str]:
    """hetpool imports placed inside a function: a cycle dodged instead of a module moved.
    (Lazy imports of optional third-party packages are fine and not reported.)"""
    found: set[str] = set()
    for package in packages:
        for path in tree.modules(package):
            for func in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(func):
                    local = isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "hetpool")
                    local = local or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "hetpool" for a in node.names))
                    if local:
                        found.add(f"{path.relative_to(tree.root)}:{node.lineno}")
    return sorted(found)


# Where an import inside a function is never the answer (issue 15).
NO_LOCAL_IMPORTS = ("core", "catalog", "scheduling", "governance", "sim", "server")

REAL = Tree(SRC)


def test_every_package_has_a_rule() -> None:
    missing = packages_without_a_rule(REAL)
    assert not missing, f"packages without an import rule in tests/test_layers.py: {missing}"


@pytest.mark.parametrize("package", REAL.packages())
def test_package_imports_point_inward(package: str) -> None:
    found = violations(REAL, package)
    assert not found, "import rule broken:\n" + "\n".join(found)


def test_allowances_name_existing_modules() -> None:
    stale = [m for m in ALLOWANCES if not (SRC / m).exists()]
    assert not stale, f"allowances for modules that no longer exist: {stale}"


def test_modules_stay_small() -> None:
    large = long_modules(REAL)
    assert not large, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(large)


def test_functions_stay_short() -> None:
    long = long_functions(REAL)
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_scheduling_functions_stay_shorter() -> None:
    long = long_functions(REAL, MAX_SCHEDULING_FUNCTION_LINES, "scheduling")
    assert not long, f"scheduling functions over {MAX_SCHEDULING_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_no_hetpool_import_inside_a_function() -> None:
    found = imports_inside_functions(REAL, NO_LOCAL_IMPORTS)
    assert not found, "hetpool imports inside functions:\n" + "\n".join(found)


# --- the checker itself: each kind of violation in a fake tree must be reported ---------

FAKE = {
    "__init__.py": "__version__ = '0'\n",
    "core/__init__.py": "",
    "core/bad.py": "import hetpool.server.app\n",  # plain import, outward
    "core/ok.py": "from hetpool import __version__\nimport datetime\n",
    "catalog/__init__.py": "",
    "catalog/bad.py": "from hetpool import scheduling\n",  # `from hetpool import x`
    "scheduling/__init__.py": "",
    "scheduling/bad_relative.py": "from ..governance import quota\n",  # relative, outward
    "scheduling/bad_third_party.py": "def f():\n    from sqlalchemy import select\n",  # inside a function
    "scheduling/ok_relative.py": "from . import ok_sibling\nfrom .ok_sibling import x\n",
    "scheduling/ok_sibling.py": "x = 1\n",
    "governance/__init__.py": "",
    "governance/quota.py": "from hetpool.scheduling import ok_sibling\n",
    "engines/__init__.py": "",
    "engines/bad.py": "import fastapi\n",  # a web framework in an engine
    "engines/ok.py": "import httpx\nfrom hetpool.catalog import bad\n",  # HTTP client and catalog: allowed
    "server/__init__.py": "",
    "server/app.py": "",
    "server/services/__init__.py": "",
    "server/services/tasks.py": "",
    "server/schemas/__init__.py": "",
    "server/schemas/bad.py": "import fastapi\nfrom hetpool.server.services import tasks\n",  # schemas: pydantic+stdlib+core only
    "server/schemas/ok.py": "import pydantic\nfrom hetpool.core import ok\nfrom hetpool.server.schemas import bad\n",
    "web/__init__.py": "",
    "web/bad.py": "from hetpool.server import services\n",  # services from the dashboard
    "web/ok.py": "from hetpool.server.schemas import ok\nimport jinja2\n",
    "newpkg/__init__.py": "",  # a package without a rule
    "core/long.py": "def f():\n" + "    x = 1\n" * 120 + "\n" * 500,
}


@pytest.fixture
def fake(tmp_path: Path) -> Tree:
    root = tmp_path / "hetpool"
    for rel, text in FAKE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return Tree(root)


def test_checker_reports_each_kind_of_violation(fake: Tree) -> None:
    found = [v for p in fake.packages() for v in violations(fake, p)]
    expected = [
        "core/bad.py imports hetpool.server.app",
        "catalog/bad.py imports hetpool.scheduling",
        "scheduling/bad_relative.py imports hetpool.governance.quota",
        "scheduling/bad_third_party.py imports sqlalchemy",
        "engines/bad.py imports fastapi",
        "server/schemas/bad.py imports fastapi",
        "server/schemas/bad.py imports hetpool.server.services.tasks",
        "web/bad.py imports hetpool.server.services",
        "newpkg/__init__.py: no rule for its package",
    ]
    assert sorted(found) == sorted(expected)
    assert packages_without_a_rule(fake) == ["newpkg"]


def test_checker_reports_long_modules_and_functions(fake: Tree) -> None:
    assert long_modules(fake) == ["core/long.py: 621"]
    assert long_functions(fake) == ["core/long.py:1 f: 121"]
    assert long_functions(fake, 80, "scheduling") == []


def test_checker_reports_imports_inside_functions(fake: Tree) -> None:
    (fake.root / "core" / "lazy.py").write_text("def f():\n    import yaml\n    from hetpool.core import ok\n    from . import ok as again\n")
    # yaml (third-party, optional-style lazy import) and scheduling's sqlalchemy are not hetpool imports
    assert imports_inside_functions(fake, ("core", "scheduling")) == ["core/lazy.py:3", "core/lazy.py:4"]
