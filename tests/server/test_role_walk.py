"""Walk every /api/v1 endpoint of the OpenAPI document as every role and as users of
another tenant, and check each answer against the table below (docs/governance.md,
docs/access.md, docs/operations-security.md). An endpoint missing from the table fails
the test: whoever adds an endpoint decides here who may call it.

Tenant A is ai-lab/nlp, tenant B is infra. Path parameters are real objects: a task of
tenant A waiting for approval, its approval request, a user of tenant A (one per caller,
so deleting it as one role does not change the answer for the next), its token.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from hetpool.governance.access import TENANT_FIELD_OF_KIND
from tests.server.helpers import example_task

TENANT_A, TENANT_B = "ai-lab/nlp", "infra"

# Columns: no token, then the callers. "ok" is any 2xx; anything else is the exact status.
CALLERS = ("anon", "padmin", "tadmin", "member", "viewer", "auditor", "agent", "fmember", "fadmin")
BINDINGS = {
    "tadmin": ("tenant-admin", TENANT_A),
    "member": ("member", TENANT_A),
    "viewer": ("viewer", TENANT_A),
    "auditor": ("auditor", None),
    "agent": ("agent", None),
    "fmember": ("member", TENANT_B),
    "fadmin": ("tenant-admin", TENANT_B),
}
FOREIGN = ("fmember", "fadmin")

# endpoint → expected answer per caller, in CALLERS order. Callers run right to left of
# the privilege order (denied ones first), so a write allowed to several roles may answer
# the later ones 409 (already cancelled / decided). 404 rather than 403 where the caller
# may not even read the object (another tenant's task, a user it does not administer, an
# approval it neither submitted nor may decide): its existence is not revealed. Lists
# (tasks, approvals, quota usage) answer 2xx filtered to the caller's subtrees; the test
# checks that a foreign caller's 2xx never shows tenant A's task or approval. 422s are
# valid requests refused for their content (a local cluster has no connector; no
# finished tasks to replay) after the access check passed.
#                                                    anon padmin tadmin member viewer auditor agent fmember fadmin
TABLE: dict[str, str] = {
    "POST /api/v1/apply": "401 ok 403 403 403 403 403 403 403",
    "GET /api/v1/objects/{kind}": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/objects/{kind}/{name}": "401 ok ok ok ok 403 403 ok ok",
    "DELETE /api/v1/objects/{kind}/{name}": "401 ok 403 403 403 403 403 403 403",
    "GET /api/v1/pools/{name}/profile": "401 ok ok ok ok 403 403 ok ok",
    "POST /api/v1/tasks/plan": "401 ok ok ok 403 403 403 403 403",
    "POST /api/v1/tasks/recommend": "401 ok ok ok 403 403 403 403 403",
    "POST /api/v1/tasks": "401 ok ok ok 403 403 403 403 403",
    "GET /api/v1/tasks": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/tasks/{task_id}": "401 ok ok ok ok 404 404 404 404",
    "POST /api/v1/tasks/{task_id}/cancel": "401 409 409 ok 403 404 404 404 404",
    "GET /api/v1/tasks/{task_id}/logs": "401 ok ok ok 403 404 404 404 404",
    "GET /api/v1/audit": "401 ok 403 403 403 ok 403 403 403",
    "GET /api/v1/audit/export": "401 ok 403 403 403 ok 403 403 403",
    "GET /api/v1/audit/verify": "401 ok 403 403 403 ok 403 403 403",
    "POST /api/v1/audit/checkpoints": "401 ok 403 403 403 ok 403 403 403",
    "POST /api/v1/catalog/compat-check": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/catalog/open-models": "401 ok ok ok ok 403 403 ok ok",
    "POST /api/v1/compat/check": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/compat/matrix": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/compat/rows": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/sim/history": "401 ok ok ok ok 403 403 ok ok",
    "POST /api/v1/agent/register": "401 422 403 403 403 403 422 403 403",
    "POST /api/v1/agent/heartbeat": "401 404 403 403 403 403 404 403 403",
    "GET /api/v1/nodes/status": "401 ok ok ok ok 403 403 ok ok",
    "POST /api/v1/clusters/{name}/sync": "401 422 403 403 403 403 403 403 403",
    "GET /api/v1/clusters/{name}/sync": "401 404 404 404 404 403 403 404 404",
    "GET /api/v1/connectors": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/whoami": "401 ok ok ok ok ok ok ok ok",
    "PUT /api/v1/whoami/preferences": "401 ok ok ok ok ok ok ok ok",
    "GET /api/v1/roles": "401 ok ok ok ok ok ok ok ok",
    "GET /api/v1/users": "401 ok ok 403 403 403 403 403 ok",
    "POST /api/v1/users": "401 ok ok 403 403 403 403 403 403",
    "GET /api/v1/users/{name}": "401 ok ok 404 404 404 404 404 404",
    "DELETE /api/v1/users/{name}": "401 ok ok 404 404 404 404 404 404",
    "PUT /api/v1/users/{name}/bindings": "401 ok ok 403 403 403 403 403 403",
    "POST /api/v1/users/{name}/bindings": "401 ok ok 403 403 403 403 403 403",
    "DELETE /api/v1/users/{name}/bindings": "401 ok ok 403 403 403 403 403 403",
    "POST /api/v1/users/{name}/tokens": "401 ok ok 404 404 404 404 404 404",
    "GET /api/v1/users/{name}/tokens": "401 ok ok 404 404 404 404 404 404",
    "GET /api/v1/tokens": "401 ok ok ok ok ok ok ok ok",
    "POST /api/v1/tokens": "401 ok ok ok ok ok ok ok ok",
    "DELETE /api/v1/tokens/{token_id}": "401 ok ok 404 404 404 404 404 404",
    "GET /api/v1/approvals": "401 ok ok ok ok ok ok ok ok",
    "GET /api/v1/approvals/{approval_id}": "401 ok ok ok 404 404 404 404 404",
    "POST /api/v1/approvals/{approval_id}/approve": "401 409 ok 403 404 404 404 404 404",
    "POST /api/v1/approvals/{approval_id}/reject": "401 409 409 403 404 404 404 404 404",
    "GET /api/v1/cost/report": "401 ok ok ok 403 403 403 ok ok",
    "GET /api/v1/cost/ledger": "401 ok ok ok 403 403 403 ok ok",
    "GET /api/v1/budgets/status": "401 ok ok ok 403 403 403 ok ok",
    "GET /api/v1/quotas/usage": "401 ok ok ok ok ok ok ok ok",
    "GET /api/v1/governance/approval-inbox": "401 ok ok ok ok ok ok ok ok",
    "POST /api/v1/capacity/what-if": "401 422 422 422 422 403 403 422 422",
    "GET /api/v1/resources/tree": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/stats/capacity": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/stats/workload": "401 ok ok ok ok 403 403 ok ok",
    "GET /api/v1/leader": "401 ok ok ok ok ok ok ok ok",  # replica ids and lease times; nothing tenant-specific
}

# One object of tenant A per tenant-scoped kind (governance.access.TENANT_FIELD_OF_KIND,
# derived from the specs: a new kind with a tenant field fails the walk until it is here).
# The policy holds every task of A (max_devices: 0), so the task below waits for approval.
SCOPED_OBJECTS: dict[str, dict] = {
    "Tenant": {"kind": "Tenant", "name": TENANT_A},
    "Quota": {"kind": "Quota", "name": "walk-quota-a", "tenant": TENANT_A, "limits": [{"resource": "gpu", "nominal": 1000}]},
    "Budget": {"kind": "Budget", "name": "walk-budget-a", "tenant": TENANT_A, "amount": 1000000},
    "ApprovalPolicy": {
        "kind": "ApprovalPolicy",
        "name": "walk-policy-a",
        "tenant": TENANT_A,
        "over_quota": False,
        "budget_exceeded": False,
        "max_devices": 0,
    },
    "ReclaimPolicy": {"kind": "ReclaimPolicy", "name": "walk-reclaim-a", "tenant": TENANT_A, "idle_for": "2h"},
}
# Never in another tenant's 2xx answer: the objects' names, nor tenant A's path as a JSON string.
SCOPED_SECRETS = ("walk-quota-a", "walk-budget-a", "walk-policy-a", "walk-reclaim-a", f'"{TENANT_A}"')

# Valid bodies and queries, so a refusal is the access rule's and not a 422.
TASK = {**example_task("llm-inference.yaml"), "name": "walk-task", "tenant": TENANT_A, "command": "echo hi"}
BODIES: dict[str, object] = {
    "POST /api/v1/apply": {"documents": [{"kind": "Tenant", "name": "ai-lab/nlp/walk-new"}]},
    "POST /api/v1/tasks/plan": TASK,
    "POST /api/v1/tasks/recommend": {"name": "walk-goal", "tenant": TENANT_A, "goal": {"model": "llama3.1-8b", "method": "lora", "tokens": 1e9}},
    "POST /api/v1/tasks": TASK,
    "POST /api/v1/catalog/compat-check": {"pool": "{pool}", "framework": {"name": "pytorch", "version": ">=2.0"}},
    "POST /api/v1/compat/check": {"device": "nvidia-a100-80g", "stack": {"driver": "550.54.15"}, "framework": {"name": "pytorch", "version": "2.4"}},
    "POST /api/v1/agent/register": {"node": {"name": "walk-node"}},
    "POST /api/v1/agent/heartbeat": {"node": "walk-node"},
    "PUT /api/v1/whoami/preferences": {"language": "en"},
    "POST /api/v1/users": {"name": "new-{caller}", "bindings": [{"role": "viewer", "tenant": TENANT_A}]},
    "PUT /api/v1/users/{name}/bindings": {"bindings": [{"role": "member", "tenant": TENANT_A}]},
    "POST /api/v1/users/{name}/bindings": {"bindings": [{"role": "viewer", "tenant": TENANT_A}]},
    "POST /api/v1/users/{name}/tokens": {"label": "walk"},
    "POST /api/v1/tokens": {"label": "walk"},
    "POST /api/v1/approvals/{approval_id}/approve": {"comment": "ok"},
    "POST /api/v1/approvals/{approval_id}/reject": {"comment": "no"},
    "POST /api/v1/capacity/what-if": {"days": 1},
}
QUERIES = {
    "DELETE /api/v1/users/{name}/bindings": {"role": "member", "tenant": TENANT_A},
    "GET /api/v1/compat/matrix": {"device": "ascend-910b2"},
    "GET /api/v1/compat/rows": {"table": "torch-npu"},
}


@pytest.fixture
def db_kind() -> str:
    """SQLite only: the access rules live above the database, and the walk (~500 requests)
    is too slow to repeat on PostgreSQL within the suite's time budget."""
    return "sqlite"


