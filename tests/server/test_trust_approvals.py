"""Separation of duties in approvals (issue 14, finding 3), through the API as the users
involved: nobody decides a request they made, nor one linked to them by who created whom,
granted whom a role or issued whom a token; deleting or loosening a governed object waits
for approval like changing it does. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import yaml
from alembic import command
from fastapi.testclient import TestClient

from hetpool.server.db.models_approvals import ApprovalRow
from hetpool.server.db.session import alembic_config, make_engine
from hetpool.server.services.context import ServiceContext
from tests.cli.test_cli_e2e import Server
from tests.cli.test_users_cli import run_as
from tests.conftest import database_url
from tests.server.test_access_api import as_token
from tests.server.test_approvals_api import apply, gpu_task, policy, submit

NLP_QUOTA = {"kind": "Quota", "name": "nlp-gpus", "tenant": "ai-lab/nlp", "limits": [{"resource": "gpu", "nominal": 8}]}
GOV = {"kind": "ApprovalPolicy", "name": "gov", "tenant": "ai-lab", "over_quota": False, "budget_exceeded": False, "governance_changes": True}
BUDGET = {"kind": "Budget", "name": "lab-month", "tenant": "ai-lab", "amount": 1000}


def create_user(api: TestClient, name: str, *bindings: tuple[str, str | None]) -> TestClient:
    """`api`'s user creates `name` and issues it a token, as a tenant-admin can."""
    created = api.post("/api/v1/users", json={"name": name, "bindings": [{"role": r, "tenant": t} for r, t in bindings]})
    assert created.status_code == 201, created.text
    token = api.post(f"/api/v1/users/{name}/tokens", json={"label": "test"})
    assert token.status_code == 201, token.text
    return as_token(api, token.json()["token"])


def raise_quota(client: TestClient, nominal: int = 32) -> str:
    [held] = apply(client, {**NLP_QUOTA, "limits": [{"resource": "gpu", "nominal": nominal}]})
    assert held["action"] == "held for approval", held
    return held["id"]


def nominal(api: TestClient, name: str = "nlp-gpus") -> float | None:
    response = api.get(f"/api/v1/objects/quotas/{name}")
    return response.json()["limits"][0]["nominal"] if response.status_code == 200 else None


def test_finding_3a_a_tenant_admin_cannot_approve_its_own_quota_raise_through_a_user_it_created(demo: TestClient) -> None:
    apply(demo, NLP_QUOTA, policy(quota_changes=True))
    mallory = create_user(demo, "mallory", ("tenant-admin", "ai-lab"))
    sock = create_user(mallory, "mallory2", ("tenant-admin", "ai-lab"))
    approval_id = raise_quota(mallory)
    refused = sock.post(f"/api/v1/approvals/{approval_id}/approve", json={"comment": "lgtm"})
    assert refused.status_code == 403, refused.text
    body = refused.json()
    assert body["code"] == "separation_of_duties" and "mallory created mallory2" in body["message"], body
    assert nominal(demo) == 8  # nothing applied
    assert demo.get(f"/api/v1/approvals/{approval_id}").json()["state"] == "pending"


def test_finding_3b_deleting_a_quota_under_a_quota_change_policy_is_held_not_done(demo: TestClient) -> None:
    apply(demo, NLP_QUOTA, {**policy(quota_changes=True), "tenant": "ai-lab/nlp"})
    mallory = create_user(demo, "mallory", ("tenant-admin", "ai-lab"))
    response = mallory.delete("/api/v1/objects/quotas/nlp-gpus")
    assert response.status_code == 202, response.text
    held = response.json()
    assert held["action"] == "held for approval" and held["id"].startswith("apr-"), held
    assert nominal(demo) == 8  # still in force
    request = demo.get(f"/api/v1/approvals/{held['id']}").json()
    assert request["kind"] == "quota" and request["operation"] == "delete" and request["state"] == "pending"
    # Approved by someone unrelated, the delete happens, and the trail says who asked and who let it.
    trent = create_user(demo, "trent", ("tenant-admin", "ai-lab"))
    refused_by_duties(mallory.post(f"/api/v1/approvals/{held['id']}/approve"), "mallory made it")
    assert trent.post(f"/api/v1/approvals/{held['id']}/approve", json={"comment": "retired"}).status_code == 200
    assert nominal(demo) is None
    deleted = [e for e in demo.get("/api/v1/audit", params={"object_id": "nlp-gpus"}).json() if e["action"] == "inventory.delete"]
    assert [(e["actor"], e["before"]["limits"][0]["nominal"]) for e in deleted] == [("trent", 8.0)]
    assert approval_events(demo, held["id"]) == [("approval.request", "mallory"), ("approval.refused", "mallory"), ("approval.approve", "trent")]
    # Without a policy on the tenant (ai-lab/cv), a tenant-admin's delete is immediate as before.
    apply(demo, {**NLP_QUOTA, "name": "cv-gpus", "tenant": "ai-lab/cv"})
    assert mallory.delete("/api/v1/objects/quotas/cv-gpus").status_code == 204


