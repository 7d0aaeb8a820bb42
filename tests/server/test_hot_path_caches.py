"""The submit path's per-process caches (cluster state, token resolution) never
serve stale answers: every inventory change shows in the next submit, and a role change,
user deletion or revocation applies at once on the replica that made it, and on another
replica once AUTH_CACHE_S has passed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from hetpool.engines.local import LocalBackend
from hetpool.server.app import create_app
from hetpool.server.db.session import Database
from hetpool.server.services import auth_cache
from hetpool.server.services.cluster_state import cluster_state
from hetpool.server.services.context import ServiceContext
from tests.server.test_access_api import as_token, make_user

SMALL_TASK = {"tenant": "ai-lab/nlp/llm-sft", "template": "llm-serving", "command": "sleep 1"}

NPU_TEMPLATE = {
    "kind": "TaskTemplate",
    "name": "cache-probe",
    "type": "batch-inference",
    "defaults": {"workers": 1, "per_worker": {"devices": {"class": "npu", "count": 1}, "cpu": 4, "memory_gb": 16}},
}


def submit(client: TestClient, name: str, **overrides) -> TestClient:
    return client.post("/api/v1/tasks", json={**SMALL_TASK, "name": name, **overrides})


def test_submits_reuse_the_inventory_until_it_changes(ctx: ServiceContext, demo: TestClient) -> None:
    for i in range(3):
        assert submit(demo, f"warm-{i}").status_code == 201
    loads = cluster_state(ctx).inventory_loads
    assert submit(demo, "still-warm").status_code == 201
    assert cluster_state(ctx).inventory_loads == loads  # unchanged inventory: not read again

    # A template created a moment ago is known to the very next submit.
    assert demo.post("/api/v1/apply", json={"documents": [NPU_TEMPLATE]}).status_code == 200
    created = submit(demo, "new-template", template="cache-probe")
    assert created.status_code == 201, created.text
    assert created.json()["type"] == "batch-inference"
    assert cluster_state(ctx).inventory_loads == loads + 1

    # An update (generation + 1) is seen too: the template now asks for more NPUs than any node has.
    bigger = {**NPU_TEMPLATE, "defaults": {**NPU_TEMPLATE["defaults"], "per_worker": {"devices": {"class": "npu", "count": 64}}}}
    assert demo.post("/api/v1/apply", json={"documents": [bigger]}).status_code == 200
    refused = submit(demo, "too-big", template="cache-probe")
    assert refused.status_code == 422 and "cannot run on any pool" in refused.json()["message"]

    # And a deletion (of an unused template: the refused submit above left no task behind).
    unused = {**bigger, "name": "cache-probe-unused"}
    assert demo.post("/api/v1/apply", json={"documents": [unused]}).status_code == 200
    assert "cannot run on any pool" in submit(demo, "resolved", template="cache-probe-unused").json()["message"]
    assert demo.delete("/api/v1/objects/TaskTemplate/cache-probe-unused").status_code == 204
    gone = submit(demo, "deleted-template", template="cache-probe-unused")
    assert gone.status_code == 422 and "cannot run on any pool" not in gone.text and "cache-probe-unused" in gone.text


def test_role_changes_user_deletion_and_revocation_apply_at_once(demo: TestClient) -> None:
    alice = make_user(demo, "alice", ("member", "ai-lab/nlp"))
    assert submit(alice, "mine").status_code == 201  # alice's token is now cached
    removed = demo.delete("/api/v1/users/alice/bindings", params={"role": "member", "tenant": "ai-lab/nlp"})
    assert removed.status_code == 200, removed.text
    assert submit(alice, "not-any-more").status_code in (403, 404)
    assert demo.post("/api/v1/users/alice/bindings", json={"bindings": [{"role": "member", "tenant": "ai-lab/nlp"}]}).status_code == 200
    assert submit(alice, "again").status_code == 201

    token = demo.post("/api/v1/users/alice/tokens", json={"label": "second"}).json()
    second = as_token(demo, token["token"])
    assert second.get("/api/v1/whoami").status_code == 200
    assert demo.delete(f"/api/v1/tokens/{token['id']}").status_code == 200
    assert second.get("/api/v1/whoami").status_code == 401

    assert demo.delete("/api/v1/users/alice").status_code == 204
    assert alice.get("/api/v1/whoami").status_code == 401


@pytest.fixture
def replica_api(ctx: ServiceContext, demo: TestClient) -> Iterator[TestClient]:
    """A second replica: its own engine (so its own caches) on the same database."""
    db = Database(ctx.settings.resolved_database_url())
    other = ServiceContext(settings=ctx.settings, db=db, clock=ctx.clock, backends={"local": LocalBackend(ctx.settings.backend_dir / "local")})
    with TestClient(create_app(ctx=other)) as client:
        yield client
    db.dispose()


def test_another_replica_stops_accepting_a_revoked_token_once_its_cache_entry_ages(
    demo: TestClient, replica_api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(auth_cache, "AUTH_CACHE_S", 3600.0)
    token = demo.post("/api/v1/tokens", json={"label": "roaming"}).json()
    headers = {"Authorization": f"Bearer {token['token']}"}
    assert replica_api.get("/api/v1/whoami", headers=headers).status_code == 200  # cached on the replica
    assert demo.delete(f"/api/v1/tokens/{token['id']}").status_code == 200
    assert demo.get("/api/v1/whoami", headers=headers).status_code == 401  # at once where it was revoked
    assert replica_api.get("/api/v1/whoami", headers=headers).status_code == 200  # the replica's entry is still young
    monkeypatch.setattr(auth_cache, "AUTH_CACHE_S", 0.0)  # ... and once it has aged
    assert replica_api.get("/api/v1/whoami", headers=headers).status_code == 401
