"""A real Ray head (deploy/ray.sh) imported through the API and kept in sync: its custom
resources become pools, a node that joins appears, a node that leaves disappears."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from hetpool.engines.ray.inventory import RayConnector
from tests.engines.test_ray_inventory import RAY_ADDRESS, _ray_sh, added_node, ray_connector  # noqa: F401 (fixtures)


def _sync_until(api: TestClient, ok, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        response = api.post("/api/v1/clusters/rc/sync")
        assert response.status_code == 200, response.text
        nodes = {n["name"]: n for n in api.get("/api/v1/objects/nodes").json()}
        if ok(nodes) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.5)


@pytest.mark.parametrize("db_kind", ["sqlite"])  # the connector is what is under test; one database is enough
def test_ray_cluster_is_imported_and_kept_in_sync(api: TestClient, ray_connector: RayConnector, added_node: str) -> None:  # noqa: F811
    status = _ray_sh("status")
    if "head running" not in status.stdout:
        pytest.skip("the Ray head was not started by deploy/ray.sh on this host")
    cluster = {"kind": "Cluster", "name": "rc", "backend": "ray", "backend_config": {"address": RAY_ADDRESS, "sync": "off"}}
    assert api.post("/api/v1/apply", json={"documents": [cluster]}).status_code == 200
    nodes = _sync_until(api, lambda n: bool(n), 10)
    [head] = [n for n in nodes.values() if n["cluster"] == "rc"]
    assert {g["model"]: g["count"] for g in head["devices"]} == {"nvidia-h100": 4, "ascend-910b3": 8}
    pools = {p["name"]: p for p in api.get("/api/v1/objects/pools").json()}
    assert pools["rc-nvidia-h100"]["nodes"] == [head["name"]] and pools["rc-ascend-910b3"]["nodes"] == [head["name"]]

    result = _ray_sh("add-node", added_node, json.dumps({"GPU": 2, "accelerator_type:A100-80G": 1}))
    assert result.returncode == 0, result.stderr
    nodes = _sync_until(api, lambda n: added_node in n, 45)
    assert nodes[added_node]["devices"] == [{"model": "nvidia-a100-80g", "count": 2, "islands": []}]
    status = {s["node"]: s for s in api.get("/api/v1/nodes/status").json()}
    assert status[added_node]["state"] == "ready" and status[added_node]["source"] == "ray"

    assert _ray_sh("remove-node", added_node).returncode == 0
    nodes = _sync_until(api, lambda n: added_node not in n, 30)
    assert added_node not in nodes and head["name"] in nodes
    assert "rc-nvidia-a100-80g" not in {p["name"] for p in api.get("/api/v1/objects/pools").json()}
    last = api.get("/api/v1/clusters/rc/sync").json()
    assert last["ok"] and last["summary"]["removed"] == [added_node]
