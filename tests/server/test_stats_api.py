"""GET /api/v1/stats/capacity and /stats/workload: device counts that match the demo
inventory, queues and waits, utilisation over windows, and tenant scoping of every
task-derived number (capacity is the same for every inventory reader)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hetpool.server.db.models import ConnectorSyncRow
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.stats import percentile
from hetpool.server.workers.loop import run_pass
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task
from tests.server.test_access_api import make_user

DEMO_POOLS = {
    "bj-a100-80g": 16,
    "bj-h800": 8,
    "sh-910b2-cann800": 16,
    "sh-910b2-cann80rc1": 8,
    "sh-910b3-mindspore": 8,
    "sh-310p-infer": 8,
    "gz-cpu": 4,
    "gz-bluefield3": 2,
}
DEMO_CLASSES = {"gpu": 24, "npu": 40, "cpu": 4, "dpu": 2}


def submit(api: TestClient, example: str, **fields) -> str:
    response = api.post("/api/v1/tasks", json={**example_task(example), "command": "true", **fields})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def by(rows: list[dict], key: str) -> dict[str, dict]:
    return {r[key]: r for r in rows}


def test_capacity_matches_the_demo_inventory(demo: TestClient) -> None:
    body = demo.get("/api/v1/stats/capacity").json()
    pools = by(body["pools"], "pool")
    assert {name: p["total"] for name, p in pools.items()} == DEMO_POOLS
    assert all(p["idle"] == p["total"] and p["busy"] == p["abnormal"] == p["offline"] == 0 for p in pools.values())
    assert {c["class"]: c["total"] for c in body["classes"]} == DEMO_CLASSES
    assert body["totals"]["total"] == sum(DEMO_POOLS.values()) and body["totals"]["utilisation"] == 0
    assert body["nodes"] == {"total": 12, "attention": []}
    assert [b["up"] for b in body["backends"]] == [True, True, True]


def test_admitted_work_is_busy_and_abnormal_or_offline_devices_are_counted(ctx: ServiceContext, demo: TestClient) -> None:
    submit(demo, "mindspore-ascend.yaml")  # 8 NPUs on sh-910b3-mindspore
    schedule_once(ctx)
    node = {"name": "agent-x", "cluster": "bj-train", "cpu_cores": 8, "memory_gb": 32, "devices": [{"model": "nvidia-t4", "count": 2}]}
    assert demo.post("/api/v1/agent/register", json={"node": node}).status_code == 200
    beat = {"node": "agent-x", "devices": [{"index": 1, "model": "nvidia-t4", "health": "abnormal"}]}
    assert demo.post("/api/v1/agent/heartbeat", json=beat).status_code == 200
    body = demo.get("/api/v1/stats/capacity").json()
    pools = by(body["pools"], "pool")
    assert pools["sh-910b3-mindspore"]["busy"] == 8 and pools["sh-910b3-mindspore"]["idle"] == 0
    t4 = next(p for p in body["pools"] if p["model"] == "nvidia-t4")
    assert (t4["idle"], t4["abnormal"]) == (1, 1)
    attention = by(body["nodes"]["attention"], "node")
    assert attention["agent-x"]["abnormal_devices"] == [1] and attention["agent-x"]["cluster"] == "bj-train"

    from hetpool.server.services.nodes import mark_offline

    ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
    mark_offline(ctx)
    t4 = next(p for p in demo.get("/api/v1/stats/capacity").json()["pools"] if p["model"] == "nvidia-t4")
    assert (t4["offline"], t4["abnormal"], t4["idle"]) == (1, 1, 0)


def test_a_failed_connector_sync_marks_the_backend_down(ctx: ServiceContext, demo: TestClient) -> None:
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        session.add(ConnectorSyncRow(cluster="gz-general", connector="slurm", last_attempt_at=now, ok=False, error="connection refused", summary={}))
    backends = by(demo.get("/api/v1/stats/capacity").json()["backends"], "cluster")
    assert backends["gz-general"]["up"] is False and "connection refused" in backends["gz-general"]["reason"]
    assert backends["bj-train"]["up"] is True


def test_queues_waits_and_utilisation(ctx: ServiceContext, demo: TestClient) -> None:
    submit(demo, "mindspore-ascend.yaml")
    ctx.clock.advance(600)
    schedule_once(ctx)  # admitted after 10 minutes; holds 8 NPUs from now on
    second = submit(demo, "mindspore-ascend.yaml", name="pangu-2")  # the pool is full: waits
    ctx.clock.advance(6 * 3600)
    schedule_once(ctx)
    body = demo.get("/api/v1/stats/workload").json()
    assert body["waiting"] == 1 and body["states"]["queued"] == 1 and body["states"]["admitted"] == 1
    pool = by(body["queues"]["by_pool"], "name")["sh-910b3-mindspore"]
    assert pool["waiting"] == 1 and pool["oldest_wait_s"] == 6 * 3600
    assert pool["admitted"] == 1 and pool["p50_wait_s"] == pool["p90_wait_s"] == 600
    assert by(body["queues"]["by_task_type"], "name")["training"]["waiting"] == 1
    assert by(body["queues"]["by_queue"], "name")["default"]["waiting"] == 1
    assert [t["id"] for t in body["longest_waiting"]] == [second] and body["longest_waiting"][0]["pools"] == ["sh-910b3-mindspore"]
    assert "command" not in body["longest_waiting"][0]
    util = by(body["utilisation"]["pools"], "pool")["sh-910b3-mindspore"]
    assert util["24h"] == pytest.approx(6 / 24) and util["7d"] == pytest.approx(6 / (7 * 24), abs=1e-4)
    assert util["24h_device_hours"] == pytest.approx(48)
    npu = by(body["utilisation"]["classes"], "class")["npu"]
    assert npu["24h_device_hours"] == pytest.approx(48) and npu["24h"] == pytest.approx(48 / (40 * 24), abs=1e-4)
    hourly = body["utilisation"]["hourly"]["classes"]["npu"]
    assert len(hourly) == 24 and hourly[-1] == pytest.approx(8 / 40) and hourly[0] == 0
    # The wait of the first task falls out of a 24 h window after a day, not out of 7 days.
    ctx.clock.advance(24 * 3600)
    assert by(demo.get("/api/v1/stats/workload").json()["queues"]["by_pool"], "name")["sh-910b3-mindspore"]["admitted"] == 0
    week = demo.get("/api/v1/stats/workload", params={"window": "7d"}).json()
    assert by(week["queues"]["by_pool"], "name")["sh-910b3-mindspore"]["admitted"] == 1


def test_task_numbers_are_scoped_to_the_callers_tenants(ctx: ServiceContext, demo: TestClient) -> None:
    submit(demo, "data-prep.yaml")  # infra/data/etl
    submit(demo, "mindspore-ascend.yaml")  # ai-lab/cv/detection
    etl = make_user(demo, "etl", ("viewer", "infra"))
    mine = etl.get("/api/v1/stats/workload").json()
    assert mine["scoped"] is True and mine["waiting"] == 1 and mine["states"]["queued"] == 1
    assert [t["tenant"] for t in mine["longest_waiting"]] == ["infra/data/etl"]
    assert by(mine["queues"]["by_pool"], "name")["sh-910b3-mindspore"]["waiting"] == 0
    everything = demo.get("/api/v1/stats/workload").json()
    assert everything["scoped"] is False and everything["waiting"] == 2
    # Capacity is not tenant data: the same for every inventory reader.
    assert etl.get("/api/v1/stats/capacity").json()["pools"] == demo.get("/api/v1/stats/capacity").json()["pools"]
    run_pass(ctx, (schedule_once,))
    assert etl.get("/api/v1/stats/workload").json()["states"]["admitted"] == 1


def test_who_may_read_and_bad_windows(demo: TestClient) -> None:
    auditor = make_user(demo, "audrey", ("auditor", None))
    for path in ("/api/v1/stats/capacity", "/api/v1/stats/workload"):
        response = auditor.get(path)
        assert response.status_code == 403 and "permission denied" in response.json()["message"]
    assert TestClient(demo.app).get("/api/v1/stats/capacity").status_code == 401
    bad = demo.get("/api/v1/stats/workload", params={"window": "1y"})
    assert bad.status_code == 422 and bad.json()["message"].startswith("query.window")


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 0.5) is None
    assert percentile([5.0], 0.9) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([10.0, 0.0, 20.0], 0.9) == pytest.approx(18.0)