def _client(api: TestClient, token: str | None) -> TestClient:
    return TestClient(api.app, headers={"Authorization": f"Bearer {token}"} if token else {})


def _user(api: TestClient, name: str, role: str, tenant: str | None) -> tuple[str, int]:
    created = api.post("/api/v1/users", json={"name": name, "bindings": [{"role": role, "tenant": tenant}]})
    assert created.status_code == 201, created.text
    token = api.post(f"/api/v1/users/{name}/tokens", json={"label": "walk"})
    assert token.status_code == 201, token.text
    return token.json()["token"], token.json()["id"]


@pytest.fixture
def world(demo: TestClient) -> dict:
    admin = demo
    clients = {"anon": _client(admin, None), "padmin": admin}
    for caller, (role, tenant) in BINDINGS.items():
        clients[caller] = _client(admin, _user(admin, f"u-{caller}", role, tenant)[0])
    victims = {caller: _user(admin, f"victim-{caller}", "member", TENANT_A) for caller in CALLERS}
    applied = admin.post("/api/v1/apply", json={"documents": [*SCOPED_OBJECTS.values(), {"kind": "Tenant", "name": "ai-lab/nlp/walk-del"}]})
    assert applied.status_code == 200, applied.text
    task, doomed = (clients["member"].post("/api/v1/tasks", json={**TASK, "name": name}) for name in ("walk-a", "walk-cancel"))
    assert task.status_code == doomed.status_code == 201, task.text + doomed.text
    detail = admin.get(f"/api/v1/tasks/{task.json()['id']}").json()
    assert detail["state"] == "pending_approval", detail
    pool = admin.get("/api/v1/objects/pools").json()[0]["name"]
    return {"clients": clients, "victims": victims, "task": detail, "doomed": doomed.json()["id"], "approval": detail["approval"]["id"], "pool": pool}


