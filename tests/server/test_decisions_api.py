"""What the API says about a pending task, after one scheduler pass (issue 16): the reason
code and facts stored with the task, and an estimated start consistent with its
reservation.

Wrong before: a task held back by another task's reservation said "preempting 0
lower-priority task(s)" with `preempting: []`, and the head holding the reservation had
`estimated_start: null`; a queued task whose quota shrank below its request waited "for
capacity" with a reservation and an estimated start.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.scheduler import schedule_once

CUDA = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}}
H100 = "nvidia-h100"
A100 = "nvidia-a100-80g"


def _node(name: str, model: str) -> dict:
    doc = {"kind": "Node", "name": name, "cluster": "c1", "cpu_cores": 64, "memory_gb": 512, "stack": CUDA}
    return doc | {"devices": [{"model": model, "count": 8}]}


# Two H100 nodes for the gang; one A100 node where low-priority preemptible work runs.
ESTATE = [
    {"kind": "Tenant", "name": "org"},
    {"kind": "Tenant", "name": "org/a"},
    {"kind": "Tenant", "name": "org/b"},
    {"kind": "Cluster", "name": "c1"},
    _node("g0", H100),
    _node("g1", H100),
    _node("a0", A100),
    {"kind": "Pool", "name": "h100", "cluster": "c1", "model": H100, "nodes": ["g0", "g1"]},
    {"kind": "Pool", "name": "a100", "cluster": "c1", "model": A100, "nodes": ["a0"]},
]


def _submit(api: TestClient, name: str, devices: dict, workers: int = 1, tenant: str = "org/a", **fields) -> str:
    body = {"name": name, "tenant": tenant, "type": "training", "image": "img", "command": "sleep 60", "workers": workers}
    body |= {"per_worker": {"devices": devices, "cpu": 1, "memory_gb": 1}, **fields}
    response = api.post("/api/v1/tasks", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _pending(api: TestClient, task_id: str) -> dict:
    body = api.get(f"/api/v1/tasks/{task_id}").json()
    assert body["state"] == "queued", body["state"]
    return body["pending"]


def _busy_estate(api: TestClient, ctx: ServiceContext) -> None:
    """H100 devices held by work that may not be preempted (2h and 3h: no two idle H100
    nodes before +3h), the A100 node by low-priority preemptible work (10h)."""
    assert api.post("/api/v1/apply", json={"documents": ESTATE}).status_code == 200
    _submit(api, "a100-sweep", {"class": "gpu", "models": [A100], "count": 8}, priority="low", runtime_estimate="10h")
    for name, hours in (("pinned-0", 2), ("pinned-1", 3)):
        _submit(api, name, {"class": "gpu", "models": [H100], "count": 4}, priority="low", preemptible=False, runtime_estimate=f"{hours}h")
        schedule_once(ctx)
    ctx.clock.advance(60)


def test_a_task_held_back_by_a_reservation_is_shown_blocked_and_the_head_has_its_start(ctx: ServiceContext, api: TestClient) -> None:
    _busy_estate(api, ctx)
    gang = _submit(api, "gang", {"class": "gpu", "models": [H100], "count": 8}, workers=2)
    ctx.clock.advance(60)  # the test clock stands still: the gang is the older, so the head
    small = _submit(api, "small", {"class": "gpu", "models": [H100], "count": 1})
    result = schedule_once(ctx)
    assert not any(d.victims for d in result.decisions)

    head = _pending(api, gang)
    assert head["reason"] == "holds_reservation" and head["reservation"]["start_at"] is not None, head
    # The reserved start is what the head is told (not null, never later than the reservation).
    assert head["estimated_start"] == head["reservation"]["start_at"]
    assert head["eta_basis"] in ("forecast", "reservation")

    blocked = _pending(api, small)
    assert blocked["reason"] == "blocked_by_reservation"
    assert "preempting" not in blocked
    assert blocked["blocking_task"] == gang and blocked["start_at"] == head["reservation"]["start_at"]
    assert blocked["summary"].startswith(f"held back by the reservation of {gang} (starts ")

    # `plan` runs the scheduler's own cycle with the planned task added: it says the same.
    body = {"name": "small-2", "tenant": "org/a", "type": "training", "image": "img", "command": "true"}
    body |= {"per_worker": {"devices": {"class": "gpu", "models": [H100], "count": 1}, "cpu": 1, "memory_gb": 1}}
    plan = api.post("/api/v1/tasks/plan", json=body).json()
    assert plan["feasible"] is False and plan["placements"] == []
    assert plan["explanation"]["reason"] == "blocked_by_reservation" and plan["explanation"]["blocking_task"] == gang
    # The gang gives no runtime estimate: once it starts, nothing says when H100s free up.
    assert plan["explanation"]["eta_basis"] == blocked["eta_basis"] == "beyond_horizon"
    assert plan["estimated_start"] is None and "no start within the forecast horizon" in plan["explanation"]["summary"]


def test_plan_says_a_high_priority_task_would_preempt_and_a_lone_one_fits(ctx: ServiceContext, api: TestClient) -> None:
    _busy_estate(api, ctx)
    body = {"name": "urgent", "tenant": "org/b", "type": "training", "image": "img", "command": "true"}
    body |= {"per_worker": {"devices": {"class": "gpu", "models": [A100], "count": 8}, "cpu": 1, "memory_gb": 1}}
    plan = api.post("/api/v1/tasks/plan", json={**body, "priority": "high"}).json()
    assert plan["feasible"] is False and plan["explanation"]["reason"] == "preempting"
    # The victim is org/a's: org/b learns how many tasks it would evict, not which.
    assert plan["explanation"]["victim_count"] == 1 and plan["explanation"]["preempting"] == []
    assert api.get("/api/v1/tasks?state=running").status_code == 200
    # Nothing was evicted by planning.
    assert all(t["state"] != "preempting" for t in api.get("/api/v1/tasks").json())

    idle = {**body, "name": "small-cpu", "per_worker": {"cpu": 1, "memory_gb": 1}, "type": "general"}
    plan = api.post("/api/v1/tasks/plan", json=idle).json()
    assert plan["feasible"] is True and plan["explanation"]["reason"] == "fits"
    assert plan["queue_position"] == 0 and plan["estimated_wait_s"] == 0 and plan["placements"]


def test_a_queued_task_whose_quota_shrank_below_its_request_exceeds_quota(ctx: ServiceContext, api: TestClient) -> None:
    _busy_estate(api, ctx)
    quota = {"kind": "Quota", "name": "team-b", "tenant": "org/b", "limits": [{"resource": H100, "nominal": 16}]}
    assert api.post("/api/v1/apply", json={"documents": [quota]}).status_code == 200
    task = _submit(api, "b-train", {"class": "gpu", "models": [H100], "count": 8}, workers=2, tenant="org/b", priority="high")
    schedule_once(ctx)
    assert _pending(api, task)["reason"] == "holds_reservation"  # within its quota: waits for capacity

    shrunk = {**quota, "limits": [{"resource": H100, "nominal": 4, "borrowing_limit": 0}]}
    assert api.post("/api/v1/apply", json={"documents": [shrunk]}).status_code == 200
    result = schedule_once(ctx)
    assert not any(d.victims for d in result.decisions) and result.reservations == []
    pending = _pending(api, task)
    assert pending["reason"] == "exceeds_quota"
    assert (pending["quota"], pending["requested"], pending["nominal"], pending["borrowing_limit"]) == ("team-b", 16, 4, 0)
    assert pending["summary"] == f"exceeds quota team-b even with borrowing: {H100} 16 > 4 nominal + 0 borrowable"
    assert pending["eta_basis"] == "none" and pending["estimated_start"] is None
    assert "reservation" not in pending and "position" not in pending


def test_another_tenants_blocking_task_is_not_named(ctx: ServiceContext, api: TestClient) -> None:
    """A member of org/b is told that another tenant's reservation holds its task back, not
    which task it is (the id would lead to org/a's work)."""
    _busy_estate(api, ctx)
    gang = _submit(api, "gang", {"class": "gpu", "models": [H100], "count": 8}, workers=2)
    ctx.clock.advance(60)
    # Lower priority, so that org/b's unused fair share does not put it before the gang.
    theirs = _submit(api, "theirs", {"class": "gpu", "models": [H100], "count": 1}, tenant="org/b", priority="low")
    schedule_once(ctx)
    blocked = _pending(api, theirs)
    assert blocked["reason"] == "blocked_by_reservation"
    assert blocked["blocking_task"] == "a task of another tenant"
    assert gang not in str(blocked) and blocked["summary"].startswith("held back by the reservation of a task of another tenant")
