"""The simulator and the live server make the same decisions on the same scenario —
they call the same `run_cycle` (DESIGN.md: there is no second scheduler)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select

from hetpool.server.db.models import TaskRow
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.task_planning import resolve_task_spec
from hetpool.server.services.task_views import placements_of
from hetpool.server.workers.scheduler import schedule_once
from hetpool.sim.engine import Simulator
from hetpool.sim.trace import TraceTask
from tests.server.helpers import example_task


def test_simulated_and_live_scheduling_place_tasks_identically(ctx: ServiceContext, demo: TestClient) -> None:
    names = [
        "pytorch-ddp-training.yaml",
        "llm-inference.yaml",
        "mindspore-ascend.yaml",
        "batch-inference.yaml",
        "pytorch24-npu.yaml",
        "data-prep.yaml",
    ]
    docs = [example_task(n) for n in names]
    docs += [{**example_task("pytorch24-npu.yaml"), "name": f"pt24-extra-{i}"} for i in range(3)]  # more than fits
    for doc in docs:
        assert demo.post("/api/v1/tasks", json=doc).status_code == 201
    schedule_once(ctx)  # the live scheduler: one cycle over everything queued

    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        rows = session.execute(select(TaskRow)).scalars().all()
        live = {r.id: sorted((p.node, p.pool, tuple(p.device_indices)) for p in placements_of(session, r)) if r.attempt else [] for r in rows}
        trace = [TraceTask(r.id, 0.0, resolve_task_spec(inv, {k: v for k, v in r.spec.items() if k != "kind"}), reference_s=3600.0) for r in rows]
        models = {m.name: m for m in inv.catalog.all()}
        sim = Simulator(list(inv.clusters.values()), list(inv.nodes.values()), list(inv.pools.values()), models, ctx.compat.check)
    # Stop the clock right after the first cycle: only its decisions are compared.
    sim.config.max_time_s = 1.0
    result = sim.run(trace)
    simulated = {task_id: sorted(out.placements) for task_id, out in result.outcomes.items()}
    assert simulated == live
    assert sum(1 for p in live.values() if p) >= 6 and any(not p for p in live.values())  # some fit, some wait