def refused_by_duties(response, *phrases: str) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["code"] == "separation_of_duties" and body["message"].startswith("separation of duties:"), body
    for phrase in phrases:
        assert phrase in body["message"], (phrase, body["message"])


def approval_events(api: TestClient, approval_id: str) -> list[tuple[str, str]]:
    return [(e["action"], e["actor"]) for e in api.get("/api/v1/audit", params={"object_id": approval_id}).json() if e["object_kind"] == "Approval"]


def test_refusals_are_audited_and_an_unrelated_tenant_admin_approves(demo: TestClient) -> None:
    apply(demo, NLP_QUOTA, policy(quota_changes=True))
    mallory = create_user(demo, "mallory", ("tenant-admin", "ai-lab"))
    sock = create_user(mallory, "mallory2", ("tenant-admin", "ai-lab"))
    trent = create_user(demo, "trent", ("tenant-admin", "ai-lab"))  # made by the platform-admin, not by mallory
    approval_id = raise_quota(mallory)
    refused_by_duties(sock.post(f"/api/v1/approvals/{approval_id}/approve"), "mallory created mallory2")
    refused_by_duties(mallory.post(f"/api/v1/approvals/{approval_id}/approve"), "mallory made it")
    # The strict rule: the platform-admin created mallory, so it is not a second person either.
    refused_by_duties(demo.post(f"/api/v1/approvals/{approval_id}/approve"), "admin created mallory")
    inbox = {r["id"]: r["may_decide"] for r in sock.get("/api/v1/governance/approval-inbox").json()["requests"]}
    assert inbox[approval_id] is False  # the inbox does not offer what would be refused
    approved = trent.post(f"/api/v1/approvals/{approval_id}/approve", json={"comment": "ok"})
    assert approved.status_code == 200 and approved.json()["decided_by"] == "trent", approved.text
    assert nominal(demo) == 32
    assert approval_events(demo, approval_id) == [
        ("approval.request", "mallory"),
        ("approval.refused", "mallory2"),
        ("approval.refused", "mallory"),
        ("approval.refused", "admin"),
        ("approval.approve", "trent"),
    ]
    refusal = next(e for e in demo.get("/api/v1/audit", params={"object_id": approval_id}).json() if e["actor"] == "mallory2")
    assert refusal["after"]["rule"] == "vouched" and "mallory created mallory2" in refusal["after"]["message"]


def test_a_user_granted_a_role_or_given_a_token_by_the_requester_cannot_approve(demo: TestClient) -> None:
    apply(demo, NLP_QUOTA, policy(quota_changes=True))
    mallory = create_user(demo, "mallory", ("tenant-admin", "ai-lab"))
    granted = create_user(demo, "gus", ("viewer", "ai-lab"))  # created by the admin
    create_user(demo, "peggy", ("tenant-admin", "ai-lab"))  # created by the admin
    added = mallory.post("/api/v1/users/gus/bindings", json={"bindings": [{"role": "tenant-admin", "tenant": "ai-lab/nlp"}]})
    assert added.status_code == 200, added.text
    approval_id = raise_quota(mallory)
    refused_by_duties(granted.post(f"/api/v1/approvals/{approval_id}/approve"), "mallory granted a role to gus on ai-lab/nlp")
    # A token mallory issued for a peer lets mallory act as that peer: refused too.
    minted = mallory.post("/api/v1/users/peggy/tokens", json={"label": "borrowed"})
    assert minted.status_code == 201, minted.text
    refused_by_duties(as_token(demo, minted.json()["token"]).post(f"/api/v1/approvals/{approval_id}/approve"), "mallory issued a token for peggy")
    assert nominal(demo) == 8


