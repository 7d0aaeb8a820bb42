"""The scheduler's database view: the live snapshot kept between cycles (cluster_state) and
learned runtimes."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import update

from hetpool.server.db.models import TaskRow
from hetpool.server.services.cluster_state import cluster_state, live_snapshot
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.sched_state import learned_runtimes, running_tasks
from hetpool.server.workers.loop import run_pass
from tests.server.helpers import drive_until, example_task, task_state


def _fresh(ctx: ServiceContext):
    """The snapshot built from scratch: by a context with an empty cache, on the same database."""
    other = ServiceContext(settings=ctx.settings, db=ctx.db, clock=ctx.clock)
    with ctx.db.transaction() as session:
        return live_snapshot(other, session)


def _synced(ctx: ServiceContext):
    """The cached snapshot brought up to date, as the next cycle would see it."""
    with ctx.db.transaction() as session:
        return live_snapshot(ctx, session)


def _same(a, b) -> None:
    np.testing.assert_allclose(a.free_cpu, b.free_cpu)
    np.testing.assert_allclose(a.free_mem, b.free_mem)
    np.testing.assert_allclose(a.dev_free.data, b.dev_free.data)
    np.testing.assert_array_equal(a.row_free_whole, b.row_free_whole)
    np.testing.assert_array_equal(a.pool_free_whole, b.pool_free_whole)


def test_snapshot_is_updated_incrementally_between_cycles(ctx: ServiceContext, demo: TestClient) -> None:
    sleeper = {**example_task("pytorch24-npu.yaml"), "command": "sleep 30"}
    first = demo.post("/api/v1/tasks", json=sleeper).json()["id"]
    drive_until(ctx, lambda: task_state(demo, first) == "running")
    cache = cluster_state(ctx)
    assert cache.live_rebuilds == 1
    _same(_synced(ctx), _fresh(ctx))
    second = demo.post("/api/v1/tasks", json={**example_task("data-prep.yaml"), "command": "sleep 30"}).json()["id"]
    drive_until(ctx, lambda: task_state(demo, second) == "running")
    demo.post(f"/api/v1/tasks/{first}/cancel")
    drive_until(ctx, lambda: task_state(demo, first) == "cancelled")
    demo.post("/api/v1/tasks", json=example_task("data-prep.yaml"))
    run_pass(ctx)
    assert cache.live_rebuilds == 1  # workers came and went: applied in place, not rebuilt
    _same(_synced(ctx), _fresh(ctx))
    # An inventory change rebuilds it.
    demo.post(
        "/api/v1/apply",
        json={
            "documents": [
                {
                    "kind": "Pool",
                    "name": "gz-cpu",
                    "cluster": "gz-general",
                    "model": "cpu-x86-64",
                    "nodes": ["cpu-01", "cpu-02"],
                    "price_per_hour": 0.7,
                }
            ]
        },
    )
    fourth = demo.post("/api/v1/tasks", json=example_task("data-prep.yaml")).json()["id"]
    drive_until(ctx, lambda: task_state(demo, fourth) == "succeeded")
    assert cache.live_rebuilds == 2
    demo.post(f"/api/v1/tasks/{second}/cancel")
    drive_until(ctx, lambda: task_state(demo, second) == "cancelled")


def test_runtime_is_learned_per_template_and_sets_expected_ends(ctx: ServiceContext, demo: TestClient) -> None:
    ids = [demo.post("/api/v1/tasks", json={**example_task("data-prep.yaml"), "name": f"prep-{i}"}).json()["id"] for i in range(3)]
    drive_until(ctx, lambda: all(task_state(demo, i) == "succeeded" for i in ids))
    start = ctx.clock.now()
    with ctx.db.transaction() as session:
        for i, task_id in enumerate(ids):  # recorded runs of 10, 20 and 30 minutes
            session.execute(
                update(TaskRow).where(TaskRow.id == task_id).values(started_at=start, finished_at=start + timedelta(minutes=10 * (i + 1)))
            )
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        assert learned_runtimes(session, inv) == {"data-prep": 1200.0}
    waiting = {**example_task("data-prep.yaml"), "name": "prep-next", "command": "sleep 30"}
    running_id = demo.post("/api/v1/tasks", json=waiting).json()["id"]
    drive_until(ctx, lambda: task_state(demo, running_id) == "running")
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        [current] = running_tasks(session, inv, learned_runtimes(session, inv), ctx.clock.now())
    assert current.expected_end is not None
    assert abs((current.expected_end - current.started_at).total_seconds() - 1200.0) < 1
    demo.post(f"/api/v1/tasks/{running_id}/cancel")
    drive_until(ctx, lambda: task_state(demo, running_id) == "cancelled")


def test_measured_history_overrides_relative_performance(ctx: ServiceContext, demo: TestClient) -> None:
    from hetpool.catalog.devices import DeviceCatalog
    from hetpool.core.inventory import TaskType
    from hetpool.server.services.sched_state import apply_measured, measured_performance

    base = {**example_task("batch-inference.yaml"), "any_of": []}
    runs = {"ascend-910b2": 10, "ascend-310p": 30}  # minutes per run, 3 runs each
    ids = {}
    for model, minutes in runs.items():
        for i in range(3):
            task = {
                **base,
                "name": f"b-{model}-{i}",
                "per_worker": {**base["per_worker"], "devices": {"class": "npu", "models": [model], "count": 1}},
            }
            ids[demo.post("/api/v1/tasks", json=task).json()["id"]] = minutes
    drive_until(ctx, lambda: all(task_state(demo, i) == "succeeded" for i in ids))
    start = ctx.clock.now()
    with ctx.db.transaction() as session:
        for task_id, minutes in ids.items():
            session.execute(update(TaskRow).where(TaskRow.id == task_id).values(started_at=start, finished_at=start + timedelta(minutes=minutes)))
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        measured = measured_performance(session, inv)
        anchor = DeviceCatalog.builtin().get("ascend-910b2").perf_for(TaskType.BATCH_INFERENCE)
        assert measured["ascend-910b2"] == {TaskType.BATCH_INFERENCE: round(anchor, 4)}
        assert measured["ascend-310p"] == {TaskType.BATCH_INFERENCE: round(anchor / 3, 4)}
        inv = apply_measured(inv, measured)
        assert inv.catalog.get("ascend-310p").perf_for(TaskType.BATCH_INFERENCE) == round(anchor / 3, 4)
        # Other task types keep the catalog's figure.
        assert inv.catalog.get("ascend-310p").perf_for(TaskType.INFERENCE) == DeviceCatalog.builtin().get("ascend-310p").perf_for(TaskType.INFERENCE)
