"""Reconciling what a connector observes into the inventory, through the service and the API.

The engine here is a scripted `InventoryConnector` (a test double of the connector
interface, not of any engine): the real Slurm, Ray and Kubernetes connectors are tested
against their engines in tests/engines and end to end in test_connector_e2e.py.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hetpool.engines.base import ConnectorError, InventoryConnector, InventoryObservation, NodeState, ObservedNode
from hetpool.server.services.connector_sync import sync_cluster, sync_due
from hetpool.server.services.context import ServiceContext

CUDA = {"driver": "535.104.05", "runtime": {"name": "cuda", "version": "12.2"}}
CUDA_NEW = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}}


class ScriptedConnector(InventoryConnector):
    kind = "slurm"
    sees = frozenset({"nodes", "devices", "used", "states"})

    def __init__(self, nodes: list[ObservedNode], fail: bool = False) -> None:
        self.nodes, self.fail = nodes, fail

    def fetch(self) -> InventoryObservation:
        if self.fail:
            raise ConnectorError("scontrol: cannot reach slurmctld")
        return InventoryObservation(connector="slurm", sees=self.sees, nodes=[ObservedNode(**vars(n)) for n in self.nodes])


def _nodes() -> list[ObservedNode]:
    return [
        ObservedNode("GPU-A1", 64, 512, devices={"nvidia-a100-80g": 4}, stack=CUDA),
        ObservedNode("gpu-a2", 64, 512, devices={"nvidia-a100-80g": 4}, stack=CUDA),
        ObservedNode("gpu-a3", 64, 512, devices={"nvidia-a100-80g": 4}, stack=CUDA_NEW),
        ObservedNode("npu-1", 192, 1024, arch="aarch64", devices={"ascend-910b3": 8, "unknown-npu-910z": 2}),
        ObservedNode("cpu-1", 32, 128),
    ]


@pytest.fixture
def slurm_api(api: TestClient) -> TestClient:
    cluster = {"kind": "Cluster", "name": "hpc", "backend": "slurm", "backend_config": {"conf": "/nonexistent/slurm.conf", "sync": "off"}}
    tenant = {"kind": "Tenant", "name": "team-a"}
    assert api.post("/api/v1/apply", json={"documents": [cluster, tenant]}).status_code == 200
    return api


def _task(models: list[str], count: int, exclude: list[str] = ()) -> dict:
    return {
        "name": "t",
        "tenant": "team-a",
        "type": "training",
        "image": "img",
        "per_worker": {"devices": {"class": "gpu", "models": models, "count": count}},
        "exclude_nodes": list(exclude),
    }


def test_sync_creates_nodes_pools_and_placeholder_models(ctx: ServiceContext, slurm_api: TestClient) -> None:
    summary = sync_cluster(ctx, "hpc", ScriptedConnector(_nodes()))
    assert summary["nodes"] == 5 and summary["states"] == {"ready": 5}
    names = [n["name"] for n in slurm_api.get("/api/v1/objects/nodes").json()]
    assert names == ["cpu-1", "gpu-a1", "gpu-a2", "gpu-a3", "npu-1"]  # lower-cased
    pools = {p["name"]: p for p in slurm_api.get("/api/v1/objects/pools").json()}
    # One pool per (model, stack): a3 runs a newer driver, so it gets a pool of its own.
    assert pools["hpc-nvidia-a100-80g"]["nodes"] == ["gpu-a1", "gpu-a2"]
    assert pools["hpc-nvidia-a100-80g-2"]["nodes"] == ["gpu-a3"]
    assert pools["hpc-ascend-910b3"]["nodes"] == ["npu-1"]
    assert pools["hpc-cpu-x86-64"]["nodes"] == ["cpu-1"]
    assert pools["hpc-unknown-npu-910z"]["labels"]["hetpool.io/auto-pool"] == "true"
    placeholder = slurm_api.get("/api/v1/objects/devicemodels/unknown-npu-910z").json()
    assert placeholder["verified"] is False and placeholder["class"] == "npu"
    last = slurm_api.get("/api/v1/clusters/hpc/sync").json()
    assert last["ok"] is True and last["summary"]["devices"]["nvidia-a100-80g"] == {"total": 12, "used": 0}
    # A second identical sync changes nothing.
    assert sync_cluster(ctx, "hpc", ScriptedConnector(_nodes()))["changes"] == []


def test_drained_and_down_nodes_take_no_work(ctx: ServiceContext, slurm_api: TestClient) -> None:
    nodes = _nodes()
    sync_cluster(ctx, "hpc", ScriptedConnector(nodes))
    exclude = ["gpu-a2", "gpu-a3"]
    first = slurm_api.post("/api/v1/tasks/plan", json=_task(["nvidia-a100-80g"], 1, exclude)).json()
    assert first.get("placements", [{}])[0].get("node") == "gpu-a1", first
    nodes[0].state, nodes[0].reason = NodeState.DRAINING, "maint test"
    sync_cluster(ctx, "hpc", ScriptedConnector(nodes))
    status = {s["node"]: s for s in slurm_api.get("/api/v1/nodes/status").json()}
    assert status["gpu-a1"]["state"] == "draining" and status["gpu-a1"]["reason"] == "maint test" and status["gpu-a1"]["source"] == "slurm"
    plan = slurm_api.post("/api/v1/tasks/plan", json=_task(["nvidia-a100-80g"], 1, exclude)).json()
    assert plan["feasible"] is False and plan["reasons"].get("node unhealthy or not schedulable") == 1
    events = slurm_api.get("/api/v1/audit", params={"object_id": "gpu-a1", "action": "node.status"}).json()
    assert events[-1]["actor"] == "connector:hpc" and events[-1]["after"]["state"] == "draining"
    nodes[0].state, nodes[0].reason = NodeState.READY, ""
    sync_cluster(ctx, "hpc", ScriptedConnector(nodes))
    assert slurm_api.post("/api/v1/tasks/plan", json=_task(["nvidia-a100-80g"], 1, exclude)).json()["feasible"] is True


def test_devices_used_by_the_engine_are_not_offered(ctx: ServiceContext, slurm_api: TestClient) -> None:
    nodes = _nodes()
    nodes[0].used = {"nvidia-a100-80g": 3}  # Slurm jobs hetpool did not place hold 3 of 4
    sync_cluster(ctx, "hpc", ScriptedConnector(nodes))
    exclude = ["gpu-a2", "gpu-a3"]
    assert slurm_api.post("/api/v1/tasks/plan", json=_task(["nvidia-a100-80g"], 2, exclude)).json()["feasible"] is False
    one = slurm_api.post("/api/v1/tasks/plan", json=_task(["nvidia-a100-80g"], 1, exclude)).json()
    assert one["feasible"] is True and one["placements"][0]["devices"] == [3]


def test_removed_nodes_disappear_and_empty_auto_pools_go(ctx: ServiceContext, slurm_api: TestClient) -> None:
    nodes = _nodes()
    sync_cluster(ctx, "hpc", ScriptedConnector(nodes))
    summary = sync_cluster(ctx, "hpc", ScriptedConnector([n for n in nodes if n.name not in ("gpu-a2", "gpu-a3")]))
    assert summary["removed"] == ["gpu-a2", "gpu-a3"]
    names = [n["name"] for n in slurm_api.get("/api/v1/objects/nodes").json()]
    assert "gpu-a2" not in names and "gpu-a3" not in names
    pools = {p["name"]: p for p in slurm_api.get("/api/v1/objects/pools").json()}
    assert pools["hpc-nvidia-a100-80g"]["nodes"] == ["gpu-a1"] and "hpc-nvidia-a100-80g-2" not in pools
    assert "gpu-a2" not in {s["node"] for s in slurm_api.get("/api/v1/nodes/status").json()}
    deleted = slurm_api.get("/api/v1/audit", params={"object_id": "gpu-a2", "action": "inventory.delete"}).json()
    assert deleted and deleted[0]["actor"] == "connector:hpc"


def test_a_removed_node_with_hetpool_work_is_kept_down(ctx: ServiceContext, slurm_api: TestClient) -> None:
    from hetpool.server.workers.scheduler import schedule_once

    nodes = _nodes()
    sync_cluster(ctx, "hpc", ScriptedConnector(nodes))
    task = slurm_api.post("/api/v1/tasks", json=_task(["nvidia-a100-80g"], 1, ["gpu-a2", "gpu-a3"])).json()
    schedule_once(ctx)
    assert slurm_api.get(f"/api/v1/tasks/{task['id']}").json()["state"] in ("admitted", "dispatching", "running")
    summary = sync_cluster(ctx, "hpc", ScriptedConnector(nodes[1:]))
    assert summary["kept_down"] == ["gpu-a1"] and summary["removed"] == []
    status = {s["node"]: s for s in slurm_api.get("/api/v1/nodes/status").json()}
    assert status["gpu-a1"]["state"] == "down" and "removed from slurm" in status["gpu-a1"]["reason"]


def test_failed_sync_is_recorded_and_reported(ctx: ServiceContext, slurm_api: TestClient) -> None:
    with pytest.raises(ConnectorError, match="cannot reach slurmctld"):
        sync_cluster(ctx, "hpc", ScriptedConnector([], fail=True))
    last = slurm_api.get("/api/v1/clusters/hpc/sync").json()
    assert last["ok"] is False and "cannot reach slurmctld" in last["error"]
    assert slurm_api.get("/api/v1/clusters/nope/sync").status_code == 404
    # `sync: off` keeps the periodic worker away from this cluster.
    assert sync_due(ctx) == []


def test_sync_refuses_clusters_without_a_connector(ctx: ServiceContext, slurm_api: TestClient) -> None:
    assert slurm_api.post("/api/v1/apply", json={"documents": [{"kind": "Cluster", "name": "plain", "backend": "local"}]}).status_code == 200
    response = slurm_api.post("/api/v1/clusters/plain/sync")
    assert response.status_code == 422 and "has no inventory connector" in response.json()["message"]
