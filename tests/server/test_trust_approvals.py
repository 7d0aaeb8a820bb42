"""Separation of duties in approvals (issue 14, finding 3), through the API as the users
involved: nobody decides a request they made, nor one linked to them by who created whom,
granted whom a role or issued whom a token; deleting or loosening a governed object waits
for approval like changing it does. SQLite and PostgreSQL."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.test_access_api import as_token
from tests.server.test_approvals_api import apply, policy

NLP_QUOTA = {"kind": "Quota", "name": "nlp-gpus", "tenant": "ai-lab/nlp", "limits": [{"resource": "gpu", "nominal": 8}]}


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
    apply(demo, NLP_QUOTA, policy(quota_changes=True))
    mallory = create_user(demo, "mallory", ("tenant-admin", "ai-lab"))
    response = mallory.delete("/api/v1/objects/quotas/nlp-gpus")
    assert response.status_code == 202, response.text
    held = response.json()
    assert held["action"] == "held for approval" and held["id"].startswith("apr-"), held
    assert nominal(demo) == 8  # still in force
    request = demo.get(f"/api/v1/approvals/{held['id']}").json()
    assert request["kind"] == "quota" and request["operation"] == "delete" and request["state"] == "pending"
