"""Issue 14, finding 5 (cross-tenant leaks), through the API on SQLite and PostgreSQL:
another tenant's governance objects are invisible (404, never in a list), errors about
users and bindings name no role outside the caller's scope, user names are unique
ignoring case (in the API and in the database), and every bad token gets one 401."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from hetpool.server.db.session import alembic_config, make_engine, migrate
from hetpool.server.services.context import ServiceContext
from tests.conftest import database_url
from tests.server.helpers import drive_until, example_task, task_state
from tests.server.test_access_api import as_token, events, make_user
from tests.server.test_quota_api import ESTATE, pending, submit

A, B = "ai-lab/nlp", "infra"

# Objects carrying a tenant: of tenant A, of A's parent (it governs A's tasks too), of a
# sibling of A, and one without a tenant (it applies to everyone).
OF_A = [
    {"kind": "Quota", "name": "nlp-quota", "tenant": A, "limits": [{"resource": "gpu", "nominal": 64}]},
    {"kind": "Budget", "name": "nlp-budget", "tenant": A, "amount": 50000},
    {"kind": "ApprovalPolicy", "name": "nlp-policy", "tenant": A, "max_devices": 64},
    {"kind": "ReclaimPolicy", "name": "nlp-reclaim", "tenant": A, "idle_for": "2h"},
]
OF_PARENT = [
    {"kind": "Quota", "name": "lab-quota", "tenant": "ai-lab", "limits": [{"resource": "gpu", "nominal": 128}]},
    {"kind": "Budget", "name": "lab-budget", "tenant": "ai-lab", "amount": 90000},
]
OF_SIBLING = [
    {"kind": "Quota", "name": "cv-quota", "tenant": "ai-lab/cv", "limits": [{"resource": "gpu", "nominal": 32}]},
    {"kind": "ApprovalPolicy", "name": "cv-policy", "tenant": "ai-lab/cv", "max_devices": 8},
]
GLOBAL = [{"kind": "ApprovalPolicy", "name": "everyone-policy", "max_devices": 512}]
LIST_URL = {"Quota": "quotas", "Budget": "budgets", "ApprovalPolicy": "approvalpolicies", "ReclaimPolicy": "reclaimpolicies", "Tenant": "tenants"}


def _names(client: TestClient, kind: str) -> set[str]:
    response = client.get(f"/api/v1/objects/{LIST_URL[kind]}")
    assert response.status_code == 200, response.text
    return {o["name"] for o in response.json()}


def test_another_tenants_quotas_budgets_policies_and_tenants_are_invisible(demo: TestClient) -> None:
    applied = demo.post("/api/v1/apply", json={"documents": OF_A + OF_PARENT + OF_SIBLING + GLOBAL})
    assert applied.status_code == 200, applied.text
    own = {role: make_user(demo, f"a-{role}", (role, A)) for role in ("member", "viewer", "tenant-admin")}
    foreign = {role: make_user(demo, f"b-{role}", (role, B)) for role in ("member", "viewer", "tenant-admin")}
    hidden_from_b = OF_A + OF_PARENT + OF_SIBLING + [{"kind": "Tenant", "name": t} for t in ("ai-lab", A, "ai-lab/cv")]
    for role, client in foreign.items():
        for obj in hidden_from_b:
            url = f"/api/v1/objects/{LIST_URL[obj['kind']]}/{obj['name']}"
            got = client.get(url)
            # The same answer as for a name that does not exist: existence is not revealed.
            assert got.status_code == 404, (role, url, got.text)
            assert got.json()["message"] == f"{obj['kind']} {obj['name']!r} not found", got.text
            assert obj["name"] not in _names(client, obj["kind"]), (role, obj)
        assert _names(client, "ApprovalPolicy") == {"everyone-policy"}
        assert _names(client, "Tenant") == {"infra", "infra/data", "infra/data/etl"}
    for role, client in own.items():
        # Its own subtree, the ancestors whose rules govern it, global rules; never a sibling's.
        assert _names(client, "Quota") == {"nlp-quota", "lab-quota"}, role
        assert _names(client, "Budget") == {"nlp-budget", "lab-budget"}, role
        assert _names(client, "ApprovalPolicy") == {"nlp-policy", "everyone-policy"}, role
        assert _names(client, "ReclaimPolicy") == {"nlp-reclaim"}, role
        assert _names(client, "Tenant") == {"ai-lab", A, f"{A}/llm-sft", f"{A}/llm-serving"}, role
        for obj in OF_A + OF_PARENT:
            assert client.get(f"/api/v1/objects/{LIST_URL[obj['kind']]}/{obj['name']}").status_code == 200, (role, obj)
        for obj in OF_SIBLING:
            assert client.get(f"/api/v1/objects/{LIST_URL[obj['kind']]}/{obj['name']}").status_code == 404, (role, obj)
    assert {"nlp-quota", "lab-quota", "cv-quota"} <= _names(demo, "Quota")  # the platform-admin sees everything


def test_another_tenants_quota_cannot_be_probed_by_writing_to_it(demo: TestClient) -> None:
    assert demo.post("/api/v1/apply", json={"documents": OF_A}).status_code == 200
    fadmin = make_user(demo, "b-admin", ("tenant-admin", B))
    deleted = fadmin.delete("/api/v1/objects/quotas/nlp-quota")
    missing = fadmin.delete("/api/v1/objects/quotas/no-such-quota")
    assert deleted.status_code == missing.status_code == 404, deleted.text
    assert deleted.json()["message"] == "Quota 'nlp-quota' not found"
    # Applying over another tenant's quota name: refused without saying whose it is.
    taken = fadmin.post("/api/v1/apply", json={"documents": [{**OF_A[0], "tenant": B}]})
    assert taken.status_code in (403, 409) and A not in taken.text and "ai-lab" not in taken.text, taken.text
    assert demo.get("/api/v1/objects/quotas/nlp-quota").json()["tenant"] == A


def test_a_typo_in_a_tenant_offers_only_tenants_of_the_callers_own_tree(demo: TestClient) -> None:
    lead = make_user(demo, "lead", ("tenant-admin", A))
    task = {**example_task("data-prep.yaml"), "tenant": f"{A}/typo"}
    for path in ("/api/v1/tasks/plan", "/api/v1/tasks"):
        refused = lead.post(path, json=task)
        assert refused.status_code == 422 and f"unknown tenant '{A}/typo'" in refused.json()["message"], refused.text
        assert f"{A}/llm-sft" in refused.text and B not in refused.text and "ai-lab/cv" not in refused.text, refused.text
    granted = lead.post("/api/v1/users", json={"name": "newbie", "bindings": [{"role": "viewer", "tenant": f"{A}/typo"}]})
    assert granted.status_code == 422 and f"{A}/llm-sft" in granted.text and B not in granted.text, granted.text


def test_binding_errors_never_name_roles_outside_the_callers_scope(demo: TestClient) -> None:
    lead = make_user(demo, "lead", ("tenant-admin", A))
    created = demo.post("/api/v1/users", json={"name": "carol", "bindings": [{"role": "member", "tenant": A}, {"role": "tenant-admin", "tenant": B}]})
    assert created.status_code == 201, created.text
    assert demo.post("/api/v1/users", json={"name": "dave", "bindings": [{"role": "member", "tenant": B}]}).status_code == 201
    assert demo.post("/api/v1/users", json={"name": "root2", "bindings": [{"role": "platform-admin"}]}).status_code == 201
    answers = {
        "remove a binding carol lacks": lead.delete("/api/v1/users/carol/bindings", params={"role": "viewer", "tenant": A}),
        "delete carol": lead.delete("/api/v1/users/carol"),
        "tokens of carol": lead.post("/api/v1/users/carol/tokens", json={}),
        "remove from dave": lead.delete("/api/v1/users/dave/bindings", params={"role": "viewer", "tenant": A}),
        "add to carol": lead.post("/api/v1/users/carol/bindings", json={"bindings": [{"role": "viewer", "tenant": "ai-lab/nlp/llm-sft"}]}),
        "add to root2": lead.post("/api/v1/users/root2/bindings", json={"bindings": [{"role": "viewer", "tenant": A}]}),
        "put on root2": lead.put("/api/v1/users/root2/bindings", json={"bindings": [{"role": "member", "tenant": A}]}),
        "read carol": lead.get("/api/v1/users/carol"),
        "list users": lead.get("/api/v1/users"),
        "create carol again": lead.post("/api/v1/users", json={"name": "carol", "bindings": [{"role": "viewer", "tenant": A}]}),
        "grant a typo tenant": lead.post("/api/v1/users/carol/bindings", json={"bindings": [{"role": "viewer", "tenant": "ai-lab/nlp/nope"}]}),
    }
    for what, response in answers.items():
        assert response.status_code < 500, (what, response.text)
        # Nothing of tenant B, and no global role held by someone else, in any answer.
        for secret in (B, "platform-admin"):
            assert secret not in response.text, (what, response.status_code, response.text)
    assert answers["remove from dave"].status_code == 404  # dave holds nothing the lead may see
    assert answers["remove a binding carol lacks"].status_code == 404
    assert answers["delete carol"].status_code == answers["tokens of carol"].status_code == 403
    carol = answers["read carol"].json()
    assert carol["role"] == "member" and carol["bindings"] == [{"role": "member", "tenant": A}, {"role": "viewer", "tenant": "ai-lab/nlp/llm-sft"}]
    assert answers["add to root2"].json()["role"] == "viewer"  # the summary role counts only what the lead sees
    assert answers["create carol again"].status_code == 409


@pytest.mark.parametrize(
    "name",
    ["Admin", "ADMIN", "aDmIn"],
)
def test_user_names_differing_only_in_case_are_refused(demo: TestClient, name: str) -> None:
    response = demo.post("/api/v1/users", json={"name": name, "bindings": [{"role": "viewer", "tenant": A}]})
    assert response.status_code == 409, response.text
    assert "'admin'" in response.json()["message"]  # names the user it collides with
    assert [u["name"] for u in demo.get("/api/v1/users").json()] == ["admin"]


@pytest.mark.parametrize("name", ["alice\n", "al ice", "-alice", "a" * 65, "alïce", "a/b", ""])
def test_user_names_are_validated_with_a_422_naming_the_rule(demo: TestClient, name: str) -> None:
    response = demo.post("/api/v1/users", json={"name": name, "bindings": [{"role": "viewer", "tenant": A}]})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["details"][0]["loc"] == "name" and "1-64 ASCII letters" in body["details"][0]["msg"], body


def test_the_database_refuses_names_differing_only_in_case(ctx: ServiceContext, demo: TestClient) -> None:
    with pytest.raises(IntegrityError), ctx.db.transaction() as session:
        session.execute(text("INSERT INTO users (name, role, created_at) VALUES ('ADMIN', 'viewer', CURRENT_TIMESTAMP)"))


def test_the_upgrade_stops_and_lists_existing_names_differing_only_in_case(db_kind: str, tmp_path) -> None:
    from alembic import command

    from hetpool.core.errors import ConflictError

    engine = make_engine(database_url(db_kind, tmp_path))
    cfg = alembic_config()
    with engine.begin() as connection:  # the schema as it was before the index
        cfg.attributes["connection"] = connection
        for head in ("20261130_0007a", "20261130_0007b"):
            command.upgrade(cfg, head)
    names = ["alice", "Bob", "bob", "BOB", "carol", "Carol"]
    with engine.begin() as connection:
        for name in names:
            connection.execute(text("INSERT INTO users (name, role, created_at) VALUES (:n, 'viewer', CURRENT_TIMESTAMP)"), {"n": name})
    with pytest.raises(ConflictError) as refused:
        migrate(engine)
    message = refused.value.message
    assert "'BOB', 'Bob', 'bob'" in message and "'Carol', 'carol'" in message and "alice" not in message, message
    from typer.testing import CliRunner

    from hetpool.cli.main import app

    cli = CliRunner().invoke(
        app, ["db", "upgrade", "--database-url", str(engine.url.render_as_string(hide_password=False))], env={"HETPOOL_CONFIG": ""}
    )
    assert cli.exit_code == 2 and "'BOB', 'Bob', 'bob'" in cli.output and "Traceback" not in cli.output, cli.output
    with engine.connect() as connection:  # nobody was dropped or renamed
        assert sorted(connection.execute(text("SELECT name FROM users")).scalars()) == sorted(names)
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM users WHERE name IN ('Bob', 'BOB', 'Carol')"))
    migrate(engine)
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(text("INSERT INTO users (name, role, created_at) VALUES ('ALICE', 'viewer', CURRENT_TIMESTAMP)"))
    engine.dispose()


def test_every_bad_token_gets_the_same_401_and_the_audit_keeps_the_reason(ctx: ServiceContext, demo: TestClient) -> None:
    alice = make_user(demo, "alice", ("member", A), expires_in="2h")
    revoked = demo.post("/api/v1/users/alice/tokens", json={"label": "r"}).json()
    assert demo.delete(f"/api/v1/tokens/{revoked['id']}").status_code == 200
    gone = make_user(demo, "gone", ("member", A))
    assert demo.delete("/api/v1/users/gone").status_code == 204
    ctx.clock.advance(3 * 3600)  # alice's first token has expired
    bearers = {
        "expired": alice.headers["Authorization"],
        "revoked": f"Bearer {revoked['token']}",
        "user deleted": gone.headers["Authorization"],
        "unknown": "Bearer hp_" + "x" * 43,
        "malformed": "Bearer not a token at all",
        "jwt, oidc off": "Bearer aaa.bbb.ccc",
        "missing": "",
    }
    answers = {}
    for what, header in bearers.items():
        headers = {"X-Request-ID": "same"} | ({"Authorization": header} if header else {})
        response = TestClient(demo.app).get("/api/v1/tasks", headers=headers)
        answers[what] = (response.status_code, response.text, sorted(response.headers.items()))
    reference = answers["unknown"]
    assert reference[0] == 401
    for what, answer in answers.items():
        assert answer == reference, f"{what}: {answer} differs from an unknown token's {reference}"
    reasons = [e["after"]["reason"] for e in events(demo, action="auth.failure")]
    assert reasons == ["expired", "revoked", "invalid", "invalid", "invalid", "invalid", "missing"]
    assert as_token(demo, revoked["token"]).get("/api/v1/whoami").status_code == 401


def test_a_preempted_or_waiting_task_is_not_told_another_tenants_task_ids(ctx: ServiceContext, api: TestClient) -> None:
    assert api.post("/api/v1/apply", json={"documents": ESTATE}).status_code == 200
    b_member, a_member = make_user(api, "b-dev", ("member", "org/b")), make_user(api, "a-dev", ("member", "org/a"))
    # org/b borrows org/a's idle quota; org/a takes it back by preempting org/b's task.
    borrower = submit(api, "org/b", 6, "b-big", priority="high")
    drive_until(ctx, lambda: task_state(api, borrower) == "running")
    lender = submit(api, "org/a", 4, "a-needs-its-quota", priority="low", command="sleep 60")
    drive_until(ctx, lambda: task_state(api, lender) == "running", timeout_s=30)
    seen_by_b = b_member.get(f"/api/v1/tasks/{borrower}")
    assert any(e["action"] == "task.preempted" for e in seen_by_b.json()["events"]), seen_by_b.text
    assert "quota reclaimed by another tenant" in seen_by_b.text
    assert lender not in seen_by_b.text and "org/a" not in seen_by_b.text, seen_by_b.text
    for task_id in (borrower, lender):
        api.post(f"/api/v1/tasks/{task_id}/cancel")
    drive_until(ctx, lambda: {task_state(api, borrower), task_state(api, lender)} == {"cancelled"}, timeout_s=30)
    # org/a would have to borrow from org/b, whose task runs within its own quota: told so, without its id.
    b_own = submit(api, "org/b", 4, "b-own")
    a_own = submit(api, "org/a", 4, "a-own", priority="high")
    drive_until(ctx, lambda: task_state(api, b_own) == task_state(api, a_own) == "running", timeout_s=30)
    a_over = submit(api, "org/a", 2, "a-over", priority="high")
    drive_until(ctx, lambda: "would have to borrow" in pending(api, a_over))
    seen_by_a = a_member.get(f"/api/v1/tasks/{a_over}")
    assert "1 task(s) of other tenants" in seen_by_a.text and b_own not in seen_by_a.text, seen_by_a.text
    for task_id in (b_own, a_own, a_over):
        api.post(f"/api/v1/tasks/{task_id}/cancel")
