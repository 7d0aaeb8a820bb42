"""Reclaim through the API: an agent reports a task's device idle (or the task overruns its
lease), the reclaim pass gives notice, then requeues or stops it, each step audited."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.loop import run_pass
from tests.server.helpers import drive_until, task_state
from tests.server.test_agent_api import H800_TASK, NODE

NODE_NAME = NODE["name"]


def _setup(api: TestClient, **policy) -> None:
    assert api.post("/api/v1/agent/register", json={"node": NODE, "pool": "bj-h800", "agent_version": "0.1.0"}).status_code == 200
    doc = {"kind": "ReclaimPolicy", "name": "reclaim-nlp", "tenant": "ai-lab/nlp", **policy}
    response = api.post("/api/v1/apply", json={"documents": [doc]})
    assert response.status_code == 200, response.text


def _beat(api: TestClient, *utilisation: float) -> None:
    devices = [{"index": i, "model": "nvidia-h800", "utilisation_pct": u} for i, u in enumerate(utilisation)]
    assert api.post("/api/v1/agent/heartbeat", json={"node": NODE_NAME, "devices": devices}).status_code == 200


def _pass_after(ctx: ServiceContext, api: TestClient, minutes: float, *utilisation: float) -> dict:
    """Let time pass (the agent keeps reporting), run one worker pass, return the task."""
    ctx.clock.advance(minutes * 60)
    _beat(api, *utilisation)
    run_pass(ctx)
    [task] = api.get("/api/v1/tasks").json()
    return api.get(f"/api/v1/tasks/{task['id']}").json()


def _running_task(ctx: ServiceContext, api: TestClient, **fields) -> str:
    response = api.post("/api/v1/tasks", json={**H800_TASK, "command": "sleep 60", **fields})
    assert response.status_code == 201, response.text
    task_id = response.json()["id"]
    drive_until(ctx, lambda: task_state(api, task_id) == "running")
    assert api.get(f"/api/v1/tasks/{task_id}").json()["placements"][0]["devices"] == [0]
    return task_id


def _reclaim_events(api: TestClient, task_id: str) -> list[dict]:
    return api.get("/api/v1/audit", params={"object_id": task_id, "action": "task.reclaim*"}).json()


def _cancel(ctx: ServiceContext, api: TestClient, task_id: str) -> None:
    api.post(f"/api/v1/tasks/{task_id}/cancel")
    drive_until(ctx, lambda: task_state(api, task_id) == "cancelled")


def test_idle_allocation_gets_notice_then_is_requeued(ctx: ServiceContext, demo: TestClient) -> None:
    _setup(demo, idle_for="30m", notice="5m", action="requeue")
    task_id = _running_task(ctx, demo)
    # Device 0 (the task's) idle; device 1 busy with someone else's work: only the task's count.
    assert not _pass_after(ctx, demo, 0, 0.0, 85.0)["message"].startswith("reclaim")
    task = _pass_after(ctx, demo, 31, 0.0, 85.0)
    reason = f"idle below 5% for 31m on {NODE_NAME} devices [0]"
    assert task["state"] == "running" and task["message"].startswith(f"reclaim notice: {reason}; will requeue at ")
    [notice] = _reclaim_events(demo, task_id)
    assert notice["action"] == "task.reclaim_notice" and notice["actor"] == "reclaimer"
    assert notice["after"]["reason"] == reason and notice["after"]["policy"] == "reclaim-nlp"
    assert _pass_after(ctx, demo, 2, 0.0, 85.0)["state"] == "running"  # still within the notice
    task = _pass_after(ctx, demo, 4, 0.0, 85.0)
    assert task["message"] == f"reclaimed: {reason}; stopping to requeue"
    drive_until(ctx, lambda: demo.get(f"/api/v1/tasks/{task_id}").json()["attempt"] == 2)
    task = demo.get(f"/api/v1/tasks/{task_id}").json()
    actions = [e["action"] for e in task["events"]]
    assert actions[actions.index("task.reclaim") :][:3] == ["task.reclaim", "task.preempted", "task.queued"]
    reclaim = next(e for e in task["events"] if e["action"] == "task.reclaim")
    assert reclaim["before"]["state"] == "running" and reclaim["before"]["attempt"] == 1
    assert reclaim["after"] == {"action": "requeue", "state": "queued", "reason": reason, "cause": "idle", "policy": "reclaim-nlp"}
    requeued = next(e for e in task["events"] if e["action"] == "task.queued" and e["id"] > reclaim["id"])
    assert requeued["after"]["message"] == f"reclaimed: {reason}"
    _cancel(ctx, demo, task_id)
    assert demo.get("/api/v1/audit/verify").json()["ok"] is True


def test_busy_again_during_the_notice_keeps_the_devices(ctx: ServiceContext, demo: TestClient) -> None:
    _setup(demo, idle_for="30m", notice="5m")
    task_id = _running_task(ctx, demo)
    _pass_after(ctx, demo, 0, 1.0, 0.0)
    assert _pass_after(ctx, demo, 30, 1.0, 0.0)["message"].startswith("reclaim notice: idle below 5% for 30m")
    task = _pass_after(ctx, demo, 1, 42.0, 0.0)
    assert task["state"] == "running" and task["message"] == f"reclaim notice withdrawn: busy again: 42% on {NODE_NAME} device 0"
    assert _pass_after(ctx, demo, 10, 42.0, 0.0)["state"] == "running"
    assert [e["action"] for e in _reclaim_events(demo, task_id)] == ["task.reclaim_notice", "task.reclaim_cancelled"]
    _cancel(ctx, demo, task_id)


def test_lease_past_max_runtime_is_stopped_with_the_reason(ctx: ServiceContext, demo: TestClient) -> None:
    _setup(demo, idle_for=None, max_runtime="2h", notice="5m", action="stop")
    task_id = _running_task(ctx, demo, max_runtime="1h")  # the task's own lease wins over the policy's
    assert not _pass_after(ctx, demo, 59, 99.0, 0.0)["message"].startswith("reclaim")
    task = _pass_after(ctx, demo, 2, 99.0, 0.0)
    assert task["message"].startswith("reclaim notice: past max_runtime 1h (ran 1h01m); will stop at ")
    _pass_after(ctx, demo, 5, 99.0, 0.0)  # busy does not matter: the lease is over
    drive_until(ctx, lambda: task_state(demo, task_id) == "cancelled")
    task = demo.get(f"/api/v1/tasks/{task_id}").json()
    assert task["message"] == "reclaimed: past max_runtime 1h (ran 1h01m)"
    reclaim = next(e for e in task["events"] if e["action"] == "task.reclaim")
    assert reclaim["after"]["action"] == "stop" and reclaim["after"]["state"] == "cancelled" and reclaim["after"]["cause"] == "max_runtime"
    assert [e["action"] for e in task["events"]][-1] == "task.cancelled"
    assert demo.get("/api/v1/audit/verify").json()["ok"] is True