LAST = ("DELETE /api/v1/tokens/{token_id}", "DELETE /api/v1/users/{name}")  # they remove what other rows use


def _endpoints(app) -> list[tuple[str, str]]:
    paths = app.openapi()["paths"]
    found = [(method.upper(), path) for path, ops in paths.items() if path.startswith("/api/v1") for method in ops]
    return sorted(found, key=lambda e: LAST.index(f"{e[0]} {e[1]}") + 1 if f"{e[0]} {e[1]}" in LAST else 0)


def _fill(key: str, path: str, caller: str, world: dict) -> str:
    victim_token_id = world["victims"][caller][1]
    values = {
        "task_id": world["doomed"] if path.endswith("/cancel") else world["task"]["id"],
        "approval_id": world["approval"],
        "token_id": str(victim_token_id),
        "kind": "tenants" if key.startswith("DELETE") else "pools",
    }
    if "/users/" in path:
        values["name"] = f"victim-{caller}"
    elif "/clusters/" in path:
        values["name"] = "bj-train"
    elif key.startswith("DELETE /api/v1/objects"):
        values["name"] = "ai-lab/nlp/walk-del"
    else:
        values["name"] = world["pool"]
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


def _body(key: str, caller: str, world: dict):
    body = BODIES.get(key)
    if body is None:
        return None
    text = repr(body).replace("{caller}", caller).replace("{pool}", world["pool"])
    return eval(text)  # noqa: S307 - our own literal, placeholders substituted


