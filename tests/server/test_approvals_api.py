"""Approvals through the API: a task that trips a rule waits in pending_approval and runs
only once approved; rejected or expired ones never run; held Quota changes apply on
approval; who may decide and see; every step audited."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hetpool.core.governance import APPROVAL_REASON_LABEL, APPROVED_OVER_QUOTA_LABEL
from hetpool.server.db.models import UserRow
from hetpool.server.db.models_access import RoleBindingRow
from hetpool.server.services import auth
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.loop import run_pass
from tests.server.helpers import example_task, run_to_end, task_state

TENANT = "ai-lab/nlp/llm-sft"


def make_user(ctx: ServiceContext, api: TestClient, name: str, *bindings: tuple[str, str | None]) -> TestClient:
    """A client for a new user holding `bindings` (role, tenant)."""
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        user = UserRow(name=name, role=bindings[0][0], created_at=now)
        session.add(user)
        session.flush()
        for role, tenant in bindings:
            session.add(RoleBindingRow(user_id=user.id, role=role, tenant=tenant or "", created_at=now, created_by="test"))
        token = auth.issue_token(session, user, label="test", now=now)
    return TestClient(api.app, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def people(ctx: ServiceContext, demo: TestClient) -> dict[str, TestClient]:
    return {
        "admin": demo,
        "alice": make_user(ctx, demo, "alice", ("member", "ai-lab/nlp")),  # submits
        "bob": make_user(ctx, demo, "bob", ("tenant-admin", "ai-lab")),  # approves up the tree
        "carol": make_user(ctx, demo, "carol", ("member", "infra")),  # named approver only
        "erin": make_user(ctx, demo, "erin", ("member", "infra")),  # no say, sees nothing
    }


def apply(api: TestClient, *documents: dict) -> list[dict]:
    response = api.post("/api/v1/apply", json={"documents": list(documents)})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def policy(name: str = "lab", **fields) -> dict:
    return {"kind": "ApprovalPolicy", "name": name, "tenant": "ai-lab", "over_quota": False, "budget_exceeded": False, **fields}


def gpu_task(name: str = "sft", gpus: int = 4, **fields) -> dict:
    task = {**example_task("pytorch-ddp-training.yaml"), "name": name, "command": "echo trained", "env": "dev", **fields}
    task["per_worker"] = {**task["per_worker"], "devices": {**task["per_worker"]["devices"], "count": gpus}}
    return task


def submit(api: TestClient, task: dict) -> dict:
    response = api.post("/api/v1/tasks", json=task)
    assert response.status_code == 201, response.text
    return response.json()


def pending_request(api: TestClient, task_id: str) -> dict:
    detail = api.get(f"/api/v1/tasks/{task_id}").json()
    assert detail["state"] == "pending_approval", detail
    return detail["approval"]


def passes(ctx: ServiceContext, n: int = 3) -> None:
    for _ in range(n):
        run_pass(ctx)


def audit_actions(api: TestClient, approval_id: str) -> list[tuple[str, str, str | None, str]]:
    events = api.get("/api/v1/audit", params={"object_id": approval_id}).json()
    return [(e["action"], e["actor"], (e["before"] or {}).get("state"), e["after"]["state"]) for e in events if e["object_kind"] == "Approval"]


def test_an_over_quota_task_waits_for_approval_and_runs_only_after_it(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    admin, alice, bob = people["admin"], people["alice"], people["bob"]
    quota = {"kind": "Quota", "name": "sft-gpus", "tenant": TENANT, "limits": [{"resource": "gpu", "nominal": 4, "borrowing_limit": 0}]}
    apply(admin, quota, policy(over_quota=True))
    small = submit(alice, gpu_task("small", gpus=1))
    assert small["state"] == "queued"  # within quota: no approval
    labels = {APPROVAL_REASON_LABEL: "deadline on Friday"}
    big = submit(alice, gpu_task("big", gpus=4, labels=labels))  # 2 workers x 4 = 8 GPUs > 4
    assert big["state"] == "pending_approval" and "over quota" in big["message"]
    request = pending_request(alice, big["id"])
    assert [r["rule"] for r in request["reasons"]] == ["over_quota"]
    assert run_to_end(ctx, alice, small["id"])["state"] == "succeeded"
    passes(ctx)
    assert task_state(alice, big["id"]) == "pending_approval"  # the scheduler never sees it
    assert alice.get(f"/api/v1/approvals/{request['id']}").json()["reason"] == "deadline on Friday"
    approved = bob.post(f"/api/v1/approvals/{request['id']}/approve", json={"comment": "ok for this week"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["state"] == "approved" and approved.json()["decided_by"] == "bob"
    task = alice.get(f"/api/v1/tasks/{big['id']}").json()
    assert task["state"] == "queued" and task["message"] == "approved by bob: ok for this week"
    assert task["spec"]["labels"][APPROVED_OVER_QUOTA_LABEL] == "true"
    assert run_to_end(ctx, alice, big["id"])["state"] == "succeeded"
    assert audit_actions(admin, request["id"]) == [("approval.request", "alice", None, "pending"), ("approval.approve", "bob", "pending", "approved")]


def test_the_quota_marker_is_set_only_for_over_quota_approvals_and_never_by_users(
    ctx: ServiceContext, people: dict[str, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hetpool.server.services import quota as quota_service

    admin, alice, bob = people["admin"], people["alice"], people["bob"]
    monkeypatch.setattr(quota_service, "over_quota", lambda ctx, session, inv, spec: "gpu: 8 of 4" if spec.name == "big" else None)
    apply(admin, policy(over_quota=True, max_devices=2))
    big, wide = submit(alice, gpu_task("big")), submit(alice, gpu_task("wide"))
    assert [r["message"] for r in pending_request(alice, big["id"])["reasons"]] == [
        "over quota: gpu: 8 of 4",
        "asks for 8 devices; more than 2 need approval",
    ]
    for task in (big, wide):
        assert bob.post(f"/api/v1/approvals/{pending_request(alice, task['id'])['id']}/approve").status_code == 200
    assert alice.get(f"/api/v1/tasks/{big['id']}").json()["spec"]["labels"] == {APPROVED_OVER_QUOTA_LABEL: "true"}
    assert alice.get(f"/api/v1/tasks/{wide['id']}").json()["spec"]["labels"] == {}
    refused = alice.post("/api/v1/tasks", json=gpu_task("sneaky", gpus=1, labels={APPROVED_OVER_QUOTA_LABEL: "true"}))
    assert refused.status_code == 422 and APPROVED_OVER_QUOTA_LABEL in refused.json()["message"]


def test_a_rejected_task_never_runs(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    admin, alice, bob = people["admin"], people["alice"], people["bob"]
    apply(admin, policy(max_devices=4))
    assert submit(alice, gpu_task("fits", gpus=2))["state"] == "queued"
    task = submit(alice, gpu_task("huge", gpus=4))
    request = pending_request(alice, task["id"])
    no_comment = bob.post(f"/api/v1/approvals/{request['id']}/reject", json={"comment": ""})
    assert no_comment.status_code == 422
    rejected = bob.post(f"/api/v1/approvals/{request['id']}/reject", json={"comment": "use 4 GPUs"})
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    passes(ctx)
    after = alice.get(f"/api/v1/tasks/{task['id']}").json()
    assert after["state"] == "cancelled" and after["message"] == "rejected by bob: use 4 GPUs"
    assert after["attempt"] == 0 and after["placements"] == [] and after["started_at"] is None
    twice = bob.post(f"/api/v1/approvals/{request['id']}/approve", json={})
    assert twice.status_code == 409 and "already decided (rejected by bob)" in twice.json()["message"]
    assert audit_actions(admin, request["id"])[-1] == ("approval.reject", "bob", "pending", "rejected")
    assert [e["action"] for e in after["events"]] == ["task.submit", "task.cancelled"]


def test_an_expired_request_cancels_its_task_which_never_runs(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    admin, alice, bob = people["admin"], people["alice"], people["bob"]
    apply(admin, policy(environments=["prod"], expire_after="1h"))
    assert submit(alice, gpu_task("dev-run", gpus=1))["state"] == "queued"
    task = submit(alice, gpu_task("prod-run", gpus=1, env="prod"))
    request = pending_request(alice, task["id"])
    assert request["expires_at"] == "2026-01-01T01:00:00Z" and [r["rule"] for r in request["reasons"]] == ["environment"]
    ctx.clock.advance(59 * 60)
    passes(ctx, 1)
    assert task_state(alice, task["id"]) == "pending_approval"
    ctx.clock.advance(2 * 60)
    late = bob.post(f"/api/v1/approvals/{request['id']}/approve")  # past the deadline, before the worker noticed
    assert late.status_code == 409 and "expired" in late.json()["message"]
    passes(ctx)
    after = alice.get(f"/api/v1/tasks/{task['id']}").json()
    assert after["state"] == "cancelled" and after["message"] == "approval expired after 1h" and after["attempt"] == 0
    assert alice.get(f"/api/v1/approvals/{request['id']}").json()["state"] == "expired"
    assert audit_actions(admin, request["id"])[-1] == ("approval.expire", "approvals", "pending", "expired")


def test_who_may_decide_and_who_may_see(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    admin, alice, bob, carol, erin = (people[n] for n in ("admin", "alice", "bob", "carol", "erin"))
    apply(admin, policy(max_devices=1, approvers=["carol"]))
    first, second = submit(alice, gpu_task("one", gpus=2)), submit(alice, gpu_task("two", gpus=2))
    req1, req2 = pending_request(alice, first["id"]), pending_request(alice, second["id"])
    assert req1["approvers"] == ["carol"]
    own = alice.post(f"/api/v1/approvals/{req1['id']}/approve")
    assert own.status_code == 403 and "someone else" in own.json()["message"]
    assert erin.get("/api/v1/approvals").json() == [] and erin.get(f"/api/v1/approvals/{req1['id']}").status_code == 404
    assert {r["id"] for r in alice.get("/api/v1/approvals", params={"state": "pending"}).json()} == {req1["id"], req2["id"]}
    assert {r["id"] for r in carol.get("/api/v1/approvals").json()} == {req1["id"], req2["id"]}
    assert len(bob.get("/api/v1/approvals").json()) == 2
    assert carol.post(f"/api/v1/approvals/{req1['id']}/approve").status_code == 200  # named by the policy
    assert bob.post(f"/api/v1/approvals/{req2['id']}/approve").status_code == 200  # tenant-admin above ai-lab/nlp/llm-sft
    assert bob.post(f"/api/v1/approvals/{req2['id']}/approve").status_code == 409
    assert alice.get("/api/v1/approvals", params={"state": "pending"}).json() == []
    # A platform-admin may approve their own request.
    mine = submit(admin, gpu_task("admins", gpus=2))
    assert admin.post(f"/api/v1/approvals/{pending_request(admin, mine['id'])['id']}/approve").status_code == 200


def test_a_tenant_admin_elsewhere_may_not_decide(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    from hetpool.governance.access import Binding
    from hetpool.server.services.access import holds_role

    outsider = auth.Principal(user_id=0, name="x", role="tenant-admin", bindings=(Binding("tenant-admin", "infra"),))
    assert not holds_role(outsider, "tenant-admin", TENANT), "a tenant-admin of infra must not hold the role on another tenant"
    admin, alice = people["admin"], people["alice"]
    dave = make_user(ctx, admin, "dave", ("tenant-admin", "infra"))
    apply(admin, policy(max_devices=1))
    request = pending_request(alice, submit(alice, gpu_task("one", gpus=2))["id"])
    assert dave.get(f"/api/v1/approvals/{request['id']}").status_code == 404
    assert dave.post(f"/api/v1/approvals/{request['id']}/approve").status_code == 404


def test_cancelling_a_waiting_task_withdraws_its_request(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    admin, alice, bob = people["admin"], people["alice"], people["bob"]
    apply(admin, policy(max_devices=1))
    task = submit(alice, gpu_task("changed-my-mind", gpus=2))
    request = pending_request(alice, task["id"])
    assert alice.post(f"/api/v1/tasks/{task['id']}/cancel").json()["state"] == "cancelled"
    late = bob.post(f"/api/v1/approvals/{request['id']}/approve")
    assert late.status_code == 409 and "no longer waiting" in late.json()["message"]
    passes(ctx, 1)
    assert bob.get(f"/api/v1/approvals/{request['id']}").json()["state"] == "withdrawn"
    assert task_state(alice, task["id"]) == "cancelled"


def test_plan_says_when_a_task_would_need_approval(people: dict[str, TestClient]) -> None:
    admin, alice = people["admin"], people["alice"]
    assert admin.post("/api/v1/tasks/plan", json=gpu_task()).json()["approval"] == {"needed": False, "reasons": [], "expire_after": None}
    apply(admin, policy(max_devices=1, expire_after="8h"))
    plan = alice.post("/api/v1/tasks/plan", json=gpu_task()).json()
    assert plan["approval"]["needed"] is True and plan["approval"]["expire_after"] == "8h"
    assert alice.get("/api/v1/tasks").json() == []  # planning commits nothing


def test_a_quota_change_by_a_tenant_admin_waits_for_approval(ctx: ServiceContext, people: dict[str, TestClient]) -> None:
    admin, bob = people["admin"], people["bob"]
    apply(admin, policy(quota_changes=True))
    quota = {"kind": "Quota", "name": "nlp-gpus", "tenant": "ai-lab/nlp", "limits": [{"resource": "gpu", "nominal": 16}]}
    [held] = apply(bob, quota)
    assert held["action"] == "held for approval" and held["id"].startswith("apr-")
    assert admin.get("/api/v1/objects/Quota/nlp-gpus").status_code == 404
    request = bob.get(f"/api/v1/approvals/{held['id']}").json()
    assert request["kind"] == "quota" and request["document"]["limits"][0]["nominal"] == 16 and request["task_id"] is None
    assert bob.post(f"/api/v1/approvals/{held['id']}/approve").status_code == 403  # not their own
    assert admin.post(f"/api/v1/approvals/{held['id']}/approve", json={"comment": "fine"}).status_code == 200
    assert admin.get("/api/v1/objects/Quota/nlp-gpus").json()["limits"][0]["nominal"] == 16
    # Rejected: nothing changes. Unchanged: nothing to approve. A platform-admin never waits.
    [held] = apply(bob, {**quota, "limits": [{"resource": "gpu", "nominal": 32}]})
    assert admin.post(f"/api/v1/approvals/{held['id']}/reject", json={"comment": "no"}).json()["state"] == "rejected"
    assert admin.get("/api/v1/objects/Quota/nlp-gpus").json()["limits"][0]["nominal"] == 16
    assert apply(bob, quota)[0]["action"] == "unchanged"
    assert apply(admin, {**quota, "limits": [{"resource": "gpu", "nominal": 8}]})[0]["action"] == "configured"
    actions = [a for a, *_ in audit_actions(admin, held["id"])]
    assert actions == ["approval.request", "approval.reject"]