def test_puppets_of_puppets_and_the_creator_of_the_requester_cannot_approve(demo: TestClient) -> None:
    apply(demo, policy(max_devices=1))
    lead = create_user(demo, "lead", ("tenant-admin", "ai-lab"))
    puppet = create_user(lead, "puppet", ("tenant-admin", "ai-lab/nlp"))
    puppet2 = create_user(puppet, "puppet2", ("tenant-admin", "ai-lab/nlp"))
    member = create_user(lead, "newbie", ("member", "ai-lab/nlp"))
    other = create_user(demo, "olga", ("tenant-admin", "ai-lab"))
    task = submit(member, gpu_task("big", gpus=2))
    approval_id = task["approval"]["id"]
    refused_by_duties(lead.post(f"/api/v1/approvals/{approval_id}/approve"), "lead created newbie")
    # Two puppets of one user are no two people: lead controls the requester and the decider.
    refused_by_duties(puppet2.post(f"/api/v1/approvals/{approval_id}/approve"), "lead created newbie; lead created puppet, puppet created puppet2")
    # The lead's own request: its puppets' puppets are no second person.
    held = raise_quota_for(lead, "ai-lab/nlp")
    refused_by_duties(puppet2.post(f"/api/v1/approvals/{held}/approve"), "lead created puppet, puppet created puppet2")
    assert other.post(f"/api/v1/approvals/{approval_id}/approve").status_code == 200
    assert member.get(f"/api/v1/tasks/{task['id']}").json()["state"] == "queued"


def raise_quota_for(client: TestClient, tenant: str) -> str:
    [held] = apply(client, {"kind": "Quota", "name": "lead-q", "tenant": tenant, "limits": [{"resource": "gpu", "nominal": 4}]})
    assert held["action"] == "held for approval", held
    return held["id"]


def test_a_lone_platform_admin_decides_its_own_request_until_there_is_a_second(demo: TestClient) -> None:
    apply(demo, policy(max_devices=1))
    first = submit(demo, gpu_task("one", gpus=2))
    approved = demo.post(f"/api/v1/approvals/{first['approval']['id']}/approve")
    assert approved.status_code == 200, approved.text
    event = [e for e in demo.get("/api/v1/audit", params={"object_id": first["approval"]["id"]}).json() if e["action"] == "approval.approve"]
    assert event[0]["after"]["sole_platform_admin_own_request"] is True
    second_admin = create_user(demo, "root2", ("platform-admin", None))
    second = submit(demo, gpu_task("two", gpus=2))
    refused_by_duties(demo.post(f"/api/v1/approvals/{second['approval']['id']}/approve"), "admin made it")
    # A platform-admin's request: any other platform-admin decides it (admin created root2, which is no link here).
    assert second_admin.post(f"/api/v1/approvals/{second['approval']['id']}/approve").status_code == 200


def test_deleting_or_loosening_a_budget_under_a_governance_policy_waits_for_another_platform_admin(demo: TestClient) -> None:
    apply(demo, GOV, BUDGET)
    root2 = create_user(demo, "root2", ("platform-admin", None))
    trent = create_user(demo, "trent", ("tenant-admin", "ai-lab"))
    response = demo.delete("/api/v1/objects/budgets/lab-month")
    assert response.status_code == 202, response.text
    held = response.json()
    assert demo.get("/api/v1/objects/budgets/lab-month").status_code == 200  # still in force
    refused_by_duties(demo.post(f"/api/v1/approvals/{held['id']}/approve"), "admin made it")
    only_admins = trent.post(f"/api/v1/approvals/{held['id']}/approve")
    assert only_admins.status_code == 403 and "needs platform-admin" in only_admins.json()["message"], only_admins.text
    assert root2.post(f"/api/v1/approvals/{held['id']}/approve").status_code == 200
    assert demo.get("/api/v1/objects/budgets/lab-month").status_code == 404
    deleted = [e["actor"] for e in demo.get("/api/v1/audit", params={"object_id": "lab-month"}).json() if e["action"] == "inventory.delete"]
    assert deleted == ["root2"]
    # Loosening waits; tightening does not.
    apply(demo, BUDGET)  # a new budget only adds a limit
    [raised] = apply(demo, {**BUDGET, "amount": 5000})
    assert raised["action"] == "held for approval"
    [lowered] = apply(demo, {**BUDGET, "amount": 500, "hard_stop": True})
    assert lowered["action"] == "configured"
    [softened] = apply(demo, {**BUDGET, "amount": 500, "hard_stop": False})
    assert softened["action"] == "held for approval"
    assert demo.get("/api/v1/objects/budgets/lab-month").json()["hard_stop"] is True


