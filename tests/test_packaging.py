"""What a user installs: the runtime carries no test tools and no optional extras
(matplotlib, OpenTelemetry); `make demo` installs the runtime only, `make test` the
test tools plus every extra the tests exercise."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
TEST_TOOLS = {"pytest", "pytest-xdist", "schemathesis", "hypothesis", "ruff", "vulture", "playwright", "kubernetes-validate", "coverage"}
OPTIONAL = {"matplotlib", "opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"}


def names(requirements: list[str]) -> set[str]:
    """Distribution names of PEP 508 requirement strings, normalised."""
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_runtime_dependencies_hold_no_test_tools_and_no_optional_extras() -> None:
    runtime = names(PYPROJECT["project"]["dependencies"])
    assert not runtime & TEST_TOOLS, runtime & TEST_TOOLS
    assert not runtime & OPTIONAL, runtime & OPTIONAL
    assert not any(name.startswith("opentelemetry") for name in runtime)


def test_plot_and_tracing_are_extras() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert names(extras["plot"]) == {"matplotlib"}
    assert {"opentelemetry-api", "opentelemetry-sdk"} <= names(extras["tracing"])
    assert "pytest" in names(extras["test"])


def make_dry_run(target: str, tmp_path: Path) -> str:
    """`make -n TARGET` against a venv that does not exist yet: every install step is printed."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "venv"
    result = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


def pip_installs(dry_run: str) -> list[str]:
    return [line.split(" -e ", 1)[1].strip() for line in dry_run.splitlines() if "pip install" in line and " -e " in line]


def test_make_demo_installs_the_runtime_only(tmp_path: Path) -> None:
    installs = pip_installs(make_dry_run("demo", tmp_path))
    assert installs == ["."], installs  # no [test], no extras
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo: \$\(RUNTIME_STAMP\)$", makefile, re.M)
    assert re.search(r"^demo-full: \$\(RUNTIME_STAMP\)$", makefile, re.M)


def test_make_test_installs_the_test_tools_and_the_extras_the_tests_use(tmp_path: Path) -> None:
    installs = pip_installs(make_dry_run("test", tmp_path))
    assert len(installs) == 1, installs
    extras = set(re.fullmatch(r"'\.\[(.+)\]'", installs[0]).group(1).split(","))
    assert {"test", "plot", "tracing"} <= extras
