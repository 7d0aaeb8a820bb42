"""Illegal task transitions asked for through the API are refused, and change nothing:
the task keeps its state and no audit event is written (tests/core/test_states.py has the
machine's rules themselves)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.helpers import example_task, run_to_end


def submit(api: TestClient, task: dict) -> str:
    response = api.post("/api/v1/tasks", json=task)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def events(api: TestClient, task_id: str) -> list[str]:
    return [e["action"] for e in api.get(f"/api/v1/tasks/{task_id}").json()["events"]]


def test_a_finished_task_cannot_be_cancelled(ctx: ServiceContext, demo: TestClient) -> None:
    task_id = submit(demo, example_task("data-prep.yaml"))
    assert run_to_end(ctx, demo, task_id)["state"] == "succeeded"
    before = events(demo, task_id)
    refused = demo.post(f"/api/v1/tasks/{task_id}/cancel")
    assert refused.status_code == 409
    assert refused.json()["message"] == f"task {task_id} already ended (succeeded); nothing to cancel"
    assert demo.get(f"/api/v1/tasks/{task_id}").json()["state"] == "succeeded"
    assert events(demo, task_id) == before
    assert demo.get("/api/v1/audit/verify").json()["ok"] is True


def test_a_cancelled_task_is_cancelled_once(demo: TestClient) -> None:
    task_id = submit(demo, example_task("data-prep.yaml"))
    assert demo.post(f"/api/v1/tasks/{task_id}/cancel").json()["state"] == "cancelled"
    again = demo.post(f"/api/v1/tasks/{task_id}/cancel")
    assert again.status_code == 409 and "already ended (cancelled)" in again.json()["message"]
    assert events(demo, task_id) == ["task.submit", "task.cancelled"]
