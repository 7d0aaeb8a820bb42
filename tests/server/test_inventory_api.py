"""Inventory through the API: apply is all-or-nothing, errors name the field, references are checked."""

from __future__ import annotations

from fastapi.testclient import TestClient

CLUSTER = {"kind": "Cluster", "name": "c1", "zone": "bj"}
NODE = {
    "kind": "Node",
    "name": "n1",
    "cluster": "c1",
    "cpu_cores": 32,
    "memory_gb": 256,
    "devices": [{"model": "nvidia-a100-80g", "count": 8}],
    "stack": {"driver": "535.154.05", "runtime": {"name": "cuda", "version": "12.2"}, "frameworks": {"pytorch": "2.4.1"}},
}
POOL = {"kind": "Pool", "name": "p1", "cluster": "c1", "model": "nvidia-a100-80g", "nodes": ["n1"]}


def apply(api: TestClient, *docs: dict):
    return api.post("/api/v1/apply", json={"documents": list(docs)})


def test_apply_creates_then_reports_unchanged_and_configured(api: TestClient) -> None:
    first = apply(api, CLUSTER, NODE, POOL)
    assert first.status_code == 200, first.text
    assert [r["action"] for r in first.json()["results"]] == ["created"] * 3
    again = apply(api, CLUSTER, NODE, POOL).json()["results"]
    assert {r["action"] for r in again} == {"unchanged"}
    changed = apply(api, {**POOL, "price_per_hour": 20.0}).json()["results"]
    assert changed == [{"kind": "Pool", "name": "p1", "action": "configured", "id": None}]
    assert api.get("/api/v1/objects/pools/p1").json()["price_per_hour"] == 20.0


def test_unknown_field_names_the_path_and_nothing_is_applied(api: TestClient) -> None:
    bad_node = {**NODE, "devices": [{"model": "nvidia-a100-80g", "cnt": 8}]}
    response = apply(api, CLUSTER, bad_node)
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "invalid_spec"
    assert any(d["loc"].endswith("devices[0].cnt") and d["msg"] == "unknown field" for d in body["details"])
    assert api.get("/api/v1/objects/clusters").json() == []  # the valid cluster was not applied either


def test_bad_enum_lists_allowed_values(api: TestClient) -> None:
    response = apply(api, {**CLUSTER, "backend": "nomad"})
    assert response.status_code == 422
    message = response.json()["details"][0]["msg"]
    for allowed in ("local", "slurm", "kubernetes", "ray"):
        assert allowed in message


def test_references_are_checked_across_the_batch(api: TestClient) -> None:
    response = apply(api, NODE, {**POOL, "nodes": ["n1", "ghost"]})
    assert response.status_code == 422
    locs = {d["loc"]: d["msg"] for d in response.json()["details"]}
    assert any("Node/n1: cluster" in loc and "unknown cluster" in msg for loc, msg in locs.items())
    assert any("Pool/p1: nodes[1]" in loc and "unknown node" in msg for loc, msg in locs.items())
    assert api.get("/api/v1/objects/nodes").json() == []


def test_pool_model_must_match_node_devices(api: TestClient) -> None:
    response = apply(api, CLUSTER, NODE, {**POOL, "model": "nvidia-h800"})
    assert response.status_code == 422
    assert "has no nvidia-h800 devices" in response.text


def test_unknown_device_model_is_rejected(api: TestClient) -> None:
    response = apply(api, CLUSTER, {**NODE, "devices": [{"model": "nvidia-a1000", "count": 1}]})
    assert response.status_code == 422
    assert "unknown device model 'nvidia-a1000'" in response.text


def test_tenant_parent_must_exist(api: TestClient) -> None:
    response = apply(api, {"kind": "Tenant", "name": "org/team"})
    assert response.status_code == 422
    assert "parent tenant 'org' does not exist" in response.text
    assert apply(api, {"kind": "Tenant", "name": "org"}, {"kind": "Tenant", "name": "org/team"}).status_code == 200


