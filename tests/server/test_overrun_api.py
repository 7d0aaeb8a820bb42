"""Issue 16, item 1 through the API: a task waiting for an H800 held by work that overruns
its 5-minute estimate is told a revised, later start (never "free at <now>" with a zero
wait), `plan` agrees with the scheduler, and once the promised start has passed the
waiting task is admitted on the substitute A100s."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import TaskType
from hetpool.scheduling.backfill import PROMISE_GRACE_S
from hetpool.server.db.models import TaskRow
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.sched_state import learned_runtimes, running_tasks
from hetpool.server.workers.loop import run_pass
from tests.server.helpers import drive_until, example_task, task_state

H800, A100 = "nvidia-h800", "nvidia-a100-80g"
H800_PERF = DeviceCatalog.builtin().get(H800).perf_for(TaskType.TRAINING)
GPU_TASK = {
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "framework": {"name": "pytorch", "version": ">=2.4"},
    "per_worker": {"devices": {"class": "gpu", "count": 8}, "cpu": 8, "memory_gb": 64},
}
# Estimated at 5 minutes on the H800 it runs on; it really runs far longer.
BLOCKER = {**GPU_TASK, "name": "blocker", "fallback": [H800], "runtime_estimate": f"{round(300 * H800_PERF)}s", "command": "sleep 600"}
# 1 h on the A100s, ~22 min on the H800: a few minutes of waiting for the H800 pays.
JOB = {**GPU_TASK, "name": "prefers-h800", "fallback": [H800, A100], "runtime_estimate": "1h", "command": "true"}


def _submit(api: TestClient, body: dict) -> str:
    response = api.post("/api/v1/tasks", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _pending(api: TestClient, task_id: str) -> dict:
    return api.get(f"/api/v1/tasks/{task_id}").json().get("pending") or {}


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_wait_behind_overrunning_work_is_revised_then_gives_way(ctx: ServiceContext, demo: TestClient) -> None:
    blocker = _submit(demo, BLOCKER)
    drive_until(ctx, lambda: task_state(demo, blocker) == "running")
    started = _at(demo.get(f"/api/v1/tasks/{blocker}").json()["started_at"])
    blocker_end = started + timedelta(minutes=5)

    job = _submit(demo, JOB)
    drive_until(ctx, lambda: _pending(demo, job).get("reason") == "waiting_for_preferred")
    first = _pending(demo, job)
    assert abs((_at(first["promised_start"]) - blocker_end).total_seconds()) < 2
    # plan agrees with the scheduler: a new task like it would wait for the H800 too.
    planned = demo.post("/api/v1/tasks/plan", json={**JOB, "name": "like-it"}).json()
    assert planned["feasible"] is False and planned["explanation"]["reason"] == "waiting_for_preferred"
    assert planned["estimated_wait_s"] > 0

    # 40 s past the blocker's estimate: it still runs. Not "free at <now>", not a zero wait.
    ctx.clock.advance((blocker_end - ctx.clock.now()).total_seconds() + 40)
    now = ctx.clock.now()
    run_pass(ctx)
    late = _pending(demo, job)
    assert task_state(demo, job) == "queued" and late["reason"] == "waiting_for_preferred"
    assert _at(late["free_at"]) > now - timedelta(minutes=1)  # free_at is shown to the minute
    assert late["estimated_wait_s"] >= 60
    assert late["estimate_basis"] == "overrun" and "has overrun its estimate" in late["summary"]
    assert late["promised_start"] == first["promised_start"]  # the promise is not moved along
    planned = demo.post("/api/v1/tasks/plan", json={**JOB, "name": "like-it"}).json()
    assert planned["explanation"]["reason"] == "waiting_for_preferred" and planned["estimated_wait_s"] >= 60
    assert planned["explanation"]["free_at"] == late["free_at"] and planned["explanation"]["eta_basis"] == "forecast"

    # Past the promised start (and its grace): the substitute is taken.
    ctx.clock.advance(PROMISE_GRACE_S)
    drive_until(ctx, lambda: task_state(demo, job) != "queued")
    admitted = demo.get(f"/api/v1/tasks/{job}").json()
    assert {p["model"] for p in admitted["placements"]} == {A100}
    assert task_state(demo, blocker) == "running"
    demo.post(f"/api/v1/tasks/{blocker}/cancel")
    drive_until(ctx, lambda: task_state(demo, blocker) == "cancelled")


def test_plan_takes_the_substitute_when_waiting_does_not_pay(ctx: ServiceContext, demo: TestClient) -> None:
    blocker = _submit(demo, {**BLOCKER, "runtime_estimate": "10h"})
    drive_until(ctx, lambda: task_state(demo, blocker) == "running")
    planned = demo.post("/api/v1/tasks/plan", json=JOB).json()
    assert planned["feasible"] is True and planned["fallback_used"] is True
    assert planned["explanation"]["reason"] == "fits"
    job = _submit(demo, JOB)
    drive_until(ctx, lambda: task_state(demo, job) != "queued")
    assert {p["model"] for p in demo.get(f"/api/v1/tasks/{job}").json()["placements"]} == {A100}
    demo.post(f"/api/v1/tasks/{blocker}/cancel")
    drive_until(ctx, lambda: task_state(demo, blocker) == "cancelled")


def test_an_overrun_estimate_falls_back_to_the_template_history(ctx: ServiceContext, demo: TestClient) -> None:
    ids = [_submit(demo, {**example_task("data-prep.yaml"), "name": f"prep-{i}"}) for i in range(3)]
    drive_until(ctx, lambda: all(task_state(demo, i) == "succeeded" for i in ids))
    start = ctx.clock.now()
    with ctx.db.transaction() as session:
        for i, task_id in enumerate(ids):  # recorded runs of 10, 20 and 30 minutes: median 20
            session.execute(
                update(TaskRow).where(TaskRow.id == task_id).values(started_at=start, finished_at=start + timedelta(minutes=10 * (i + 1)))
            )
    # Told 5 minutes; its template usually takes 20.
    running = _submit(demo, {**example_task("data-prep.yaml"), "name": "prep-now", "runtime_estimate": "5m", "command": "sleep 60"})
    drive_until(ctx, lambda: task_state(demo, running) == "running")

    def current():
        with ctx.db.transaction() as session:
            inv = load_inventory(ctx, session)
            [task] = running_tasks(session, inv, learned_runtimes(session, inv), ctx.clock.now())
        return task

    assert current().estimate_basis == "estimate"
    ctx.clock.advance(10 * 60)
    by_history = current()
    assert (by_history.estimate_basis, by_history.revised_from) == ("history", by_history.started_at + timedelta(minutes=5))
    assert by_history.expected_end == pytest.approx(by_history.started_at + timedelta(minutes=20), abs=timedelta(seconds=1))
    ctx.clock.advance(15 * 60)  # 5 minutes past the history too: expected 5 minutes more
    overrun = current()
    assert overrun.estimate_basis == "overrun" and overrun.expected_end == ctx.clock.now() + timedelta(minutes=5)
    demo.post(f"/api/v1/tasks/{running}/cancel")
    drive_until(ctx, lambda: task_state(demo, running) == "cancelled")
