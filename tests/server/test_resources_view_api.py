"""GET /api/v1/resources/tree: the estate as clusters → nodes → devices, with filters."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task

TREE = "/api/v1/resources/tree"


def node_names(tree: dict) -> set[str]:
    return {n["name"] for c in tree["clusters"] for n in c["nodes"]}


def find_node(tree: dict, name: str) -> dict:
    return next(n for c in tree["clusters"] for n in c["nodes"] if n["name"] == name)


def test_tree_has_every_cluster_node_and_device_with_profile_and_status(demo: TestClient) -> None:
    tree = demo.get(TREE).json()
    assert [c["name"] for c in tree["clusters"]] == ["bj-train", "gz-general", "sh-ascend"]
    nodes = demo.get("/api/v1/objects/nodes").json()
    assert node_names(tree) == {n["name"] for n in nodes}
    devices = sum(g["count"] for n in nodes for g in n["devices"])
    assert tree["totals"] == {"total": devices, "idle": devices, "busy": 0, "abnormal": 0, "offline": 0, "clusters": 3, "nodes": len(nodes)}
    h01 = find_node(tree, "gpu-h01")
    assert h01["state"] == "ready" and h01["source"] == "" and h01["stack"]["frameworks"]["vllm"] == "0.6.4.post1"
    group = h01["groups"][0]
    assert group["model"] == "nvidia-h800" and group["class"] == "gpu" and group["pools"] == ["bj-h800"] and "fp8" in group["features"]
    assert [d["status"] for d in group["devices"]] == ["idle"] * 8 and group["framework"] is None
    bj = tree["clusters"][0]
    assert {p["name"] for p in bj["pools"]} == {"bj-a100-80g", "bj-h800"} and bj["connector"] is None
    assert tree["options"]["classes"] == ["cpu", "dpu", "gpu", "npu"] and "pytorch" in tree["options"]["frameworks"]


def test_filters_by_class_model_cluster_status_and_framework(ctx: ServiceContext, demo: TestClient) -> None:
    assert node_names(demo.get(TREE, params={"class": "dpu"}).json()) == {"dpu-01"}
    assert node_names(demo.get(TREE, params={"model": "nvidia-a100-80g"}).json()) == {"gpu-a01", "gpu-a02"}
    assert node_names(demo.get(TREE, params={"cluster": "gz-general"}).json()) == {"cpu-01", "cpu-02", "dpu-01"}
    mindspore = demo.get(TREE, params={"framework": "mindspore"}).json()
    assert node_names(mindspore) == {"npu-b04", "npu-i01", "npu-i02"}
    assert {p["name"] for c in mindspore["clusters"] for p in c["pools"]} == {"sh-910b3-mindspore", "sh-310p-infer"}
    pt24 = demo.get(TREE, params={"framework": "torch 2.4", "model": "ascend-910b2"}).json()
    assert node_names(pt24) == {"npu-b01", "npu-b02"}  # npu-b03's CANN 8.0.RC1 has PyTorch 2.2 only
    assert pt24["framework"] == {"name": "torch", "version": "2.4", "extras": {}}
    assert find_node(pt24, "npu-b01")["groups"][0]["framework"]["ok"] is True
    task = example_task("pytorch24-npu.yaml")
    assert demo.post("/api/v1/tasks", json=task).status_code == 201
    schedule_once(ctx)
    busy = demo.get(TREE, params={"status": "busy"}).json()
    assert len(node_names(busy)) == 1 and busy["totals"]["busy"] == 8
    assert node_names(demo.get(TREE, params={"status": "draining"}).json()) == set()


def test_agent_health_makes_devices_abnormal_then_offline(ctx: ServiceContext, demo: TestClient) -> None:
    from hetpool.server.services.nodes import mark_offline

    node = {"name": "agent-a", "cluster": "bj-train", "cpu_cores": 16, "memory_gb": 64, "devices": [{"model": "nvidia-t4", "count": 2}]}
    assert demo.post("/api/v1/agent/register", json={"node": node}).status_code == 200
    beat = {"node": "agent-a", "devices": [{"index": 0, "model": "nvidia-t4", "health": "abnormal", "utilisation_pct": 3}]}
    assert demo.post("/api/v1/agent/heartbeat", json=beat).status_code == 200
    tree = demo.get(TREE, params={"status": "abnormal"}).json()
    agent = find_node(tree, "agent-a")
    assert node_names(tree) == {"agent-a"} and agent["source"] == "agent" and agent["last_heartbeat_at"]
    assert [(d["status"], d["health"]) for d in agent["groups"][0]["devices"]] == [("abnormal", "abnormal"), ("idle", "")]
    ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
    mark_offline(ctx)
    agent = find_node(demo.get(TREE, params={"status": "offline"}).json(), "agent-a")
    assert agent["state"] == "offline" and agent["devices"] == {"total": 2, "idle": 0, "busy": 0, "abnormal": 1, "offline": 1}


def test_bad_filters_are_422_with_the_reason(demo: TestClient) -> None:
    for params, code, start in (
        ({"framework": "cobol"}, "invalid_spec", "framework: unknown framework 'cobol'; known: "),
        ({"framework": "torch>=x"}, "invalid_spec", "framework: invalid version spec '>=x'"),
        ({"cluster": "nowhere"}, "invalid_spec", "cluster: unknown cluster 'nowhere'; known: bj-train"),
        ({"model": "warp-drive"}, "invalid_spec", "model: unknown device model 'warp-drive'"),
        ({"class": "qpu"}, "invalid_request", "query.class"),
        ({"status": "sleepy"}, "invalid_request", "query.status"),
    ):
        response = demo.get(TREE, params=params)
        assert response.status_code == 422, params
        assert response.json()["code"] == code and response.json()["message"].startswith(start), response.json()


def test_needs_inventory_read(demo: TestClient) -> None:
    def client_of(name: str, binding: dict) -> TestClient:
        assert demo.post("/api/v1/users", json={"name": name, "bindings": [binding]}).status_code == 201
        token = demo.post(f"/api/v1/users/{name}/tokens", json={"label": "t"}).json()["token"]
        return TestClient(demo.app, headers={"Authorization": f"Bearer {token}"})

    viewer = client_of("vic", {"role": "viewer", "tenant": "infra"})
    assert viewer.get(TREE).status_code == 200  # the inventory is shared: any tenant's viewer reads it
    auditor = client_of("aud", {"role": "auditor", "tenant": None})
    refused = auditor.get(TREE)
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    assert TestClient(demo.app).get(TREE).status_code == 401
