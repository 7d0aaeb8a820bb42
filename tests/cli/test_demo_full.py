"""`make demo-full` in a test: a real `hetpool up --demo` with deploy/slurm.sh's cluster and
deploy/ray.sh's head imported. One tenant's tasks run on the local backend, on Slurm and on
Ray, and show in one task list, one audit trail and one cost report (through the CLI)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli_e2e import Server
from tests.cli.test_users_cli import run_as
from tests.conftest import database_url

SLURM_CONF = os.environ.get("HETPOOL_TEST_SLURM_CONF", "")
RAY_ADDRESS = os.environ.get("HETPOOL_TEST_RAY_ADDRESS", "")
PRICES = """
kind: PriceList
name: demo-prices
devices:
- {model: nvidia-h100, per_device_hour: 30}
- {model: ascend-910b3, per_device_hour: 12}
"""
TASK = """
name: {name}
tenant: ai-lab/nlp/llm-sft
type: training
command: echo "ran on $HETPOOL_POOL"; sleep 1
per_worker:
  devices: {{class: {cls}, count: 1}}
  cpu: 0.5
  memory_gb: 0.5
any_of: [{pool}]
"""
RUNS = {"local": ("on-local", "gpu", "bj-h800"), "slurm": ("on-slurm", "gpu", "hpc-nvidia-h100"), "ray": ("on-ray", "npu", "ray-lab-ascend-910b3")}


@pytest.fixture
def server(tmp_path: Path, monkeypatch) -> Iterator[Server]:
    if not (SLURM_CONF and RAY_ADDRESS):
        pytest.skip("needs HETPOOL_TEST_SLURM_CONF and HETPOOL_TEST_RAY_ADDRESS (make test starts both engines)")
    monkeypatch.setenv("HETPOOL_DEMO_SLURM_CONF", SLURM_CONF)  # inherited by the server process
    monkeypatch.setenv("HETPOOL_DEMO_RAY_ADDRESS", RAY_ADDRESS)
    srv = Server(tmp_path / "data", database_url("sqlite", tmp_path))
    srv.start()
    yield srv
    srv.stop()


def test_one_tenant_on_local_slurm_and_ray_in_one_record(server: Server, tmp_path: Path) -> None:
    (tmp_path / "prices.yaml").write_text(PRICES)
    assert run_as(server, None, "apply", "-f", str(tmp_path / "prices.yaml")).exit_code == 0
    ids = {}
    for backend, (name, cls, pool) in RUNS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(TASK.format(name=name, cls=cls, pool=pool))
        result = run_as(server, None, "submit", "-f", str(path))
        assert result.exit_code == 0, result.stderr
        ids[backend] = result.stdout.strip()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        tasks = {t["id"]: t for t in json.loads(run_as(server, None, "get", "tasks", "-o", "json").stdout)}
        if all(tasks[i]["state"] in ("succeeded", "failed", "cancelled") for i in ids.values()):
            break
        time.sleep(1)
    for backend, task_id in ids.items():
        task = json.loads(run_as(server, None, "describe", "task", task_id, "-o", "json").stdout)
        assert task["state"] == "succeeded", (backend, task["state"], task["message"])
        assert task["backend"] == backend and task["placements"][0]["pool"] == RUNS[backend][2]
        logs = run_as(server, None, "logs", task_id).stdout
        assert f"ran on {RUNS[backend][2]}" in logs, (backend, logs)
    # One audit trail: every task's life is there, and the chain verifies.
    events = json.loads(run_as(server, None, "audit", "list", "--action", "task.succeeded", "-o", "json").stdout)
    assert set(ids.values()) <= {e["object_id"] for e in events}
    assert run_as(server, None, "audit", "verify").exit_code == 0
    # One cost report: the three backends side by side, summing to the ledger.
    report = json.loads(run_as(server, None, "cost", "report", "--by", "backend", "-o", "json").stdout)
    groups = {g["key"]: g for g in report["groups"]}
    assert {"local", "slurm", "ray"} <= set(groups), report
