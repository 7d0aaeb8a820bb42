"""`hetpool approvals` against a real `hetpool up --demo` server: a task over a policy's
device limit waits, is listed, runs once approved; a rejected one is cancelled."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.cli.test_cli_e2e import Server, server  # noqa: F401 (the fixture)
from tests.conftest import TASKS_DIR

POLICY = {"kind": "ApprovalPolicy", "name": "big-jobs", "tenant": "ai-lab", "max_devices": 4, "over_quota": False, "budget_exceeded": False}

# The CLI is the same on both databases; the API tests cover PostgreSQL (this keeps the suite short).
pytestmark = pytest.mark.parametrize("db_kind", ["sqlite"])


def _task_file(tmp_path: Path, name: str) -> str:
    task = yaml.safe_load((TASKS_DIR / "pytorch-ddp-training.yaml").read_text())
    task.update(name=name, command="echo trained")  # 2 workers x 4 GPUs: over the limit
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(task))
    return str(path)


def _wait_ended(srv: Server, task_id: str, timeout_s: float = 40) -> dict:
    """Poll over HTTP (a CLI process per poll costs a second)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        task = httpx.get(f"{srv.url}/api/v1/tasks/{task_id}", headers={"Authorization": f"Bearer {srv.token}"}).json()
        if task["state"] in ("succeeded", "failed", "cancelled"):
            return task
        time.sleep(0.2)
    raise AssertionError(f"{task_id} stayed {task['state']}")


def test_approve_and_reject_through_the_cli(server: Server, tmp_path: Path) -> None:  # noqa: F811
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    server.cli("apply", "-f", str(policy))
    first = server.cli("submit", "-f", _task_file(tmp_path, "first")).stdout.strip()
    second = server.cli("submit", "-f", _task_file(tmp_path, "second")).stdout.strip()
    assert server.task(first)["state"] == "pending_approval"
    pending = json.loads(server.cli("approvals", "list", "--state", "pending", "-o", "json").stdout)
    by_task = {a["task_id"]: a["id"] for a in pending}
    assert set(by_task) == {first, second}
    table = server.cli("approvals", "list").stdout
    assert by_task[first] in table and "asks for 8 devices" in table
    missing = server.cli("approvals", "reject", by_task[second], check=False)
    assert missing.returncode == 2 and "--comment" in missing.stderr  # a rejection says why
    assert re.search(r"approved", server.cli("approvals", "approve", by_task[first], "-m", "go").stdout)
    server.cli("approvals", "reject", by_task[second], "--comment", "too big")
    assert _wait_ended(server, first)["state"] == "succeeded"
    rejected = server.task(second)
    assert rejected["state"] == "cancelled" and rejected["message"] == "rejected by admin: too big"
    again = server.cli("approvals", "approve", by_task[second], check=False)
    assert again.returncode == 2 and "already decided" in again.stderr
