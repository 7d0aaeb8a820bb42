"""Tenancy and access through the API, as different users: who sees and does what, users
and tokens, token use and authentication failures in the audit trail, OIDC bearers."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from hetpool.server.deps import FailureLimiter
from hetpool.server.services.auth import UNAUTHORIZED_MESSAGE
from hetpool.server.services.context import ServiceContext
from tests.server.helpers import example_task


def make_user(api: TestClient, name: str, *bindings: tuple[str, str | None], expires_in: str | None = None) -> TestClient:
    """Create `name` with `bindings` as the admin and return a client holding its token."""
    body = {"name": name, "bindings": [{"role": r, "tenant": t} for r, t in bindings]}
    created = api.post("/api/v1/users", json=body)
    assert created.status_code == 201, created.text
    token = api.post(f"/api/v1/users/{name}/tokens", json={"label": "test", **({"expires_in": expires_in} if expires_in else {})})
    assert token.status_code == 201, token.text
    return as_token(api, token.json()["token"])


def as_token(api: TestClient, token: str) -> TestClient:
    return TestClient(api.app, headers={"Authorization": f"Bearer {token}"})


def submitted(client: TestClient, task: dict) -> str:
    response = client.post("/api/v1/tasks", json=task)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def events(api: TestClient, **filters) -> list[dict]:
    return api.get("/api/v1/audit", params=filters).json()


def test_a_member_of_one_team_cannot_list_read_cancel_or_read_logs_of_another_teams_tasks(demo: TestClient) -> None:
    alice = make_user(demo, "alice", ("member", "ai-lab/nlp"))
    bob = make_user(demo, "bob", ("member", "infra"))
    a_task = submitted(alice, example_task("pytorch-ddp-training.yaml"))  # ai-lab/nlp/llm-sft
    b_task = submitted(bob, example_task("data-prep.yaml"))  # infra/data/etl
    assert [t["id"] for t in alice.get("/api/v1/tasks").json()] == [a_task]
    assert alice.get("/api/v1/tasks", params={"tenant": "infra"}).json() == []
    assert {t["id"] for t in demo.get("/api/v1/tasks").json()} == {a_task, b_task}  # the platform-admin sees all
    for method, path in [("GET", ""), ("POST", "/cancel"), ("GET", "/logs")]:
        response = alice.request(method, f"/api/v1/tasks/{b_task}{path}")
        assert response.status_code == 404, (path, response.text)
        assert response.json()["message"] == f"task {b_task!r} not found"  # same as a task that does not exist
    assert alice.get(f"/api/v1/tasks/{a_task}/logs").status_code == 200
    # Submitting or planning outside its subtree is refused, naming the action.
    foreign = example_task("data-prep.yaml")
    for path in ("/api/v1/tasks", "/api/v1/tasks/plan"):
        refused = alice.post(path, json=foreign)
        assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
        assert "task.submit on tenant 'infra/data/etl'" in refused.json()["message"] and "member@ai-lab/nlp" in refused.json()["message"]
    assert alice.post("/api/v1/apply", json={"documents": [{"kind": "Task", **foreign}]}).status_code == 403
    assert alice.post(f"/api/v1/tasks/{a_task}/cancel").json()["state"] == "cancelled"
    assert demo.get(f"/api/v1/tasks/{b_task}").json()["state"] == "queued"


def test_a_viewer_reads_tasks_but_cannot_submit_cancel_or_read_logs(demo: TestClient) -> None:
    bob = make_user(demo, "bob", ("member", "infra"))
    carol = make_user(demo, "carol", ("viewer", "infra/data"))
    task_id = submitted(bob, example_task("data-prep.yaml"))
    assert [t["id"] for t in carol.get("/api/v1/tasks").json()] == [task_id]
    assert carol.get(f"/api/v1/tasks/{task_id}").json()["tenant"] == "infra/data/etl"
    refused = carol.post("/api/v1/tasks", json=example_task("data-prep.yaml"))
    assert refused.status_code == 403 and "task.submit" in refused.json()["message"] and "viewer@infra/data" in refused.json()["message"]
    for method, path, action in [("POST", "/cancel", "task.cancel"), ("GET", "/logs", "task.logs")]:
        response = carol.request(method, f"/api/v1/tasks/{task_id}{path}")
        assert response.status_code == 403 and action in response.json()["message"], response.text
    assert carol.get("/api/v1/objects/pools").status_code == 200  # inventory is readable
    assert carol.get("/api/v1/audit").status_code == 403


def test_an_auditor_reads_the_trail_and_nothing_else(demo: TestClient) -> None:
    bob = make_user(demo, "bob", ("member", "infra"))
    dave = make_user(demo, "dave", ("auditor", None))
    task_id = submitted(bob, example_task("data-prep.yaml"))
    trail = dave.get("/api/v1/audit", params={"object_id": task_id})
    assert trail.status_code == 200 and [e["action"] for e in trail.json()] == ["task.submit"]
    assert dave.get("/api/v1/audit/verify").json()["ok"] is True
    assert dave.get("/api/v1/tasks").status_code == 403
    assert dave.get(f"/api/v1/tasks/{task_id}").status_code == 404
    assert dave.post("/api/v1/tasks", json=example_task("data-prep.yaml")).status_code == 403
    for path in ("/api/v1/objects/pools", "/api/v1/nodes/status", "/api/v1/connectors", "/api/v1/sim/history", "/api/v1/users"):
        assert dave.get(path).status_code == 403, path
    assert dave.get("/api/v1/whoami").json()["actions"] == {"audit.read": "*"}
    assert bob.get("/api/v1/audit").status_code == 403


def test_inventory_writes_need_a_platform_admin_but_tenant_admins_may_set_quotas_in_their_subtree(demo: TestClient) -> None:
    lead = make_user(demo, "lead", ("tenant-admin", "ai-lab"))
    agent = make_user(demo, "agent-1", ("agent", None))
    pool = demo.get("/api/v1/objects/pools").json()[0]
    assert lead.post("/api/v1/apply", json={"documents": [{"kind": "Pool", **pool}]}).status_code == 403
    assert lead.delete(f"/api/v1/objects/pools/{pool['name']}").status_code == 403
    assert lead.post("/api/v1/clusters/bj-train/sync").status_code == 403
    quota = {"kind": "Quota", "name": "nlp-gpus", "tenant": "ai-lab/nlp", "limits": [{"resource": "gpu", "nominal": 16}]}
    assert lead.post("/api/v1/apply", json={"documents": [quota]}).status_code == 200
    outside = {**quota, "name": "etl-gpus", "tenant": "infra/data"}
    refused = lead.post("/api/v1/apply", json={"documents": [outside]})
    assert refused.status_code == 403 and "quota.write on tenant 'infra/data'" in refused.json()["message"]
    assert demo.post("/api/v1/apply", json={"documents": [outside]}).status_code == 200
    moved = {**outside, "tenant": "ai-lab/cv"}  # taking over another subtree's quota by name
    # Another subtree's quota is invisible (test_trust_visibility.py): its name is taken, and deleting it is 404.
    assert lead.post("/api/v1/apply", json={"documents": [moved]}).status_code == 409
    assert lead.delete("/api/v1/objects/quotas/etl-gpus").status_code == 404
    assert lead.delete("/api/v1/objects/quotas/nlp-gpus").status_code == 204
    # An agent token reports its node and can do nothing else.
    assert agent.get("/api/v1/objects/pools").status_code == 403 and agent.get("/api/v1/tasks").status_code == 403
    assert lead.post("/api/v1/agent/heartbeat", json={"node": "gpu-a1"}).status_code == 403
    assert agent.post("/api/v1/agent/heartbeat", json={"node": "no-such-node"}).status_code != 403


def test_users_and_bindings_are_managed_within_the_admins_subtree(demo: TestClient) -> None:
    lead = make_user(demo, "lead", ("tenant-admin", "ai-lab"))
    make_user(demo, "bob", ("member", "infra"))
    created = lead.post("/api/v1/users", json={"name": "erin", "bindings": [{"role": "member", "tenant": "ai-lab/cv"}]})
    assert created.status_code == 201 and created.json()["bindings"] == [{"role": "member", "tenant": "ai-lab/cv"}]
    for binding, status in [({"role": "member", "tenant": "infra"}, 403), ({"role": "auditor"}, 403), ({"role": "owner", "tenant": "ai-lab"}, 422)]:
        response = lead.post("/api/v1/users", json={"name": "frank", "bindings": [binding]})
        assert response.status_code == status, (binding, response.text)
    unknown_role = lead.post("/api/v1/users", json={"name": "frank", "bindings": [{"role": "owner", "tenant": "ai-lab"}]}).json()
    assert unknown_role["message"].startswith("bindings[0].role: unknown role 'owner'; roles: platform-admin, tenant-admin, member")
    unknown_tenant = demo.post("/api/v1/users", json={"name": "frank", "bindings": [{"role": "member", "tenant": "ai-lab/nope"}]})
    assert unknown_tenant.status_code == 422 and "unknown tenant 'ai-lab/nope'" in unknown_tenant.json()["message"]
    # A tenant-admin sees the users it administers, and adds its team to someone else's user.
    assert {u["name"] for u in lead.get("/api/v1/users").json()} == {"lead", "erin"}
    assert lead.get("/api/v1/users/bob").status_code == 404
    added = lead.post("/api/v1/users/bob/bindings", json={"bindings": [{"role": "viewer", "tenant": "ai-lab/nlp"}]})
    assert added.json()["bindings"] == [{"role": "viewer", "tenant": "ai-lab/nlp"}]  # bob's infra binding is not its business
    assert {(b["role"], b["tenant"]) for b in demo.get("/api/v1/users/bob").json()["bindings"]} == {("member", "infra"), ("viewer", "ai-lab/nlp")}
    assert lead.post("/api/v1/users/bob/tokens", json={}).status_code == 403  # bob holds more than lead grants
    assert lead.delete("/api/v1/users/bob").status_code == 403
    put = lead.put("/api/v1/users/erin/bindings", json={"bindings": [{"role": "viewer", "tenant": "ai-lab/cv"}]})
    assert put.json()["bindings"] == [{"role": "viewer", "tenant": "ai-lab/cv"}]
    # The last platform-admin cannot lose that role; members manage nobody.
    assert demo.delete("/api/v1/users/admin/bindings", params={"role": "platform-admin"}).status_code == 409
    assert demo.delete("/api/v1/users/bob/bindings", params={"role": "owner"}).status_code == 422
    erin = as_token(demo, lead.post("/api/v1/users/erin/tokens", json={"label": "laptop"}).json()["token"])
    assert erin.get("/api/v1/users").status_code == 403
    assert lead.delete("/api/v1/users/erin").status_code == 204
    assert erin.get("/api/v1/whoami").status_code == 401
    actions = [e["action"] for e in events(demo, object_kind="User")]
    assert actions.count("user.create") == 4 and "user.bindings" in actions and "user.delete" in actions


def test_tokens_expire_are_revoked_and_their_use_and_every_auth_failure_is_audited(ctx: ServiceContext, demo: TestClient) -> None:
    alice = make_user(demo, "alice", ("member", "ai-lab/nlp"), expires_in="2h")
    for _ in range(3):
        assert alice.get("/api/v1/whoami").json()["name"] == "alice"
    [token] = alice.get("/api/v1/tokens").json()
    assert token["state"] == "active" and token["last_used_at"] and "token" not in token and token["label"] == "test"
    second = alice.post("/api/v1/tokens", json={"label": "ci", "expires_in": "30d"}).json()
    assert second["token"].startswith("hp_") and second["user"] == "alice"
    uses = events(demo, action="token.use", actor="alice")
    assert len(uses) == 1 and uses[0]["object_id"] == str(token["id"])  # once per hour, not per request
    ctx.clock.advance(3700)
    assert alice.get("/api/v1/whoami").status_code == 200
    assert len(events(demo, action="token.use", actor="alice")) == 2
    ctx.clock.advance(3700)  # past the 2h lifetime
    expired = alice.get("/api/v1/whoami")
    assert expired.status_code == 401 and "expired" in expired.json()["message"]
    ci = as_token(demo, second["token"])
    assert ci.delete(f"/api/v1/tokens/{second['id']}").json()["state"] == "revoked"
    assert ci.get("/api/v1/whoami").status_code == 401
    assert demo.get("/api/v1/tasks", headers={"Authorization": "Bearer hp_not-a-real-token"}).status_code == 401
    assert TestClient(demo.app).get("/api/v1/tasks").status_code == 401
    failures = events(demo, action="auth.failure")
    assert [e["after"]["reason"] for e in failures] == ["expired", "revoked", "invalid", "missing"]
    assert all(e["actor"] == "anonymous" for e in failures)
    assert "hp_" not in json.dumps(failures) and second["token"] not in json.dumps(demo.get("/api/v1/audit").json())
    assert failures[0]["after"]["token_id"] == token["id"]
    with ctx.db.transaction() as session:  # at rest only the SHA-256 of the secret
        stored = session.execute(text("SELECT token_hash FROM api_tokens WHERE id = :i"), {"i": second["id"]}).scalar_one()
    assert stored == hashlib.sha256(second["token"].encode()).hexdigest()
    # Others' tokens are neither listed nor revocable by a member.
    bob = make_user(demo, "bob", ("member", "infra"))
    assert bob.delete(f"/api/v1/tokens/{token['id']}").status_code == 404
    assert bob.get("/api/v1/users/alice/tokens").status_code == 404
    assert bob.post("/api/v1/tokens", json={"expires_in": "soon"}).status_code == 422


def test_a_flood_of_auth_failures_is_summarised_not_recorded_one_by_one() -> None:
    limiter = FailureLimiter(burst=2, window_s=0.05)
    key = ("10.0.0.9", "invalid")
    assert [limiter.admit(key) for _ in range(5)] == [0, 0, None, None, None]
    assert limiter.admit(("10.0.0.8", "invalid")) == 0  # per source
    time.sleep(0.06)
    assert limiter.admit(key) == 3  # the next window's first event carries the suppressed count


def test_whoami_shows_bindings_and_where_each_action_is_allowed(demo: TestClient) -> None:
    alice = make_user(demo, "alice", ("member", "ai-lab/nlp"), ("viewer", "infra"))
    me = alice.get("/api/v1/whoami").json()
    assert me["name"] == "alice" and me["role"] == "member" and me["via"] == "token"
    assert me["bindings"] == [{"role": "member", "tenant": "ai-lab/nlp"}, {"role": "viewer", "tenant": "infra"}]
    assert me["actions"]["task.read"] == ["ai-lab/nlp", "infra"] and me["actions"]["task.submit"] == ["ai-lab/nlp"]
    assert "inventory.write" not in me["actions"] and me["token"]["label"] == "test"
    assert demo.get("/api/v1/whoami").json()["actions"]["inventory.write"] == "*"


# ---------------------------------------------------------------------------------- OIDC
@pytest.fixture
def oidc(ctx: ServiceContext, tmp_path: Path):
    jwt = pytest.importorskip("jwt")
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    ctx.settings.oidc_issuer = "https://idp.example.com/realms/lab"
    ctx.settings.oidc_audience = "hetpool"
    ctx.settings.oidc_jwks = str(jwks)

    def sign(user: str, *, aud: str = "hetpool", exp_in: float = 300, signer=key) -> str:
        claims = {"iss": ctx.settings.oidc_issuer, "aud": aud, "exp": int(time.time() + exp_in), "preferred_username": user, "sub": f"id-{user}"}
        return jwt.encode(claims, signer, algorithm="RS256", headers={"kid": "k1"})

    sign.other_key = other
    return sign


def test_oidc_bearers_are_checked_against_the_jwks_and_must_name_a_hetpool_user(demo: TestClient, oidc) -> None:
    make_user(demo, "alice", ("member", "ai-lab/nlp"))
    alice = as_token(demo, oidc("alice"))
    me = alice.get("/api/v1/whoami").json()
    assert me["name"] == "alice" and me["via"] == "oidc" and me["bindings"] == [{"role": "member", "tenant": "ai-lab/nlp"}]
    assert alice.get("/api/v1/objects/pools").status_code == 200 and alice.get("/api/v1/audit").status_code == 403
    cases = [
        (oidc("alice", exp_in=-120), "expired"),
        (oidc("alice", aud="another-app"), "audience"),
        (oidc("alice", signer=oidc.other_key), "signature"),
        (oidc("mallory"), "no hetpool account"),
    ]
    for token, _expected in cases:
        response = as_token(demo, token).get("/api/v1/whoami")
        assert response.status_code == 401 and response.json()["message"] == UNAUTHORIZED_MESSAGE, response.text
    # The caller learns nothing about why (one 401 text); the audit trail tells the operator.
    failures = events(demo, action="auth.failure")
    assert [e["after"]["reason"] for e in failures] == ["expired", "invalid", "invalid", "unknown_user"]
    assert all(expected in e["after"]["detail"].lower() for e, (_t, expected) in zip(failures, cases, strict=True)), failures
    assert [e["object_kind"] for e in events(demo, action="token.use", actor="alice")][-1] == "OidcToken"


def test_jwts_are_refused_when_oidc_is_off(demo: TestClient) -> None:
    response = demo.get("/api/v1/whoami", headers={"Authorization": "Bearer aaa.bbb.ccc"})
    assert response.status_code == 401 and response.json()["message"] == UNAUTHORIZED_MESSAGE
    assert "OIDC is not configured" in events(demo, action="auth.failure")[-1]["after"]["detail"]
