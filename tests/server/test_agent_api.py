"""Agents through the API: registration, heartbeats, offline nodes and abnormal devices
are kept out of scheduling, every change of liveness or health is audited."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.services.nodes import mark_offline

NODE = {
    "name": "agent-gpu-1",
    "cluster": "bj-train",
    "cpu_cores": 32,
    "memory_gb": 256,
    "devices": [{"model": "nvidia-h800", "count": 2}],
    # the same stack as the demo's H800 node, so it may join the bj-h800 pool
    "stack": {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}, "frameworks": {"pytorch": "2.5.1", "vllm": "0.6.4.post1"}},
}
H800_TASK = {
    "name": "needs-h800",
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "image": "registry.local/pt:2.5",
    "framework": {"name": "pytorch", "version": ">=2.4"},
    "per_worker": {"devices": {"class": "gpu", "models": ["nvidia-h800"], "count": 1}},
    "exclude_nodes": ["gpu-h01"],  # only the agent's node is left
}


def _register(api: TestClient) -> None:
    response = api.post("/api/v1/agent/register", json={"node": NODE, "pool": "bj-h800", "agent_version": "0.1.0"})
    assert response.status_code == 200, response.text


def test_registered_node_joins_its_pool_and_reports_ready(demo: TestClient) -> None:
    _register(demo)
    assert demo.get("/api/v1/objects/pools/bj-h800").json()["nodes"] == ["gpu-h01", "agent-gpu-1"]
    [status] = demo.get("/api/v1/nodes/status").json()
    assert status["node"] == "agent-gpu-1" and status["state"] == "ready"
    plan = demo.post("/api/v1/tasks/plan", json=H800_TASK).json()
    assert plan["feasible"] and plan["placements"][0]["node"] == "agent-gpu-1"


def test_abnormal_device_is_never_used(demo: TestClient) -> None:
    _register(demo)
    beat = {"node": "agent-gpu-1", "devices": [{"index": 0, "model": "nvidia-h800", "health": "abnormal"}, {"index": 1, "model": "nvidia-h800"}]}
    assert demo.post("/api/v1/agent/heartbeat", json=beat).status_code == 200
    plan = demo.post("/api/v1/tasks/plan", json=H800_TASK).json()
    assert plan["feasible"] and plan["placements"][0]["devices"] == [1]
    two = demo.post(
        "/api/v1/tasks/plan", json={**H800_TASK, "per_worker": {"devices": {"class": "gpu", "models": ["nvidia-h800"], "count": 2}}}
    ).json()
    assert two["feasible"] is False and two["fits_when_idle"] is False  # one of two devices is broken
    events = demo.get("/api/v1/audit", params={"object_id": "agent-gpu-1", "action": "node.status"}).json()
    assert events[-1]["after"] == {"state": "ready", "abnormal": [0]}


def test_silent_node_goes_offline_and_takes_no_work(ctx: ServiceContext, demo: TestClient) -> None:
    _register(demo)
    ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
    assert mark_offline(ctx) == ["agent-gpu-1"]
    assert demo.get("/api/v1/nodes/status").json()[0]["state"] == "offline"
    plan = demo.post("/api/v1/tasks/plan", json=H800_TASK).json()
    assert plan["feasible"] is False and plan["reasons"].get("node unhealthy or not schedulable") == 1
    # A heartbeat brings it back.
    assert demo.post("/api/v1/agent/heartbeat", json={"node": "agent-gpu-1"}).json()["state"] == "ready"
    assert demo.post("/api/v1/tasks/plan", json=H800_TASK).json()["feasible"] is True


def test_bad_agent_input_is_rejected_clearly(demo: TestClient) -> None:
    unknown = demo.post("/api/v1/agent/heartbeat", json={"node": "ghost"})
    assert unknown.status_code == 404 and "not registered" in unknown.json()["message"]
    _register(demo)
    bad = demo.post("/api/v1/agent/heartbeat", json={"node": "agent-gpu-1", "devices": [{"index": 0, "health": "melted"}]})
    assert bad.status_code == 422 and "health" in bad.json()["message"]
    no_pool = demo.post("/api/v1/agent/register", json={"node": NODE, "pool": "nope"})
    assert no_pool.status_code == 422 and "unknown pool 'nope'" in no_pool.json()["message"]
    bad_node = demo.post("/api/v1/agent/register", json={"node": {**NODE, "cpu_cores": 0}})
    assert bad_node.status_code == 422 and "cpu_cores" in bad_node.json()["message"]


def test_unknown_devices_are_registered_as_placeholder_models(demo: TestClient) -> None:
    model = {"name": "unknown-nvidia-b300", "vendor": "nvidia", "class": "gpu", "display_name": "NVIDIA B300", "memory_gb": 270}
    node = {**NODE, "name": "agent-b300", "devices": [{"model": "unknown-nvidia-b300", "count": 8}]}
    response = demo.post("/api/v1/agent/register", json={"node": node, "models": [model]})
    assert response.status_code == 200, response.text
    stored = demo.get("/api/v1/objects/devicemodels/unknown-nvidia-b300").json()
    assert stored["verified"] is False and stored["memory_gb"] == 270
    assert demo.get("/api/v1/objects/nodes/agent-b300").json()["devices"] == [{"model": "unknown-nvidia-b300", "count": 8, "islands": []}]
    # An operator describes it properly; the agent's next registration does not overwrite that.
    described = {**model, "kind": "DeviceModel", "memory_gb": 288, "verified": True, "display_name": "NVIDIA B300 SXM"}
    assert demo.post("/api/v1/apply", json={"documents": [described]}).status_code == 200
    assert demo.post("/api/v1/agent/register", json={"node": node, "models": [model]}).status_code == 200
    assert demo.get("/api/v1/objects/devicemodels/unknown-nvidia-b300").json()["memory_gb"] == 288
    # An agent cannot redefine a catalog model.
    hijack = demo.post("/api/v1/agent/register", json={"node": NODE, "models": [{**model, "name": "nvidia-h800"}]})
    assert hijack.status_code == 422 and "models[0].name" in hijack.json()["message"]


def test_agents_without_a_pool_form_pools_of_identical_devices_and_stacks(demo: TestClient) -> None:
    cuda = {"driver": "535.104.05", "runtime": {"name": "cuda", "version": "12.2"}}
    base = {"cluster": "bj-train", "cpu_cores": 16, "memory_gb": 64, "devices": [{"model": "nvidia-t4", "count": 4}]}
    for name, stack in (("t4-a", cuda), ("t4-b", {**cuda, "os": "Ubuntu 22.04.4 LTS"}), ("t4-c", {**cuda, "driver": "550.54.15"})):
        assert demo.post("/api/v1/agent/register", json={"node": {**base, "name": name, "stack": stack}}).status_code == 200
    pools = {p["name"]: p for p in demo.get("/api/v1/objects/pools").json()}
    # The OS string does not split a pool; a different driver does.
    assert pools["bj-train-nvidia-t4"]["nodes"] == ["t4-a", "t4-b"] and pools["bj-train-nvidia-t4-2"]["nodes"] == ["t4-c"]
    assert pools["bj-train-nvidia-t4"]["labels"] == {"hetpool.io/auto-pool": "true", "hetpool.io/source": "agent"}
    # An operator's pool takes nodes from the automatic one, which goes when empty.
    mine = {"kind": "Pool", "name": "t4-inference", "cluster": "bj-train", "model": "nvidia-t4", "nodes": ["t4-c"]}
    assert demo.post("/api/v1/apply", json={"documents": [mine]}).status_code == 200
    pools = {p["name"]: p for p in demo.get("/api/v1/objects/pools").json()}
    assert "bj-train-nvidia-t4-2" not in pools and pools["t4-inference"]["nodes"] == ["t4-c"]
    # Re-registering keeps the node where the operator put it.
    assert demo.post("/api/v1/agent/register", json={"node": {**base, "name": "t4-c", "stack": {**cuda, "driver": "550.54.15"}}}).status_code == 200
    assert {p["name"] for p in demo.get("/api/v1/objects/pools").json() if "t4-c" in p["nodes"]} == {"t4-inference"}
