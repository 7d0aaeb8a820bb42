"""Quotas through the API: hierarchy checks at apply, admission within quota, borrowing a
sibling's idle quota, and the lender getting it back by preemption."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, task_state

CUDA = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}}
ESTATE = [
    {"kind": "Tenant", "name": "org"},
    {"kind": "Tenant", "name": "org/a"},
    {"kind": "Tenant", "name": "org/b"},
    {"kind": "Cluster", "name": "c1"},
    {
        "kind": "Node",
        "name": "g1",
        "cluster": "c1",
        "cpu_cores": 64,
        "memory_gb": 512,
        "devices": [{"model": "nvidia-a100-80g", "count": 8}],
        "stack": CUDA,
    },
    {"kind": "Pool", "name": "a100", "cluster": "c1", "model": "nvidia-a100-80g", "nodes": ["g1"]},
    {"kind": "Quota", "name": "org", "tenant": "org", "limits": [{"resource": "nvidia-a100-80g", "nominal": 8}]},
    {"kind": "Quota", "name": "team-a", "tenant": "org/a", "limits": [{"resource": "nvidia-a100-80g", "nominal": 4}]},
    {"kind": "Quota", "name": "team-b", "tenant": "org/b", "limits": [{"resource": "nvidia-a100-80g", "nominal": 4, "borrowing_limit": 2}]},
]


@pytest.fixture
def estate(api: TestClient) -> TestClient:
    response = api.post("/api/v1/apply", json={"documents": ESTATE})
    assert response.status_code == 200, response.text
    return api


def submit(api: TestClient, tenant: str, devices: int, name: str, **fields) -> str:
    body = {"name": name, "tenant": tenant, "type": "training", "image": "img", "command": "sleep 60"}
    body["per_worker"] = {"devices": {"class": "gpu", "count": devices}, "cpu": 1, "memory_gb": 1}
    response = api.post("/api/v1/tasks", json={**body, **fields})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def usage(api: TestClient) -> dict[str, dict]:
    return {r["quota"]: r for r in api.get("/api/v1/quotas/usage").json()}


def pending(api: TestClient, task_id: str) -> str:
    return (api.get(f"/api/v1/tasks/{task_id}").json().get("pending") or {}).get("summary") or ""


def test_children_never_exceed_their_parent_and_resources_are_checked(estate: TestClient) -> None:
    big = {"kind": "Quota", "name": "team-a", "tenant": "org/a", "limits": [{"resource": "nvidia-a100-80g", "nominal": 6}]}
    response = estate.post("/api/v1/apply", json={"documents": [big]})
    assert response.status_code == 422 and "give 10 nvidia-a100-80g; org has only 8" in response.json()["message"]
    typo = {"kind": "Quota", "name": "x", "tenant": "org/a", "limits": [{"resource": "a100s", "nominal": 1}]}
    response = estate.post("/api/v1/apply", json={"documents": [typo]})
    assert response.status_code == 422 and "limits[0].resource" in response.json()["message"] and "a100-equivalent" in response.json()["message"]
    assert estate.delete("/api/v1/objects/tenants/org%2Fa").status_code == 409  # its quota still refers to it


def test_borrowing_admits_on_a_sibling_idle_quota_and_the_lender_reclaims_it(ctx: ServiceContext, estate: TestClient) -> None:
    # b asks for 6: its own 4 plus 2 borrowed from a's idle quota (b's borrowing limit is 2).
    borrower = submit(estate, "org/b", 6, "b-big", priority="high")
    drive_until(ctx, lambda: task_state(estate, borrower) == "running")
    rows = usage(estate)
    assert (rows["team-b"]["used"], rows["team-b"]["borrowed"], rows["team-a"]["lent"]) == (6, 2, 2)
    assert rows["team-a"]["headroom"] == 4  # its nominal stays guaranteed: what it lent comes back by preemption
    # More than the borrowing limit allows waits, explained as a quota matter.
    greedy = submit(estate, "org/b", 1, "b-more")
    drive_until(ctx, lambda: "over quota" in pending(estate, greedy))
    assert "team-b" in pending(estate, greedy) and "borrowing limit 2" in pending(estate, greedy)
    estate.post(f"/api/v1/tasks/{greedy}/cancel")
    # a needs its 4 back: within its nominal, it preempts the borrower although that one has a higher priority.
    lender = submit(estate, "org/a", 4, "a-needs-its-quota", priority="low", command="echo reclaimed")
    drive_until(ctx, lambda: task_state(estate, lender) == "succeeded", timeout_s=30)
    victim = estate.get(f"/api/v1/tasks/{borrower}").json()
    assert any(e["action"] == "task.preempted" for e in victim["events"])
    messages = " ".join((e.get("after") or {}).get("message", "") or "" for e in victim["events"])
    # Told why, not by whom: org/b's readers may not read org/a's tasks (test_trust_visibility.py).
    assert "quota reclaimed by another tenant: preempted by a task of another tenant" in messages
    assert "org/a" not in messages and lender not in messages
    estate.post(f"/api/v1/tasks/{borrower}/cancel")
    drive_until(ctx, lambda: task_state(estate, borrower) == "cancelled")


def test_borrowing_never_preempts_work_within_its_own_quota(ctx: ServiceContext, estate: TestClient) -> None:
    first = submit(estate, "org/b", 4, "b-own")
    drive_until(ctx, lambda: task_state(estate, first) == "running")
    assert usage(estate)["team-b"]["borrowed"] == 0
    second = submit(estate, "org/a", 4, "a-own", priority="high")
    drive_until(ctx, lambda: task_state(estate, second) == "running")
    # a would have to borrow b's quota, and b's task (lower priority) runs within it: nobody is preempted.
    third = submit(estate, "org/a", 2, "a-over", priority="high")
    drive_until(ctx, lambda: "over quota" in pending(estate, third))
    assert "would have to borrow" in pending(estate, third)
    assert task_state(estate, first) == "running" and task_state(estate, second) == "running"
    # Within its own quota, priority preemption still works inside the team.
    fourth = submit(estate, "org/a", 4, "a-urgent", priority="critical", command="true")
    drive_until(ctx, lambda: task_state(estate, fourth) == "succeeded", timeout_s=30)
    assert any(e["action"] == "task.preempted" for e in estate.get(f"/api/v1/tasks/{second}").json()["events"])
    assert not any(e["action"] == "task.preempted" for e in estate.get(f"/api/v1/tasks/{first}").json()["events"])
    for task_id in (first, second, third):
        estate.post(f"/api/v1/tasks/{task_id}/cancel")
    drive_until(ctx, lambda: all(task_state(estate, t) == "cancelled" for t in (first, second, third)))