def test_the_policy_cannot_be_deleted_or_switched_off_past_itself(demo: TestClient) -> None:
    apply(demo, GOV, NLP_QUOTA, BUDGET)
    root2 = create_user(demo, "root2", ("platform-admin", None))
    mallory = create_user(demo, "mallory", ("tenant-admin", "ai-lab"))
    assert mallory.delete("/api/v1/objects/approvalpolicies/gov").status_code == 403  # not a tenant-admin's to touch
    assert mallory.post("/api/v1/apply", json={"documents": [{**GOV, "governance_changes": False}]}).status_code == 403
    held = demo.delete("/api/v1/objects/approvalpolicies/gov")
    assert held.status_code == 202, held.text
    # One batch that switches the rule off and raises a budget: both judged by the rule in force.
    results = apply(demo, {**GOV, "governance_changes": False}, {**BUDGET, "amount": 9000})
    assert [r["action"] for r in results] == ["held for approval", "held for approval"], results
    assert demo.get("/api/v1/objects/approvalpolicies/gov").json()["governance_changes"] is True
    assert demo.get("/api/v1/objects/budgets/lab-month").json()["amount"] == 1000
    [tighter] = apply(demo, {**GOV, "max_devices": 64})  # a rule more is no loosening
    assert tighter["action"] == "configured"
    [named] = apply(demo, {**GOV, "max_devices": 64, "approvers": ["mallory"]})  # one more person who may say yes
    assert named["action"] == "held for approval"
    assert root2.post(f"/api/v1/approvals/{held.json()['id']}/approve").status_code == 200
    assert demo.get("/api/v1/objects/approvalpolicies/gov").status_code == 404


def test_a_batch_cannot_move_a_quota_out_from_under_its_policy(demo: TestClient) -> None:
    cv_quota = {**NLP_QUOTA, "name": "cv-gpus", "tenant": "ai-lab/cv"}
    apply(demo, NLP_QUOTA, cv_quota, {**policy(quota_changes=True), "tenant": "ai-lab/nlp"})
    mallory = create_user(demo, "mallory", ("tenant-admin", "ai-lab"))
    # nlp-gpus re-homed to the unpoliced ai-lab/cv is the nlp quota gone; cv-gpus unchanged rides along.
    results = apply(mallory, cv_quota, {**NLP_QUOTA, "tenant": "ai-lab/cv", "limits": [{"resource": "gpu", "nominal": 0}]})
    assert [(r["name"], r["action"]) for r in results] == [("cv-gpus", "unchanged"), ("nlp-gpus", "held for approval")], results
    assert demo.get("/api/v1/objects/quotas/nlp-gpus").json()["tenant"] == "ai-lab/nlp"
    request = demo.get(f"/api/v1/approvals/{results[1]['id']}").json()
    assert request["tenant"] == "ai-lab" and "ai-lab/nlp" in request["reasons"][0]["message"]


@pytest.fixture
def cli_server(db_kind: str, tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "data", database_url(db_kind, tmp_path))
    srv.start()
    yield srv
    srv.stop()


def _http_user(server: Server, token: str, name: str, role: str, tenant: str | None) -> str:
    auth = {"Authorization": f"Bearer {token}"}
    created = httpx.post(f"{server.url}/api/v1/users", json={"name": name, "bindings": [{"role": role, "tenant": tenant}]}, headers=auth)
    assert created.status_code == 201, created.text
    return httpx.post(f"{server.url}/api/v1/users/{name}/tokens", json={"label": "cli"}, headers=auth).json()["token"]


@pytest.mark.parametrize("db_kind", ["sqlite"])  # the CLI is the same on both databases; the API tests above cover PostgreSQL
def test_the_cli_shows_a_held_delete_and_the_refusal(cli_server: Server, tmp_path: Path) -> None:
    files = tmp_path / "lab.yaml"
    files.write_text(yaml.safe_dump_all([NLP_QUOTA, {**policy(quota_changes=True), "tenant": "ai-lab/nlp"}]))
    assert run_as(cli_server, None, "apply", "-f", str(files)).exit_code == 0
    mallory = _http_user(cli_server, cli_server.token, "mallory", "tenant-admin", "ai-lab")
    sock = _http_user(cli_server, mallory, "mallory2", "tenant-admin", "ai-lab")
    trent = _http_user(cli_server, cli_server.token, "trent", "tenant-admin", "ai-lab")
    deleted = run_as(cli_server, mallory, "delete", "quota", "nlp-gpus")
    assert deleted.exit_code == 0 and "quota/nlp-gpus held for approval (apr-" in deleted.stdout, deleted.stdout + deleted.stderr
    approval_id = deleted.stdout.split("(")[1].split(")")[0]
    listed = run_as(cli_server, trent, "approvals", "list", "--state", "pending").stdout
    assert approval_id in listed and "delete quota/nlp-gpus" in listed and "deleting a quota for ai-lab/nlp" in listed, listed
    refused = run_as(cli_server, sock, "approvals", "approve", approval_id)
    assert refused.exit_code != 0 and "separation of duties" in refused.stderr and "mallory created mallory2" in refused.stderr, refused.stderr
    assert "approved (delete quota/nlp-gpus)" in run_as(cli_server, trent, "approvals", "approve", approval_id, "-m", "ok").stdout
    gone = run_as(cli_server, None, "get", "quotas", "-o", "json")
    assert [q["name"] for q in yaml.safe_load(gone.stdout)] == []


