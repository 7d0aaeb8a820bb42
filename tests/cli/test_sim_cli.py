"""`hetpool sim run` and `hetpool plan-capacity` through the real CLI: offline on files,
and against a real `hetpool up --demo` server whose own task history is replayed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from hetpool.core.specs import parse_spec
from hetpool.sim.trace import TraceTask, write_trace
from tests.cli.test_cli_e2e import TERMINAL, Server
from tests.conftest import DEMO_DIR, REPO, TASKS_DIR
from tests.sim.test_sim_vs_live import QUOTA_ESTATE

EXAMPLES = ["llm-inference.yaml", "mindspore-ascend.yaml", "batch-inference.yaml", "data-prep.yaml"]


def hetpool(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "HETPOOL_URL": "http://127.0.0.1:9", **(env or {})}
    return subprocess.run([sys.executable, "-m", "hetpool.cli.main", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """One demo server (SQLite) for the module, with the examples run to completion."""
    tmp = tmp_path_factory.mktemp("sim-cli")
    srv = Server(tmp / "data", f"sqlite:///{tmp / 'hetpool.db'}")
    srv.start()
    try:
        ids = srv.cli("apply", *[a for name in EXAMPLES for a in ("-f", str(TASKS_DIR / name))], "-o", "json").stdout
        headers = {"Authorization": f"Bearer {srv.token}"}
        for task_id in [r["id"] for r in json.loads(ids)]:  # poll over HTTP: faster than a CLI process per look
            deadline = time.monotonic() + 40
            while (state := httpx.get(f"{srv.url}/api/v1/tasks/{task_id}", headers=headers).json()["state"]) not in TERMINAL:
                assert time.monotonic() < deadline, f"{task_id} stayed {state}"
                time.sleep(0.2)
            assert state == "succeeded", task_id
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    tasks = []
    for i in range(6):
        spec = parse_spec(
            {
                "kind": "Task",
                "name": f"job-{i}",
                "tenant": "ai-lab/cv/detection",
                "type": "training",
                "framework": {"name": "pytorch", "version": ">=2.4"},
                "per_worker": {"devices": {"class": "gpu", "count": 8}, "cpu": 16, "memory_gb": 64},
                "runtime_estimate": "1h",
            }
        )
        tasks.append(TraceTask(f"job-{i}", i * 300.0, spec, 3600.0))
    path = tmp_path / "trace.jsonl"
    write_trace(tasks, path)
    return path


def test_plan_capacity_replays_the_servers_history(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "report"
    args = ["plan-capacity", "--history", "30d", "--add", "16x", "ascend-910b2", "--remove", "8x", "nvidia-a100-80g"]
    result = server.cli(*args, "--out", str(out), "-o", "json")
    report = json.loads(result.stdout)
    assert set(report) >= {"baseline", "changed", "delta", "recommendations", "changes", "files"}
    assert report["baseline"]["tasks"] == report["changed"]["tasks"] == len(EXAMPLES)
    assert report["baseline"]["completed"] == len(EXAMPLES)
    assert report["changes"]["devices"]["baseline"]["ascend-910b2"] + 16 == report["changes"]["devices"]["changed"]["ascend-910b2"]
    assert report["changes"]["removed_nodes"] == ["gpu-a02"]
    assert {r["kind"] for r in report["recommendations"]} <= {"saturated-pool", "idle-pool"}
    assert any(r["kind"] == "idle-pool" and r["name"] == "bj-a100-80g" for r in report["recommendations"])
    for run in ("baseline", "changed"):
        for name in ("utilisation.png", "queue.png"):
            png = out / run / name
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert json.loads((out / "report.json").read_text())["delta"] == report["delta"]
    assert "━" not in result.stderr  # -o json: no progress bar


def test_plan_capacity_table_and_bad_changes(server: Server, tmp_path: Path) -> None:
    table = server.cli("plan-capacity", "--history", "30d", "--add", "8x Huawei Ascend 910B2", "--out", str(tmp_path / "r")).stdout
    assert "baseline vs changed" in table and "devices ascend-910b2" in table and "recommendations" in table
    bad = server.cli("plan-capacity", "--history", "30d", "--add", "16 nvidia-a100-80g", check=False)
    assert bad.returncode == 2 and "--add '16 nvidia-a100-80g': expected COUNTx MODEL" in bad.stderr
    bad = server.cli("plan-capacity", "--history", "30d", "--remove", "64x", "nvidia-h800", check=False)
    assert bad.returncode == 2 and "--remove 64x nvidia-h800: the inventory has only 8" in bad.stderr


def test_sim_run_offline(trace_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = hetpool("sim", "run", "--trace", str(trace_file), "--inventory", str(DEMO_DIR), "--out", str(out), "-o", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["tasks"] == summary["completed"] == 6 and summary["never_started"] == 0
    assert summary["wait_hours"]["avg"] > 0  # 6 jobs of 8 GPUs on 3 nodes of 8: some wait
    assert (out / "utilisation.png").exists() and (out / "queue.png").exists() and (out / "summary.json").exists()
    table = hetpool("sim", "run", "--trace", str(trace_file), "--inventory", str(DEMO_DIR))
    assert table.returncode == 0 and "per pool" in table.stdout and "bj-a100-80g" in table.stdout


def test_plan_capacity_offline_with_trace_and_inventory(trace_file: Path, tmp_path: Path) -> None:
    args = ["plan-capacity", "--trace", str(trace_file), "--inventory", str(DEMO_DIR), "--add", "16 x nvidia-a100-80g", "--out", str(tmp_path / "r")]
    result = hetpool(*args, "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["delta"]["avg_wait_hours"]["changed"] < report["delta"]["avg_wait_hours"]["baseline"]


def test_history_endpoint_needs_a_positive_period(api: TestClient) -> None:
    assert api.get("/api/v1/sim/history", params={"days": 7}).json()["tasks"] == []
    assert api.get("/api/v1/sim/history", params={"days": 0}).status_code == 422
    assert TestClient(api.app).get("/api/v1/sim/history").status_code == 401


def test_sim_run_offline_enforces_the_inventorys_quotas(tmp_path: Path) -> None:
    """Quota documents in --inventory are enforced as live: team b borrows 2 of team a's
    idle 4, and a third task past b's borrowing limit waits although devices are free."""
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "estate.yaml").write_text(yaml.safe_dump_all(QUOTA_ESTATE))
    (tmp_path / "no-quotas").mkdir()
    (tmp_path / "no-quotas" / "estate.yaml").write_text(yaml.safe_dump_all([d for d in QUOTA_ESTATE if d["kind"] != "Quota"]))
    tasks = []
    for i, devices in enumerate([4, 2, 2]):
        doc = {"kind": "Task", "name": f"b-{i}", "tenant": "org/b", "type": "training", "runtime_estimate": "1h"}
        spec = parse_spec({**doc, "per_worker": {"devices": {"class": "gpu", "count": devices}}})
        tasks.append(TraceTask(f"b-{i}", 60.0 * i, spec, reference_s=3600.0))
    trace = tmp_path / "trace.jsonl"
    write_trace(tasks, trace)
    summaries = {}
    for name in ("inventory", "no-quotas"):
        result = hetpool("sim", "run", "--trace", str(trace), "--inventory", str(tmp_path / name), "-o", "json")
        assert result.returncode == 0, result.stderr
        summaries[name] = json.loads(result.stdout)
    assert (summaries["inventory"]["borrowed_admissions"], summaries["inventory"]["waited_over_quota"]) == (1, 1)
    assert summaries["inventory"]["wait_hours"]["p99"] > 0.9  # b-2 waits for b-0's hour
    assert (summaries["no-quotas"]["borrowed_admissions"], summaries["no-quotas"]["waited_over_quota"]) == (0, 0)
    assert summaries["no-quotas"]["wait_hours"]["p99"] == 0
