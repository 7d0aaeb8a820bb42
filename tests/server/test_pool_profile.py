"""`describe pool` through the API: the capability profile on the demo inventory."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.services.nodes import mark_offline


def test_profile_shows_features_counts_task_types_frameworks_substitutes(demo: TestClient) -> None:
    pools = demo.get("/api/v1/objects/pools").json()
    gpu_pool = next(p for p in pools if p["model"] == "nvidia-h800")
    profile = demo.get(f"/api/v1/pools/{gpu_pool['name']}/profile").json()
    assert profile["profile"]["model"] == "nvidia-h800" and "fp8" in profile["profile"]["features"]
    nodes = demo.get("/api/v1/objects/nodes").json()
    total = sum(g["count"] for n in nodes if n["name"] in gpu_pool["nodes"] for g in n["devices"] if g["model"] == "nvidia-h800")
    assert profile["devices"] == {"total": total, "idle": total, "busy": 0, "abnormal": 0, "offline": 0}
    types = {t["type"]: t for t in profile["task_types"]}
    assert types["training"]["ok"] and types["offload"]["ok"] is False and "do not take offload" in types["offload"]["why"]
    frameworks = {f["framework"]: f for f in profile["frameworks"]}
    assert frameworks["pytorch"]["with_image_ok"] is True and frameworks["pytorch"]["with_image_status"] == "compatible"
    assert frameworks["mindspore"]["with_image_ok"] is False and frameworks["mindspore"]["why"]
    subs = {s["model"]: s for s in profile["substitutes_for"]}
    assert subs and all(s["relative"]["training"] > 0 for s in subs.values())
    assert demo.get("/api/v1/pools/nope/profile").status_code == 404


def test_profile_counts_busy_abnormal_and_offline_devices(ctx: ServiceContext, demo: TestClient) -> None:
    node = {"name": "agent-a", "cluster": "bj-train", "cpu_cores": 16, "memory_gb": 64, "devices": [{"model": "nvidia-t4", "count": 4}]}
    pool = {"kind": "Pool", "name": "t4-agents", "cluster": "bj-train", "model": "nvidia-t4", "nodes": ["agent-a"]}
    assert demo.post("/api/v1/agent/register", json={"node": node}).status_code == 200
    assert demo.post("/api/v1/apply", json={"documents": [pool]}).status_code == 200
    beat = {"node": "agent-a", "devices": [{"index": 2, "model": "nvidia-t4", "health": "abnormal"}]}
    assert demo.post("/api/v1/agent/heartbeat", json=beat).status_code == 200
    profile = demo.get("/api/v1/pools/t4-agents/profile").json()
    assert profile["devices"] == {"total": 4, "idle": 3, "busy": 0, "abnormal": 1, "offline": 0}
    types = {t["type"]: t for t in profile["task_types"]}
    assert types["inference"]["ok"] is True
    ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
    assert mark_offline(ctx) == ["agent-a"]
    offline = demo.get("/api/v1/pools/t4-agents/profile").json()
    assert offline["devices"] == {"total": 4, "idle": 0, "busy": 0, "abnormal": 1, "offline": 3}
    assert offline["nodes"][0]["state"] == "offline"
