"""The reconciler against a backend that stops answering and one whose job is killed
outside hetpool. The outage is a real local backend whose poll raises (a wrapper, as a
network error would); everything else runs for real."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.engines.base import JobHandle
from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, example_task, task_state


class Unreachable:
    """A backend whose engine cannot be reached while `down` is set."""

    def __init__(self, inner) -> None:
        self.inner, self.down = inner, False
        self.kind = inner.kind

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name in ("poll", "cancel") and self.down:
            raise ConnectionError("connection refused (engine down)")
        return attr


def test_unreachable_backend_leaves_tasks_unknown_then_reconciles(ctx: ServiceContext, demo: TestClient) -> None:
    backend = Unreachable(ctx.backends["local"])
    ctx.backends["local"] = backend
    task = {**example_task("data-prep.yaml"), "command": "sleep 3; echo done"}
    task_id = demo.post("/api/v1/tasks", json=task).json()["id"]
    drive_until(ctx, lambda: task_state(demo, task_id) == "running")
    backend.down = True
    drive_until(ctx, lambda: task_state(demo, task_id) == "unknown")
    body = demo.get(f"/api/v1/tasks/{task_id}").json()
    assert "unreachable" in body["message"] and body["placements"]  # still holds its capacity
    backend.down = False
    drive_until(ctx, lambda: task_state(demo, task_id) == "succeeded", timeout_s=30)
    states = [e["after"]["state"] for e in demo.get(f"/api/v1/tasks/{task_id}").json()["events"] if e["after"] and "state" in e["after"]]
    assert "unknown" in states and states[-1] == "succeeded"


def test_a_job_killed_outside_hetpool_is_failed_with_the_reason(ctx: ServiceContext, demo: TestClient) -> None:
    task = {**example_task("data-prep.yaml"), "command": "sleep 60"}
    task_id = demo.post("/api/v1/tasks", json=task).json()["id"]
    drive_until(ctx, lambda: task_state(demo, task_id) == "running")
    body = demo.get(f"/api/v1/tasks/{task_id}").json()
    ctx.backends["local"].cancel(JobHandle("local", body["job_id"]))  # as an operator on the node would
    drive_until(ctx, lambda: task_state(demo, task_id) == "failed")
    assert "cancelled outside hetpool" in demo.get(f"/api/v1/tasks/{task_id}").json()["message"]
