"""Deadlines through the API on the demo estate: a task whose deadline only its fallback
meets is admitted there; a waiting task that can no longer meet its deadline says so in
its explanation; the task body shows `deadline` and `deadline_at_risk`; /metrics counts
the tasks at risk (queued, placed, and past their deadline; one total); the workload
overview lists them; and a deadline out of range is a clear 422."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.scheduler import schedule_once
from tests.server.test_metrics import scrape

H800, A100 = "nvidia-h800", "nvidia-a100-80g"  # 2.71 and 1.0 × the reference for training
TENANT = "ai-lab/nlp/llm-sft"
GPU_TASK = {
    "tenant": TENANT,
    "type": "training",
    "framework": {"name": "pytorch", "version": ">=2.4"},
    "per_worker": {"devices": {"class": "gpu", "count": 8}, "cpu": 8, "memory_gb": 64},
    "runtime_estimate": "10h",  # 10h on the A100s, ~3h41m on the H800s
    "command": "true",
}
GAUGE = "hetpool_tasks_deadline_at_risk"


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def _submit(api: TestClient, name: str, deadline: datetime | str | None = None, **fields) -> dict:
    body = {**GPU_TASK, "name": name, **fields}
    if deadline is not None:
        body["goal"] = {"deadline": _iso(deadline) if isinstance(deadline, datetime) else deadline}
    response = api.post("/api/v1/tasks", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def _task(api: TestClient, task_id: str) -> dict:
    response = api.get(f"/api/v1/tasks/{task_id}")
    assert response.status_code == 200
    return response.json()


def _at_risk(api: TestClient) -> float:
    """The gauge: one total (an unauthenticated scrape never names a tenant)."""
    [sample] = scrape(api)[GAUGE]
    assert sample.labels == {}
    return sample.value


def test_a_deadline_only_the_fallback_meets_is_admitted_on_the_fallback(ctx: ServiceContext, demo: TestClient) -> None:
    now = ctx.clock.now()
    fast = _submit(demo, "due-in-6h", deadline=now + timedelta(hours=6), fallback=[A100, H800])
    assert fast["deadline"] == _iso(now + timedelta(hours=6)) and fast["deadline_at_risk"] is False
    plain = _submit(demo, "no-deadline", fallback=[A100, H800])
    assert "deadline" not in plain and "deadline_at_risk" not in plain
    schedule_once(ctx)
    fast, plain = _task(demo, fast["id"]), _task(demo, plain["id"])
    # The A100s (preferred) take 10h, past the deadline; the H800s ~3h41m.
    assert fast["state"] == "admitted" and {p["model"] for p in fast["placements"]} == {H800}
    assert fast["fallback_used"] is True and "chosen because it meets the task's deadline" in fast["message"]
    assert fast["deadline_at_risk"] is False  # admitted now, ends ~3h41m later
    # Without a deadline the usual order holds: the preferred A100s.
    assert plain["state"] == "admitted" and {p["model"] for p in plain["placements"]} == {A100}
    assert _at_risk(demo) == 0

    # Still not finished once its deadline has passed: at risk from then on.
    ctx.clock.advance(7 * 3600)
    assert _task(demo, fast["id"])["deadline_at_risk"] is True
    assert _at_risk(demo) == 1


def test_a_waiting_task_that_cannot_meet_its_deadline_is_reported(ctx: ServiceContext, demo: TestClient) -> None:
    now = ctx.clock.now()
    # Holds the H800s for ~3h41m from now; its own 2h deadline is already out of reach.
    blocker = _submit(
        demo,
        "blocker",
        deadline=now + timedelta(hours=2),
        per_worker={**GPU_TASK["per_worker"], "devices": {"class": "gpu", "count": 8, "models": [H800]}},
    )
    schedule_once(ctx)
    assert _task(demo, blocker["id"])["state"] == "admitted"
    waiting = _submit(
        demo,
        "waits",
        deadline=now + timedelta(hours=5),
        per_worker={**GPU_TASK["per_worker"], "devices": {"class": "gpu", "count": 8, "models": [H800]}},
    )
    on_time = _submit(
        demo,
        "on-time",
        deadline=now + timedelta(days=2),
        priority="low",  # behind "waits" in the queue
        per_worker={**GPU_TASK["per_worker"], "devices": {"class": "gpu", "count": 8, "models": [H800]}},
    )
    schedule_once(ctx)

    body = _task(demo, waiting["id"])
    assert body["state"] == "queued" and body["deadline_at_risk"] is True
    pending = body["pending"]
    assert pending["deadline"] == (now + timedelta(hours=5)).isoformat() and pending["deadline_at_risk"] is True
    # Starts when the blocker ends (~3h41m), runs ~3h41m: ~2h23m after its 5h deadline.
    assert abs(pending["deadline_late_s"] - (2 * 3600 + 23 * 60)) <= 120
    assert "cannot meet its deadline" in pending["summary"]
    assert _task(demo, blocker["id"])["deadline_at_risk"] is True  # placed: start + runtime is after it
    later = _task(demo, on_time["id"])
    assert later["deadline_at_risk"] is False and later["pending"]["deadline_at_risk"] is False

    assert _at_risk(demo) == 2
    listed = demo.get("/api/v1/stats/workload").json()["deadlines_at_risk"]
    assert [t["id"] for t in listed] == [blocker["id"], waiting["id"]]  # earliest deadline first
    assert listed[1]["state"] == "queued" and listed[1]["late_s"] == pending["deadline_late_s"]  # the scheduler's figure


def test_a_deadline_already_past_at_submit_is_refused(ctx: ServiceContext, demo: TestClient) -> None:
    response = demo.post("/api/v1/tasks", json={**GPU_TASK, "name": "too-late", "goal": {"deadline": "2020-01-01T00:00:00Z"}})
    assert response.status_code == 422 and "goal.deadline" in response.json()["message"] and "in the past" in response.json()["message"]
    far = demo.post("/api/v1/tasks", json={**GPU_TASK, "name": "too-far", "goal": {"deadline": "2150-01-01T00:00:00Z"}})
    assert far.status_code == 422 and "more than 366d ahead" in far.json()["message"]
    assert demo.get("/api/v1/tasks").json() == [] and _at_risk(demo) == 0


def test_a_relative_deadline_is_pinned_at_submit(ctx: ServiceContext, demo: TestClient) -> None:
    task = _submit(demo, "relative", deadline="48h")
    assert task["deadline"] == _iso(ctx.clock.now() + timedelta(hours=48))
    ctx.clock.advance(3600)
    assert _task(demo, task["id"])["deadline"] == _iso(ctx.clock.now() + timedelta(hours=47))


@pytest.mark.parametrize(
    ("deadline", "words"),
    [
        ("0001-01-01T00:00:00Z", "the time is out of range"),
        ("9999-12-31T23:59:59Z", "the time is out of range"),
        ("2026-06-01T00:00:00", "a time needs its zone"),
        ("2026-13-40T00:00:00Z", "is not an ISO 8601 time"),
        ("100000d", "longer than the limit of 366d"),
        ("-5h", "invalid duration"),
        ("soon", "invalid duration"),
    ],
)
def test_a_deadline_out_of_range_or_unreadable_is_a_clear_422(demo: TestClient, deadline: str, words: str) -> None:
    """core/goal.py bounds a deadline (a time within 200 years of 2000, a duration within
    366 days); submit also refuses a time in the past or more than 366 days ahead (above)."""
    response = demo.post("/api/v1/tasks", json={**GPU_TASK, "name": "hostile", "goal": {"deadline": deadline}})
    assert response.status_code == 422, response.text
    [detail] = response.json()["details"]
    assert detail["loc"].endswith("goal.deadline") and words in detail["msg"]
    assert demo.get("/api/v1/tasks").json() == []  # nothing was queued