def test_the_upgrade_fills_in_who_created_each_user_and_issued_each_token(db_kind: str, tmp_path: Path) -> None:
    """Migration 20261201_0008b: creators from the user.create / token.create events,
    else from the granter of the user's earliest binding; unknown stays ''."""
    users = sa.table("users", *(sa.column(c) for c in ("id", "name", "role", "created_at")))
    bindings = sa.table("role_bindings", *(sa.column(c) for c in ("user_id", "role", "tenant", "created_at", "created_by")))
    tokens = sa.table("api_tokens", *(sa.column(c) for c in ("id", "user_id", "token_hash", "label", "created_at")))
    events = sa.table("audit_events", *(sa.column(c) for c in ("ts", "actor", "action", "object_kind", "object_id", "prev_hash", "hash")))
    engine = make_engine(database_url(db_kind, tmp_path))
    cfg = alembic_config()
    NO_HASH = {"prev_hash": "", "hash": ""}  # noqa: N806 - the chain is not what this checks
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "20261130_0007a")
        command.upgrade(cfg, "20261130_0007b")
        now = datetime(2026, 11, 30, tzinfo=UTC)
        people = [(1, "admin", "system"), (2, "mallory", "admin"), (3, "mallory2", "mallory"), (4, "oldie", None)]
        for user_id, name, creator in people:
            conn.execute(users.insert().values(id=user_id, name=name, role="tenant-admin", created_at=now))
            conn.execute(bindings.insert().values(user_id=user_id, role="tenant-admin", tenant="ai-lab", created_at=now, created_by="mallory"))
            if creator:
                conn.execute(events.insert().values(ts=now, actor=creator, action="user.create", object_kind="User", object_id=name, **NO_HASH))
        for token_id, user_id in ((5, 3), (6, 4)):
            conn.execute(tokens.insert().values(id=token_id, user_id=user_id, token_hash=f"h{token_id}", label="", created_at=now))
        conn.execute(events.insert().values(ts=now, actor="mallory", action="token.create", object_kind="ApiToken", object_id="5", **NO_HASH))
        command.upgrade(cfg, "20261201_0008b")
        created = dict(conn.execute(sa.text("SELECT name, created_by FROM users")).all())
        issued = dict(conn.execute(sa.text("SELECT id, created_by FROM api_tokens")).all())
    engine.dispose()
    assert created == {"admin": "system", "mallory": "admin", "mallory2": "mallory", "oldie": "mallory"}
    assert issued == {5: "mallory", 6: ""}


def test_approving_a_held_change_that_no_longer_validates_is_a_409_not_a_500(demo: TestClient, ctx: ServiceContext) -> None:
    # A change held before today's limits existed (here: its stored document edited to a
    # nominal beyond the quota limit) must not crash the approval: 409 naming the field.
    apply(demo, NLP_QUOTA, policy(quota_changes=True))
    mallory = create_user(demo, "mallory", ("tenant-admin", "ai-lab"))
    approval_id = raise_quota(mallory)
    with ctx.db.transaction() as session:
        row = session.get(ApprovalRow, approval_id)
        row.document = {**row.document, "limits": [{"resource": "gpu", "nominal": 1e15}]}
    trent = create_user(demo, "trent", ("tenant-admin", "ai-lab"))
    answer = trent.post(f"/api/v1/approvals/{approval_id}/approve", json={"comment": "ok"})
    assert answer.status_code == 409, answer.text
    assert "no longer validates" in answer.json()["message"] and "nominal" in answer.json()["message"]
    assert nominal(demo) == 8
    assert trent.post(f"/api/v1/approvals/{approval_id}/reject", json={"comment": "invalid"}).status_code == 200
