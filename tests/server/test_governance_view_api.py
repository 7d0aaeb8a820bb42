"""GET /api/v1/governance/approval-inbox: the approval requests of GET /approvals (same
visibility), each with its age, whether the caller may decide it, what it asks for and
what it would cost."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.test_approvals_api import apply, gpu_task, make_user, policy, submit


@pytest.fixture
def people(ctx: ServiceContext, demo: TestClient) -> dict[str, TestClient]:
    return {
        "admin": demo,
        "alice": make_user(ctx, demo, "alice", ("member", "ai-lab/nlp")),  # submits
        "bob": make_user(ctx, demo, "bob", ("tenant-admin", "ai-lab")),  # approves up the tree
        "carol": make_user(ctx, demo, "carol", ("member", "infra")),  # named approver only
        "erin": make_user(ctx, demo, "erin", ("member", "infra")),  # no say, sees nothing
    }


def inbox(client: TestClient, **params) -> list[dict]:
    response = client.get("/api/v1/governance/approval-inbox", params=params)
    assert response.status_code == 200, response.text
    return response.json()["requests"]


def test_the_inbox_adds_what_a_decision_needs_and_scopes_like_the_list(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    admin, alice, bob, carol, erin = (people[n] for n in ("admin", "alice", "bob", "carol", "erin"))
    apply(admin, policy(max_devices=1, approvers=["carol"], expire_after="2h"))
    task = submit(alice, {**gpu_task("big", gpus=4), "runtime_estimate": "3h"})
    ctx.clock.advance(600)
    (mine,) = inbox(alice, state="pending")
    assert mine["age_s"] == 600 and mine["expires_in_s"] == 2 * 3600 - 600 and mine["may_decide"] is False  # its own
    assert {r["id"] for r in alice.get("/api/v1/approvals").json()} == {mine["id"]}
    requested = mine["requested"]
    assert (requested["name"], requested["workers"], requested["devices_per_worker"], requested["total_devices"]) == ("big", 2, 4, 8)
    assert requested["device_class"] == "gpu" and requested["runtime_estimate"] == "3h" and "command" not in requested
    estimate = mine["estimate"]
    assert estimate["currency"] == "CNY" and estimate["basis"] == "runtime_estimate" and estimate["cost_per_hour"] > 0
    assert estimate["estimated_cost"] == pytest.approx(estimate["cost_per_hour"] * estimate["runtime_s"] / 3600, abs=0.01)
    # Both approvers may decide; the named one sees the shape of a task it cannot read.
    assert inbox(bob)[0]["may_decide"] is True and inbox(carol)[0]["may_decide"] is True
    assert carol.get(f"/api/v1/tasks/{task['id']}").status_code == 404
    assert inbox(erin) == [] and inbox(bob, tenant="infra") == []
    # Past its deadline, nobody may decide it any more.
    ctx.clock.advance(2 * 3600)
    assert inbox(bob)[0]["may_decide"] is False


def test_decided_and_quota_requests(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    admin, alice, bob = people["admin"], people["alice"], people["bob"]
    apply(admin, policy(max_devices=1, quota_changes=True))
    task = submit(alice, gpu_task("one", gpus=2))
    request_id = alice.get(f"/api/v1/tasks/{task['id']}").json()["approval"]["id"]
    assert bob.post(f"/api/v1/approvals/{request_id}/approve", json={"comment": "ok"}).status_code == 200
    quota = {"kind": "Quota", "name": "nlp-gpus", "tenant": "ai-lab/nlp", "limits": [{"resource": "gpu", "nominal": 16, "borrowing_limit": 4}]}
    [held] = apply(bob, quota)
    by_id = {r["id"]: r for r in inbox(admin)}
    decided = by_id[request_id]
    assert decided["state"] == "approved" and decided["may_decide"] is False and decided["estimate"] is None and decided["requested"]["name"] == "one"
    quota_request = by_id[held["id"]]
    assert quota_request["kind"] == "quota" and quota_request["may_decide"] is True and quota_request["estimate"] is None
    assert quota_request["requested"]["limits"] == [{"resource": "gpu", "nominal": 16, "borrowing_limit": 4, "lending_limit": None}]
    assert next(r for r in inbox(bob) if r["id"] == held["id"])["may_decide"] is False  # bob applied it
