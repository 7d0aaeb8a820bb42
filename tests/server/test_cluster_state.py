"""The cluster-state cache (services/cluster_state.py): one inventory revision that every
write moves on, including a delete of the last object followed by a create (SQLite reuses
the deleted rowid), and snapshots that no thread changes under another."""

from __future__ import annotations

import threading

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import text

from hetpool.server.services.cluster_state import cluster_state, inventory_revision, live_snapshot
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.loop import run_pass
from tests.server.helpers import drive_until, example_task, task_state

SMALL_TASK = {"tenant": "ai-lab/nlp/llm-sft", "template": "llm-serving", "command": "sleep 1"}


def _node(name: str) -> dict:
    return {"kind": "Node", "name": name, "cluster": "gz-general", "cpu_cores": 8, "memory_gb": 32}


def _template(name: str) -> dict:
    return {
        "kind": "TaskTemplate",
        "name": name,
        "type": "batch-inference",
        "defaults": {"workers": 1, "per_worker": {"devices": {"class": "npu", "count": 1}, "cpu": 4, "memory_gb": 16}},
    }


def _revision(ctx: ServiceContext) -> int:
    with ctx.db.transaction() as session:
        return inventory_revision(session)


def _live(ctx: ServiceContext):
    with ctx.db.transaction() as session:
        return live_snapshot(ctx, session)


def test_deleting_the_last_object_and_creating_another_is_seen_by_the_scheduler(ctx: ServiceContext, demo: TestClient) -> None:
    assert demo.post("/api/v1/apply", json={"documents": [_node("probe-a")]}).status_code == 200
    run_pass(ctx)  # the scheduler's cycle caches the live snapshot (probe-a is the newest row)
    assert "probe-a" in _live(ctx).node_by_name
    assert demo.delete("/api/v1/objects/Node/probe-a").status_code == 204
    assert demo.post("/api/v1/apply", json={"documents": [_node("probe-b")]}).status_code == 200
    snap = _live(ctx)
    assert "probe-a" not in snap.node_by_name and "probe-b" in snap.node_by_name


def test_deleting_the_last_template_and_creating_another_is_seen_by_submit(demo: TestClient) -> None:
    assert demo.post("/api/v1/apply", json={"documents": [_template("probe-a")]}).status_code == 200
    assert demo.post("/api/v1/tasks", json={**SMALL_TASK, "name": "warm"}).status_code == 201
    assert demo.delete("/api/v1/objects/TaskTemplate/probe-a").status_code == 204
    assert demo.post("/api/v1/apply", json={"documents": [_template("probe-b")]}).status_code == 200
    created = demo.post("/api/v1/tasks", json={**SMALL_TASK, "name": "new-template", "template": "probe-b"})
    assert created.status_code == 201, created.text
    gone = demo.post("/api/v1/tasks", json={**SMALL_TASK, "name": "old-template", "template": "probe-a"})
    assert gone.status_code == 422 and "unknown template 'probe-a'" in gone.json()["message"]


def test_every_inventory_write_moves_the_revision_and_nothing_else_does(ctx: ServiceContext, demo: TestClient) -> None:
    seen = [_revision(ctx)]

    def moved() -> bool:
        seen.append(_revision(ctx))
        return seen[-1] > seen[-2]

    assert demo.post("/api/v1/apply", json={"documents": [_node("probe-a")]}).status_code == 200
    assert moved()  # create
    assert demo.post("/api/v1/apply", json={"documents": [_node("probe-a")]}).status_code == 200
    assert not moved()  # unchanged: no write
    assert demo.post("/api/v1/apply", json={"documents": [{**_node("probe-a"), "cpu_cores": 16}]}).status_code == 200
    assert moved()  # update
    assert demo.post("/api/v1/agent/heartbeat", json={"node": "probe-a"}).status_code == 200
    assert demo.post("/api/v1/tasks", json={**SMALL_TASK, "name": "not-inventory"}).status_code == 201
    assert not moved()  # liveness and tasks are not inventory
    with ctx.db.transaction() as session:  # a hand edit, past every code path
        session.execute(text("UPDATE inventory_objects SET generation = generation + 1 WHERE name = 'probe-a'"))
    assert moved()
    assert demo.delete("/api/v1/objects/Node/probe-a").status_code == 204
    assert moved()  # delete


def test_snapshots_handed_out_are_private_copies_under_concurrent_use(ctx: ServiceContext, demo: TestClient) -> None:
    sleeper = {**example_task("data-prep.yaml"), "command": "sleep 30"}
    task = demo.post("/api/v1/tasks", json=sleeper).json()["id"]
    drive_until(ctx, lambda: task_state(demo, task) == "running")
    expected = _live(ctx)
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(20):
                snap = _live(ctx)
                np.testing.assert_allclose(snap.free_cpu, expected.free_cpu)
                snap.free_cpu[:] = -1.0  # a caller may change its copy: nobody else sees it
                snap.dev_free.data[:] = 0.0
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    np.testing.assert_allclose(_live(ctx).dev_free.data, expected.dev_free.data)
    assert cluster_state(ctx).live_rebuilds == 1
    demo.post(f"/api/v1/tasks/{task}/cancel")
    drive_until(ctx, lambda: task_state(demo, task) == "cancelled")
