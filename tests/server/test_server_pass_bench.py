"""bench/server_pass.py at a small size, so that the benchmark cannot rot: the scheduler
worker's whole pass on a seeded database, with running work, the honest mix, a drain and
a steady state, its time split into load / core / rest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hetpool.server.services import tasks as tasks_service
from hetpool.server.workers import scheduler

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import server_pass  # noqa: E402


def test_the_server_pass_benchmark_runs_the_real_pass_and_reports_its_phases(tmp_path: Path) -> None:
    originals = scheduler.load_cycle, scheduler.run_cycle, tasks_service.new_task_id
    out = tmp_path / "sp.json"
    small = ["--nodes", "60", "--tasks", "300", "--steady-passes", "3", "--arrivals", "20", "--max-passes", "6"]
    report = server_pass.main([*small, "-o", "json", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["database"] == "sqlite" and report["running_share_at_start"] >= 0.2 and report["running_at_start"] > 0
    assert 0 < report["accepted_at_submit"] <= 300 and report["distinct_shapes"] > 100
    assert report["passes"] > 0 and report["placed_tasks"] > 0 and report["placements_per_s"] > 0
    # The phases are measured inside the pass: load and core are parts of it.
    assert 0 < report["p50_load_ms"] < report["p50_pass_ms"] and 0 < report["p50_core_ms"] < report["p50_pass_ms"]
    steady = report["steady"]
    assert steady["passes"] == 3 and steady["arrived"] > 0 and steady["p99_pass_ms"] > 0
    # The benchmark's instruments are gone once it returns.
    assert (scheduler.load_cycle, scheduler.run_cycle, tasks_service.new_task_id) == originals
