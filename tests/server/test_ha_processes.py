"""Two real `hetpool up` replicas on one database: kill -9 the leader, and the survivor
takes over the background loops within the lease and runs new work to the end."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.cli.test_cli_e2e import Server
from tests.conftest import POSTGRES_URL, _fresh_postgres_database
from tests.server.helpers import example_task

LEASE_S = 2.0


def _get(server: Server, path: str) -> dict:
    response = httpx.get(server.url + path, headers={"Authorization": f"Bearer {server.token}"}, timeout=5)
    assert response.status_code == 200, response.text
    return response.json()


def _workers_holder(server: Server) -> str | None:
    groups = {g["group"]: g for g in _get(server, "/api/v1/leader")["groups"]}
    return (groups.get("workers") or {}).get("holder")


def _pid(holder: str | None) -> int | None:
    return int(holder.split(":")[1]) if holder else None  # hostname:pid:random


def _wait(condition, timeout_s: float, what: str, servers: list[Server]):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    logs = "\n".join(s.log.read_text()[-2000:] for s in servers if s.log.exists())
    raise AssertionError(f"{what} not reached in {timeout_s}s; logs:\n{logs}")


def test_killing_the_leader_hands_the_loops_to_the_survivor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # PostgreSQL when the suite has one, else one SQLite file shared by both processes.
    url = _fresh_postgres_database() if POSTGRES_URL else f"sqlite:///{tmp_path / 'shared.db'}"
    monkeypatch.setenv("HETPOOL_LEADER_LEASE_S", str(LEASE_S))
    monkeypatch.setenv("HETPOOL_LEADER_RENEW_S", "0.5")
    data = tmp_path / "data"  # shared: the local backend's job records must be visible to both
    first, second = Server(data, url), Server(data, url)
    t0 = time.monotonic()
    first.start()  # migrates and creates the admin before the second one starts
    second.start()
    second.token = first.token
    print(f"started both in {time.monotonic() - t0:.1f}s")
    try:
        holder = _wait(lambda: _workers_holder(first), 10, "a leader", [first, second])
        assert _workers_holder(second) == holder  # both replicas see the same single leader
        leader, survivor = (first, second) if _pid(holder) == first.proc.pid else (second, first)
        assert _pid(holder) == leader.proc.pid
        assert httpx.get(survivor.url + "/readyz", timeout=5).json()["leader"] is False  # ready, standing by

        leader.kill()
        killed_at = time.monotonic()
        response = httpx.post(
            survivor.url + "/api/v1/tasks", json=example_task("data-prep.yaml"), headers={"Authorization": f"Bearer {survivor.token}"}, timeout=10
        )
        assert response.status_code in (200, 201), response.text
        task_id = response.json()["id"]
        task = _wait(
            lambda: (t := _get(survivor, f"/api/v1/tasks/{task_id}"))["state"] in {"succeeded", "failed", "cancelled"} and t,
            LEASE_S + 15,
            "the task's end",
            [survivor],
        )
        elapsed = time.monotonic() - killed_at
        assert task["state"] == "succeeded", task
        assert _pid(_workers_holder(survivor)) == survivor.proc.pid
        assert httpx.get(survivor.url + "/readyz", timeout=5).json()["leader"] is True
        print(f"takeover + task run: {elapsed:.1f}s after kill -9 (lease {LEASE_S}s) on {url.split(':')[0]}")
    finally:
        t1 = time.monotonic()
        for server in (first, second):
            if server.proc and server.proc.poll() is None:
                server.stop()
        print(f"stopped in {time.monotonic() - t1:.1f}s")
