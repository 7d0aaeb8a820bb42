"""matplotlib is an optional extra (`hetpool[plot]`): without it the CLI's plotting commands
fail at once with an error naming the extra, and everything that does not plot still works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetpool.core.specs import parse_spec
from hetpool.sim.report import PlottingUnavailableError, pyplot
from hetpool.sim.trace import TraceTask, write_trace

REPO = Path(__file__).resolve().parents[2]
DEMO_DIR = REPO / "examples" / "demo"
# The CLI as installed, in a process where `import matplotlib` fails as if it were not installed.
WITHOUT_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; from hetpool.cli.main import app; app(prog_name='hetpool')"
HINT = "pip install 'hetpool[plot]'"


def hetpool_without_matplotlib(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "HETPOOL_URL": "http://127.0.0.1:9"}
    return subprocess.run([sys.executable, "-c", WITHOUT_MATPLOTLIB, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    doc = {"kind": "Task", "name": "job", "tenant": "ai-lab/cv/detection", "type": "training", "runtime_estimate": "1h"}
    doc["per_worker"] = {"devices": {"class": "gpu", "count": 1}, "cpu": 4, "memory_gb": 16}
    path = tmp_path / "trace.jsonl"
    write_trace([TraceTask("job", 0.0, parse_spec(doc), 3600.0)], path)
    return path


def test_sim_run_names_the_extra_when_asked_for_plots(trace_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = hetpool_without_matplotlib("sim", "run", "--trace", str(trace_file), "--inventory", str(DEMO_DIR), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "plots need matplotlib" in result.stderr and HINT in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()  # failed before simulating, nothing half-written
    # Without --out nothing is plotted: the numbers need no extra.
    numbers = hetpool_without_matplotlib("sim", "run", "--trace", str(trace_file), "--inventory", str(DEMO_DIR), "-o", "json")
    assert numbers.returncode == 0, numbers.stderr
    assert json.loads(numbers.stdout)["tasks"] == 1


def test_plan_capacity_names_the_extra(trace_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    args = ["plan-capacity", "--trace", str(trace_file), "--inventory", str(DEMO_DIR), "--add", "8x nvidia-a100-80g", "--out", str(out)]
    result = hetpool_without_matplotlib(*args)
    assert result.returncode == 2 and HINT in result.stderr, result.stderr
    assert not out.exists()


def test_the_error_is_a_domain_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pyplot().get_backend().lower() == "agg"  # installed for the tests (make test installs .[test,plot,tracing])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlottingUnavailableError, match=r"pip install 'hetpool\[plot\]'") as caught:
        pyplot()
    assert caught.value.code == "plotting_unavailable"