def test_every_endpoint_answers_every_role_as_the_table_says(world: dict) -> None:
    clients = world["clients"]
    endpoints = _endpoints(clients["padmin"].app)
    missing = [f"{m} {p}" for m, p in endpoints if f"{m} {p}" not in TABLE]
    assert not missing, f"endpoints not in the role-walk table (add a row): {missing}"
    stale = set(TABLE) - {f"{m} {p}" for m, p in endpoints}
    assert not stale, f"table rows for endpoints that no longer exist: {sorted(stale)}"

    secrets = (world["task"]["id"], world["approval"], "walk-a", *SCOPED_SECRETS)
    wrong = []
    for method, path in endpoints:
        key = f"{method} {path}"
        expected = dict(zip(CALLERS, TABLE[key].split(), strict=True))
        for caller in reversed(CALLERS):  # weakest first: denials come before an allowed write changes the object
            url = _fill(key, path, caller, world)
            response = clients[caller].request(method, url, json=_body(key, caller, world), params=QUERIES.get(key))
            status = response.status_code
            got = "ok" if 200 <= status < 300 else str(status)
            if got != expected[caller]:
                wrong.append(f"{key} as {caller}: {status} (expected {expected[caller]}) {response.text[:160]}")
            if status >= 400:
                body = response.json()
                assert body.get("code") and body.get("message"), f"{key} as {caller}: {status} without code/message: {response.text[:200]}"
            if caller in FOREIGN and 200 <= status < 300:
                leaked = [s for s in secrets if s in response.text]
                assert not leaked, f"{key} as {caller} ({status}) shows tenant A's {leaked}"
    assert not wrong, "\n".join(wrong)


# Who reads an object of tenant A under /api/v1/objects: A's own roles and the
# platform-admin; another tenant's member, viewer and tenant-admin get 404 (as for a name
# that does not exist) and lists without it; roles without inventory.read get 403.
#                anon padmin tadmin member viewer auditor agent fmember fadmin fviewer
SCOPED_READ = "401 ok ok ok ok 403 403 404 404 404"


def test_every_tenant_scoped_object_kind_is_hidden_from_other_tenants(world: dict) -> None:
    assert set(SCOPED_OBJECTS) == set(TENANT_FIELD_OF_KIND), "a tenant-scoped kind has no object in the walk: add it to SCOPED_OBJECTS"
    admin = world["clients"]["padmin"]
    clients = {**world["clients"], "fviewer": _client(admin, _user(admin, "u-fviewer", "viewer", TENANT_B)[0])}
    expected = dict(zip((*CALLERS, "fviewer"), SCOPED_READ.split(), strict=True))
    wrong = []
    for kind, obj in SCOPED_OBJECTS.items():
        for caller, want in expected.items():
            one = clients[caller].get(f"/api/v1/objects/{kind}/{obj['name']}")
            listed = clients[caller].get(f"/api/v1/objects/{kind}")
            got = "ok" if one.status_code == 200 else str(one.status_code)
            if got != want:
                wrong.append(f"GET {kind}/{obj['name']} as {caller}: {one.status_code} (expected {want}) {one.text[:160]}")
            if want == "404":
                if one.status_code == 404 and one.json()["message"] != f"{kind} {obj['name']!r} not found":
                    wrong.append(f"GET {kind}/{obj['name']} as {caller}: the 404 differs from a missing name's: {one.text[:160]}")
                if listed.status_code != 200 or any(o["name"] == obj["name"] for o in listed.json()):
                    wrong.append(f"GET {kind} as {caller}: {listed.status_code}, lists tenant A's {obj['name']}")
            elif want == "ok" and not any(o["name"] == obj["name"] for o in listed.json()):
                wrong.append(f"GET {kind} as {caller}: its own tenant's {obj['name']} is missing")
    assert not wrong, "\n".join(wrong)
