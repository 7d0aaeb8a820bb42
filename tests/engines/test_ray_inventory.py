"""The Ray connector: the resource convention and node reading on dashboard replies recorded
from a real Ray 2.60 cluster (fixtures/ray/README.txt), and the connector against a real local
Ray head.

The real tests need the head deploy/ray.sh starts and `HETPOOL_TEST_RAY_ADDRESS` set to its
dashboard URL (`export HETPOOL_TEST_RAY_ADDRESS=$(deploy/ray.sh start)`); without the variable
they are skipped. They rely on that script's default head resources (GPU_H100: 4,
NPU_910B3: 8) and put the cluster back as they found it: the job stopped and deleted, the added
node removed (Ray keeps listing it as DEAD with "Expected termination", which the connector
treats as removed).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import SEES_USED, ConnectorError, InventoryObservation, NodeState, ObservedNode
from hetpool.engines.ray.config import parse_resource_models
from hetpool.engines.ray.inventory import NODE_ID_LABEL, RayConnector, build_observation, camel_key
from hetpool.engines.ray.resources import ResourceMapper, is_ignored_resource
from hetpool.engines.registry import connector_for

FIXTURES = Path(__file__).parent / "fixtures" / "ray"
REPO = Path(__file__).resolve().parents[2]
CATALOG = DeviceCatalog.builtin()
RAY_ADDRESS = os.environ.get("HETPOOL_TEST_RAY_ADDRESS", "")
HEAD = "hetpool-ray-head"
HEAD_ID = "2c8027b85e33325c753e317967017833bc5c839665ec948a5a256ed2"
GPU1_ID = "887fa65fc366aae6478af2349c044c8aa657b4a1d1f3179d5a707162"


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


Observed = tuple[dict[str, ObservedNode], InventoryObservation]


def _observe(nodes: str | dict, status: str | dict | None, overrides: dict[str, str] | None = None) -> Observed:
    nodes_reply = _fixture(nodes) if isinstance(nodes, str) else nodes
    status_reply = _fixture(status) if isinstance(status, str) else status
    obs = build_observation(nodes_reply, status_reply, CATALOG, overrides, _fixture("version.json"))
    return {n.name: n for n in obs.nodes}, obs


def _rows(reply: dict) -> list[dict]:
    return reply["data"]["result"]["result"]


# -- the resource convention ------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "accelerator_types", "model"),
    [
        # <CLASS>_<PRODUCT>
        ("GPU_H100", [], "nvidia-h100"),
        ("NPU_910B3", [], "ascend-910b3"),
        ("npu_910b4", [], "ascend-910b4"),
        ("DCU_K100", [], "hygon-k100"),
        ("XPU_P800", [], "kunlunxin-p800"),
        ("GPU_A100-80G", [], "nvidia-a100-80g"),
        # families shared by several models: the first in catalog order, as Slurm GRES do (warned)
        ("GPU_A100", [], "nvidia-a100-40g"),
        ("NPU_910B", [], "ascend-910b1"),
        # a catalog model or product name
        ("ascend-910b3", [], "ascend-910b3"),
        ("nvidia-a100-80g", [], "nvidia-a100-80g"),
        ("MLU370-X8", [], "cambricon-mlu370-x8"),
        # Ray's built-in accelerators + the node's accelerator type (ray.util.accelerators names)
        ("GPU", ["A100-80G"], "nvidia-a100-80g"),
        ("GPU", ["H20"], "nvidia-h20"),
        ("GPU", ["L40S"], "nvidia-l40s"),
        ("GPU", ["AMD-Instinct-MI300X-OAM"], "amd-mi300x"),
        ("NPU", ["Ascend910B4"], "ascend-910b4"),
        ("NPU", ["A100", "Ascend910B4"], "ascend-910b4"),  # the type of the NPU's class wins
        # accelerators the catalog does not know: placeholders, never dropped
        ("NPU", [], "unknown-ray-npu"),
        ("GPU", [], "unknown-ray-gpu"),
        ("TPU", ["TPU-V4"], "unknown-ray-tpu"),
        ("GPU_B200", [], "nvidia-b200"),  # a custom resource named after a catalog product
        ("GPU_X900", [], "unknown-ray-gpu-x900"),
        # not accelerators
        ("CPU", [], None),
        ("memory", [], None),
        ("object_store_memory", [], None),
        ("node:192.0.2.2", [], None),
        ("node:__internal_head__", [], None),
        ("accelerator_type:A100", [], None),
        ("NPU_group_0a803b9db437bbe42727a2d07f8502000000", [], None),
        ("NPU_group_0_0a803b9db437bbe42727a2d07f8502000000", [], None),
        ("bundle_group_0a803b9db437bbe42727a2d07f8502000000", [], None),
        ("weird_thing", [], None),
        ("64", [], None),  # a bare number is no product (cpu-x86-64 ends in -64)
    ],
)
def test_resource_convention(resource, accelerator_types, model):
    assert ResourceMapper(CATALOG).model_for(resource, accelerator_types) == model


def test_ambiguous_family_and_unknown_accelerators_warn_once():
    mapper = ResourceMapper(CATALOG)
    for _ in range(3):
        mapper.model_for("GPU_A100", [])
        mapper.model_for("NPU", [])
    assert len(mapper.warnings) == 2
    assert "nvidia-a100-40g, nvidia-a100-80g" in mapper.warnings[0] and "resource_models" in mapper.warnings[0]
    assert "unknown-ray-npu" in mapper.warnings[1] and "no accelerator type" in mapper.warnings[1]


def test_overrides_win_over_every_rule():
    mapper = ResourceMapper(CATALOG, parse_resource_models("GPU_A100=nvidia-a100-80g, npu=ascend-910b3,weird_thing=nvidia-t4"))
    assert mapper.model_for("GPU_A100", []) == "nvidia-a100-80g"
    assert mapper.model_for("NPU", []) == "ascend-910b3"
    assert mapper.model_for("weird_thing", []) == "nvidia-t4"
    assert mapper.warnings == []


@pytest.mark.parametrize("text", ["GPU_A100", "=nvidia-t4", "GPU="])
def test_bad_resource_models(text):
    with pytest.raises(ConnectorError, match="RESOURCE=MODEL"):
        parse_resource_models(text)


def test_camel_keys_match_the_recorded_load_report():
    # The dashboard camel-cases the report's keys; every exact name must map onto a recorded key.
    nodes, status = _fixture("nodes_busy.json"), _fixture("cluster_status_busy.json")
    report = status["data"]["clusterStatus"]["loadMetricsReport"]["usageByNode"]
    for row in _rows(nodes):
        keys = set(report[row["node_id"]])
        assert {camel_key(r) for r in row["resources_total"]} <= keys, row["node_name"]
    assert camel_key("GPU_H100") == "GPUH100" and camel_key("accelerator_type:A100") == "acceleratorType:A100"
    assert camel_key("node:__internal_head__") == "node:InternalHead"
    assert all(is_ignored_resource(r) for r in ("node:__internal_head__", "CPU_group_0_0a803b9db437bbe42727a2d07f8502000000"))


# -- nodes from recorded replies --------------------------------------------------------


def test_busy_cluster_from_recording():
    """Head with GPU_H100/NPU_910B3 and a job holding 2 GPU_H100; node gpu1 with GPU 2 +
    accelerator_type:A100, NPU 4 (2 reserved by a placement group), weird_thing 3, labels."""
    nodes, obs = _observe("nodes_busy.json", "cluster_status_busy.json")
    assert set(nodes) == {HEAD, "gpu1"}
    assert obs.connector == "ray" and SEES_USED in obs.sees
    head = nodes[HEAD]
    assert head.state == NodeState.READY and head.reason == ""
    assert head.devices == {"nvidia-h100": 4, "ascend-910b3": 8}
    assert head.used == {"nvidia-h100": 2, "ascend-910b3": 0}
    assert head.cpu_cores == 2 and head.memory_gb == pytest.approx(22.9, abs=0.1)  # Ray's `memory` resource, GiB
    assert head.labels == {"ray.io/node-id": HEAD_ID, NODE_ID_LABEL: HEAD_ID}
    assert head.extra["ray_head"] is True and head.extra["ray_node_ip"] == "192.0.2.2"
    gpu1 = nodes["gpu1"]
    assert gpu1.devices == {"nvidia-a100-40g": 2, "unknown-ray-npu": 4}
    assert gpu1.used == {"nvidia-a100-40g": 0, "unknown-ray-npu": 2}  # the placement group's reservation
    assert gpu1.cpu_cores == 1
    assert gpu1.labels["zone"] == "a" and gpu1.labels["hetpool.io/pool"] == "x" and gpu1.labels[NODE_ID_LABEL] == GPU1_ID
    assert any("'A100' matches nvidia-a100-40g, nvidia-a100-80g" in w for w in obs.warnings)
    assert any("'NPU' counted as unknown-ray-npu" in w for w in obs.warnings)
    assert obs.extra["ignored_resources"] == {"gpu1": ["weird_thing"]}
    assert obs.extra["resource_models"]["gpu1"] == {"GPU": "nvidia-a100-40g", "NPU": "unknown-ray-npu"}
    assert obs.extra["resources_total"]["GPU_H100"] == 4 and obs.extra["resources_used"]["GPU_H100"] == 2
    assert obs.extra["resources_total"]["CPU"] == 3 and "node:192.0.2.2" not in obs.extra["resources_total"]
    assert obs.extra["ray_version"] == "2.60.0" and obs.extra["alive_nodes"] == 2
    # Nothing that names a resource in node.extra: the sync guesses placeholder classes from it.
    assert "GPU" not in json.dumps(gpu1.extra) and "NPU" not in json.dumps(gpu1.extra)


def test_overrides_on_recording():
    nodes, obs = _observe("nodes_busy.json", "cluster_status_busy.json", {"gpu": "nvidia-a100-80g", "npu": "ascend-910b4"})
    assert nodes["gpu1"].devices == {"nvidia-a100-80g": 2, "ascend-910b4": 4}
    assert nodes["gpu1"].used == {"nvidia-a100-80g": 0, "ascend-910b4": 2}
    assert obs.warnings == []


def test_dead_nodes_from_recording():
    """gpu1 was SIGKILLed (GCS: health check failed) -> DOWN; gpu2 got SIGTERM -> removed."""
    nodes, obs = _observe("nodes_dead.json", "cluster_status_dead.json")
    assert set(nodes) == {HEAD, "gpu1"}
    gpu1 = nodes["gpu1"]
    assert gpu1.state == NodeState.DOWN and "health check failed" in gpu1.reason
    assert gpu1.devices == {"nvidia-a100-40g": 2, "unknown-ray-npu": 4} and gpu1.used == {}
    assert nodes[HEAD].used == {"nvidia-h100": 0, "ascend-910b3": 0}
    assert obs.extra["alive_nodes"] == 1 and obs.extra["dead_nodes"] == 2 and obs.extra["dead_nodes_removed"] == 1
    assert obs.extra["resources_total"] == {
        "CPU": 2.0,
        "GPU_H100": 4.0,
        "NPU_910B3": 8.0,
        "memory": 24608874496.0,
        "object_store_memory": 104857600.0,
    }


def test_a_dead_incarnation_of_a_live_name_is_dropped():
    reply = _fixture("nodes_dead.json")
    busy = _rows(_fixture("nodes_busy.json"))
    live_gpu1 = copy.deepcopy(next(r for r in busy if r["node_name"] == "gpu1"))
    live_gpu1["node_id"] = "ab" * 28  # a restarted raylet comes back with a new id
    _rows(reply).append(live_gpu1)
    nodes, obs = _observe(reply, None)
    assert nodes["gpu1"].state == NodeState.READY and nodes["gpu1"].labels[NODE_ID_LABEL] == "ab" * 28
    assert obs.extra["dead_nodes_removed"] == 2


def test_live_nodes_sharing_a_name_get_the_node_id():
    reply = _fixture("nodes_busy.json")
    for row in _rows(reply):
        row["node_name"] = "192.0.2.2"  # Ray's default name is the IP: two raylets on one host
    nodes, obs = _observe(reply, "cluster_status_busy.json")
    assert set(nodes) == {f"192.0.2.2-{HEAD_ID[:8]}", f"192.0.2.2-{GPU1_ID[:8]}"}
    assert nodes[f"192.0.2.2-{HEAD_ID[:8]}"].used["nvidia-h100"] == 2
    assert any("2 live nodes are named '192.0.2.2'" in w for w in obs.warnings)


def test_no_load_report_means_used_is_not_claimed():
    nodes, obs = _observe("nodes_busy.json", None)
    assert SEES_USED not in obs.sees and all(n.used == {} for n in nodes.values())
    assert any("devices in use are not read" in w for w in obs.warnings)
    status = _fixture("cluster_status_busy.json")
    del status["data"]["clusterStatus"]["loadMetricsReport"]["usageByNode"][GPU1_ID]
    nodes, obs = _observe("nodes_busy.json", status)
    assert SEES_USED in obs.sees and nodes["gpu1"].used == {} and nodes[HEAD].used["nvidia-h100"] == 2
    assert any("'gpu1' is not in the load report" in w for w in obs.warnings)


def test_colliding_camel_keys_are_not_read_and_fractions_round_up():
    reply = _fixture("nodes_busy.json")
    head = next(r for r in _rows(reply) if r["node_name"] == HEAD)
    head["resources_total"]["GPU_h100"] = 1.0  # prints as "GPUH100", like GPU_H100
    head["resources_total"]["ascend-910b4"] = 2.5
    status = _fixture("cluster_status_busy.json")
    status["data"]["clusterStatus"]["loadMetricsReport"]["usageByNode"][HEAD_ID]["ascend-910b4"] = [0.5, 2.5]
    nodes, obs = _observe(reply, status)
    assert nodes[HEAD].devices["nvidia-h100"] == 5 and nodes[HEAD].used["nvidia-h100"] == 0
    assert nodes[HEAD].devices["ascend-910b4"] == 2 and nodes[HEAD].used["ascend-910b4"] == 1
    assert any("print as one key 'GPUH100'" in w for w in obs.warnings)
    assert any("fractional total 2.5" in w for w in obs.warnings)


def test_truncated_and_partial_state_api_replies_warn():
    reply = _fixture("nodes_busy.json")
    reply["data"]["result"]["total"] = 20000
    reply["data"]["result"]["partial_failure_warning"] = "2 raylets did not answer"
    _, obs = _observe(reply, "cluster_status_busy.json")
    assert any("listed 2 of 20000 nodes" in w for w in obs.warnings)
    assert any("2 raylets did not answer" in w for w in obs.warnings)
    with pytest.raises(ConnectorError, match="unexpected shape"):
        build_observation({"data": {}}, None, CATALOG)


# -- the connector over HTTP (mock transport) -------------------------------------------


def _transport(status_code: int = 200, broken: str = "") -> httpx.MockTransport:
    replies = {
        "/api/version": _fixture("version.json"),
        "/api/v0/nodes": _fixture("nodes_busy.json"),
        "/api/cluster_status": _fixture("cluster_status_busy.json"),
    }

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == broken:
            return httpx.Response(status_code, text="Internal Server Error")
        assert request.headers.get("authorization") == "Bearer s3cret"
        return httpx.Response(200, json=replies[request.url.path])

    return httpx.MockTransport(handler)


def test_fetch_over_http():
    conn = RayConnector({"address": "head:8265/", "token": "s3cret"}, CATALOG, transport=_transport())
    obs = conn.fetch()
    assert conn.address == "http://head:8265"
    assert {n.name for n in obs.nodes} == {HEAD, "gpu1"} and obs.extra["address"] == "http://head:8265"


def test_non_200_names_the_url_and_a_failed_load_report_only_warns():
    conn = RayConnector({"address": "http://head:8265", "token": "s3cret"}, CATALOG, transport=_transport(500, "/api/v0/nodes"))
    with pytest.raises(ConnectorError, match=r"http://head:8265/api/v0/nodes\?detail=1&limit=10000 answered HTTP 500"):
        conn.fetch()
    conn = RayConnector({"address": "http://head:8265", "token": "s3cret"}, CATALOG, transport=_transport(404, "/api/cluster_status"))
    obs = conn.fetch()
    assert SEES_USED not in obs.sees and any("cluster_status answered HTTP 404" in w for w in obs.warnings)


def test_unreachable_dashboard_names_the_url():
    conn = RayConnector({"address": "http://127.0.0.1:9", "timeout_s": "2"}, CATALOG)
    with pytest.raises(ConnectorError, match=r"cannot read http://127\.0\.0\.1:9/api/version"):
        conn.fetch()


def test_config_errors_and_registry():
    with pytest.raises(ConnectorError, match="address"):
        RayConnector({}, CATALOG)
    with pytest.raises(ConnectorError, match="timeout_s"):
        RayConnector({"address": "http://h:8265", "timeout_s": "soon"}, CATALOG)
    conn = connector_for("ray", {"address": "http://h:8265", "resource_models": "NPU=ascend-910b3"}, CATALOG)
    assert isinstance(conn, RayConnector) and conn.kind == "ray" and conn.overrides == {"npu": "ascend-910b3"}


# -- a real Ray head (deploy/ray.sh) ----------------------------------------------------


def _wait_for(fetch: Callable[[], InventoryObservation], ok: Callable[[InventoryObservation], bool], timeout_s: float):
    """Polls until `ok`; returns (the last observation, seconds waited)."""
    start = time.monotonic()
    while True:
        obs = fetch()
        if ok(obs):
            return obs, time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            return obs, time.monotonic() - start
        time.sleep(0.5)


def _by_name(obs: InventoryObservation) -> dict[str, ObservedNode]:
    return {n.name: n for n in obs.nodes}


def _ray_sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "deploy" / "ray.sh"), *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def ray_connector() -> RayConnector:
    if not RAY_ADDRESS:
        pytest.skip("HETPOOL_TEST_RAY_ADDRESS not set (export HETPOOL_TEST_RAY_ADDRESS=$(deploy/ray.sh start))")
    conn = RayConnector({"address": RAY_ADDRESS, "timeout_s": "10"}, CATALOG)
    head = [n for n in conn.fetch().nodes if n.extra.get("ray_head")]
    if not head or "nvidia-h100" not in head[0].devices:
        pytest.skip(f"the head at {RAY_ADDRESS} was not started with deploy/ray.sh's default resources (GPU_H100, NPU_910B3)")
    # Start from a settled head: jobs of the module before (the Ray backend's tests) may still be
    # ending, and a device they hold when a test takes its "before" would be gone by its "after".
    _wait_for(conn.fetch, lambda o: not any(_head(o).used.values()), 60)
    return conn


def _head(obs: InventoryObservation) -> ObservedNode:
    return next(n for n in obs.nodes if n.extra.get("ray_head"))


def test_real_head_inventory(ray_connector):
    obs = ray_connector.fetch()
    head = _head(obs)
    assert head.name == HEAD and head.state == NodeState.READY
    assert head.devices == {"nvidia-h100": 4, "ascend-910b3": 8}
    assert head.cpu_cores == 2 and head.memory_gb > 0
    assert head.labels[NODE_ID_LABEL] == head.extra["ray_node_id"] == head.labels["ray.io/node-id"]
    assert obs.sees == RayConnector.sees  # the load report is there: used is read
    assert set(head.used) == {"nvidia-h100", "ascend-910b3"}
    assert not [w for w in obs.warnings if "GPU_H100" in w or "NPU_910B3" in w]
    assert obs.extra["ray_version"] and obs.extra["resources_total"]["GPU_H100"] >= 4


@pytest.fixture
def ray_job(ray_connector) -> Iterator[Callable[[dict], str]]:
    """Submits jobs through the Jobs REST API; stops and deletes them afterwards."""
    submitted: list[str] = []

    def submit(resources: dict) -> str:
        job_id = f"hetpool-test-{uuid.uuid4().hex[:8]}"
        body = {"entrypoint": "sleep 60", "entrypoint_num_cpus": 0, "entrypoint_resources": resources, "submission_id": job_id}
        resp = httpx.post(f"{RAY_ADDRESS}/api/jobs/", json=body, timeout=30)
        assert resp.status_code == 200, resp.text
        submitted.append(job_id)
        return job_id

    yield submit
    for job_id in submitted:
        url = f"{RAY_ADDRESS}/api/jobs/{job_id}"
        httpx.post(f"{url}/stop", timeout=30)
        for _ in range(60):  # a job is deletable once it has stopped
            if httpx.get(url, timeout=10).json().get("status") in ("STOPPED", "SUCCEEDED", "FAILED"):
                break
            time.sleep(0.5)
        # Ray's job manager may write the record back (FAILED, "Job supervisor actor died") just
        # after a delete that raced the supervisor's exit: delete until it stays gone.
        gone = 0
        for _ in range(40):
            if httpx.get(url, timeout=10).status_code == 404:
                gone += 1
                if gone >= 4:
                    break
            else:
                gone = 0
                httpx.delete(url, timeout=30)
            time.sleep(0.5)


def test_real_job_holding_resources_shows_as_used(ray_connector, ray_job):
    before = _head(ray_connector.fetch()).used
    ray_job({"GPU_H100": 3, "NPU_910B3": 1})
    want = {"nvidia-h100": before["nvidia-h100"] + 3, "ascend-910b3": before["ascend-910b3"] + 1}
    obs, waited = _wait_for(ray_connector.fetch, lambda o: _head(o).used == want, 30)
    assert _head(obs).used == want, f"after {waited:.1f}s"
    assert obs.extra["resources_used"]["GPU_H100"] >= 3


@pytest.fixture
def added_node(ray_connector) -> Iterator[str]:
    name = f"hetpool-test-{uuid.uuid4().hex[:6]}"
    yield name
    _ray_sh("remove-node", name)  # no-op when the test removed it already


def test_real_added_node_appears_and_removed_node_disappears(ray_connector, added_node):
    status = _ray_sh("status")
    if "head running" not in status.stdout:
        pytest.skip(f"the head at {RAY_ADDRESS} was not started by deploy/ray.sh on this host (status: {status.stdout.strip()!r})")
    result = _ray_sh("add-node", added_node, json.dumps({"GPU": 2, "accelerator_type:A100-80G": 1, "NPU_910B4": 2}), "hetpool.io/test=yes")
    assert result.returncode == 0, result.stderr
    # A raylet joins in ~7 s on 2 cores.
    obs, waited = _wait_for(ray_connector.fetch, lambda o: added_node in _by_name(o), 45)
    node = _by_name(obs).get(added_node)
    assert node is not None, f"{added_node} not listed after {waited:.1f}s; warnings: {obs.warnings}"
    assert node.state == NodeState.READY and node.devices == {"nvidia-a100-80g": 2, "ascend-910b4": 2}
    assert node.labels["hetpool.io/test"] == "yes" and node.cpu_cores == 1
    assert not node.extra["ray_head"]

    result = _ray_sh("remove-node", added_node)
    assert result.returncode == 0, result.stderr
    # SIGTERM -> the raylet unregisters: DEAD "Expected termination" at once (within ~1 s).
    obs, waited = _wait_for(ray_connector.fetch, lambda o: added_node not in _by_name(o), 30)
    assert added_node not in _by_name(obs), f"still listed after {waited:.1f}s"
    assert _head(obs).state == NodeState.READY