def test_delete_refuses_objects_in_use_then_allows(api: TestClient) -> None:
    apply(api, CLUSTER, NODE, POOL)
    conflict = api.delete("/api/v1/objects/nodes/n1")
    assert conflict.status_code == 409
    assert "Pool/p1" in conflict.json()["message"]
    assert api.delete("/api/v1/objects/pools/p1").status_code == 204
    assert api.delete("/api/v1/objects/nodes/n1").status_code == 204
    assert api.get("/api/v1/objects/nodes/n1").status_code == 404


def test_builtin_device_models_are_listed_and_cannot_be_deleted(api: TestClient) -> None:
    models = api.get("/api/v1/objects/devicemodels").json()
    classes = {m["class"] for m in models}
    assert len(models) >= 25 and classes == {"cpu", "gpu", "npu", "dpu"}
    assert api.delete("/api/v1/objects/devicemodels/nvidia-a100-80g").status_code == 409


def test_operator_adds_a_device_model(api: TestClient) -> None:
    model = {
        "kind": "DeviceModel",
        "name": "acme-x1",
        "vendor": "generic",
        "class": "npu",
        "display_name": "ACME X1",
        "memory_gb": 48,
        "runtime": "none",
    }
    assert apply(api, model, CLUSTER, {**NODE, "devices": [{"model": "acme-x1", "count": 4}]}).status_code == 200
    assert api.get("/api/v1/objects/devicemodels/acme-x1").json()["display_name"] == "ACME X1"


def test_requests_without_a_valid_token_are_refused(ctx, api: TestClient) -> None:
    from hetpool.server.app import create_app

    with TestClient(create_app(ctx=ctx)) as anonymous:
        assert anonymous.get("/api/v1/objects/pools").status_code == 401
        bad = anonymous.get("/api/v1/objects/pools", headers={"Authorization": "Bearer hp_wrong"})
        assert bad.status_code == 401 and bad.json()["code"] == "unauthorized"
        assert anonymous.get("/healthz").status_code == 200


def test_every_change_is_audited(api: TestClient) -> None:
    apply(api, CLUSTER, NODE)
    apply(api, {**NODE, "cpu_cores": 64})
    events = api.get("/api/v1/audit", params={"object_id": "n1"}).json()
    assert [e["action"] for e in events] == ["inventory.create", "inventory.update"]
    assert events[1]["before"]["cpu_cores"] == 32 and events[1]["after"]["cpu_cores"] == 64
    assert api.get("/api/v1/audit/verify").json()["ok"] is True


def test_governance_objects_must_name_existing_tenants_clusters_and_models(api: TestClient) -> None:
    docs = [{"kind": "Tenant", "name": "org"}, {"kind": "Cluster", "name": "c1"}]
    assert api.post("/api/v1/apply", json={"documents": docs}).status_code == 200
    cases = [
        ({"kind": "Budget", "name": "b", "tenant": "nobody", "amount": 10}, "unknown tenant 'nobody'"),
        ({"kind": "PriceList", "name": "p", "cluster": "c9"}, "unknown cluster 'c9'"),
        ({"kind": "PriceList", "name": "p", "devices": [{"model": "gpu-9000", "per_device_hour": 1}]}, "devices[0].model"),
        ({"kind": "ApprovalPolicy", "name": "a", "tenant": "nobody"}, "unknown tenant"),
    ]
    for doc, expected in cases:
        response = api.post("/api/v1/apply", json={"documents": [doc]})
        assert response.status_code == 422 and expected in response.json()["message"], response.text
    ok = [{"kind": "Budget", "name": "b", "tenant": "org", "amount": 10}, {"kind": "PriceList", "name": "p", "cluster": "c1"}]
    assert api.post("/api/v1/apply", json={"documents": ok}).status_code == 200
    assert "Budget/b" in api.delete("/api/v1/objects/tenants/org").json()["message"]
    assert "PriceList/p" in api.delete("/api/v1/objects/clusters/c1").json()["message"]
