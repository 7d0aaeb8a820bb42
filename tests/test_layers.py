"""The import rule of DESIGN.md: imports point inward only.

core ← catalog ← scheduling ← governance ← server; catalog ← backends; core ← agent;
catalog ← connectors; scheduling ← sim. Backends and connectors are the adapters: they
may use HTTP clients. The domain and the scheduling core never import web, DB, HTTP or
backend code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hetpool"

# package → hetpool packages it may import (besides itself)
ALLOWED = {
    "core": set(),
    "catalog": {"core"},
    "scheduling": {"core", "catalog"},
    "governance": {"core", "catalog", "scheduling"},
    "backends": {"core", "catalog"},
    "agent": {"core", "catalog"},
    "connectors": {"core", "catalog"},
    "sim": {"core", "catalog", "scheduling", "governance"},
}
FORBIDDEN_THIRD_PARTY = {"fastapi", "starlette", "sqlalchemy", "alembic", "httpx", "uvicorn", "requests", "psycopg", "jinja2", "typer"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_point_inward(package: str) -> None:
    violations = []
    for module in _modules(package):
        for name in _imports(module):
            top = name.split(".")[0]
            if top == "hetpool":
                parts = name.split(".")
                target = parts[1] if len(parts) > 1 else ""
                if target and target != package and target not in ALLOWED[package] and target != "__init__":
                    violations.append(f"{module.relative_to(SRC)} imports {name}")
            elif package not in ("backends", "connectors") and top in FORBIDDEN_THIRD_PARTY:
                violations.append(f"{module.relative_to(SRC)} imports {name}")
    assert not violations, "import rule broken:\n" + "\n".join(violations)


def test_rule_catches_a_violation(tmp_path: Path) -> None:
    """The checker itself must see a forbidden import (guards against a vacuous test)."""
    bad = tmp_path / "bad.py"
    bad.write_text("from sqlalchemy import select\nimport hetpool.server.app\n")
    assert {"sqlalchemy", "hetpool.server.app"} <= _imports(bad)


def test_modules_stay_small() -> None:
    large = [f"{p.relative_to(SRC)}: {n}" for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 800]
    assert not large, "modules over 800 lines:\n" + "\n".join(large)
