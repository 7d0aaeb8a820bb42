"""The simulator and the live server make the same decisions on the same scenario —
they call the same `run_cycle` (DESIGN.md: there is no second scheduler)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select

from hetpool.server.db.models import TaskRow
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.quota import quota_book
from hetpool.server.services.sched_state import running_tasks
from hetpool.server.services.task_planning import resolve_task_spec
from hetpool.server.services.task_views import placements_of
from hetpool.server.workers.scheduler import schedule_once
from hetpool.sim.engine import SimConfig, Simulator
from hetpool.sim.report import summarize
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


# Two teams in one cohort on one 8-A100 node: org/b may borrow 2 of org/a's idle 4.
CUDA = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}}
QUOTA_ESTATE = [
    {"kind": "Tenant", "name": "org"},
    {"kind": "Tenant", "name": "org/a"},
    {"kind": "Tenant", "name": "org/b"},
    {"kind": "Cluster", "name": "c1"},
    {
        "kind": "Node",
        "name": "g1",
        "cluster": "c1",
        "cpu_cores": 64,
        "memory_gb": 512,
        "devices": [{"model": "nvidia-a100-80g", "count": 8}],
        "stack": CUDA,
    },
    {"kind": "Pool", "name": "a100", "cluster": "c1", "model": "nvidia-a100-80g", "nodes": ["g1"]},
    {"kind": "Quota", "name": "org", "tenant": "org", "limits": [{"resource": "nvidia-a100-80g", "nominal": 8}]},
    {"kind": "Quota", "name": "team-a", "tenant": "org/a", "limits": [{"resource": "nvidia-a100-80g", "nominal": 4}]},
    {"kind": "Quota", "name": "team-b", "tenant": "org/b", "limits": [{"resource": "nvidia-a100-80g", "nominal": 4, "borrowing_limit": 2}]},
]
# (arrival s, name, tenant, devices, priority, actual runtime s); every estimate is right,
# so that the scheduler knows the same ends live and simulated.
QUOTA_SCENARIO = [
    (0, "b-own", "org/b", 4, "normal", 36000),  # within team-b's nominal
    (60, "b-borrows", "org/b", 2, "normal", 36000),  # 6 of 4: borrows 2 of team-a's idle quota
    (120, "b-greedy", "org/b", 2, "normal", 36000),  # 8 of 4 is past its borrowing limit: waits, though 2 devices are free
    (600, "a-reclaims", "org/a", 4, "low", 600),  # within its nominal: preempts the borrower (not by priority: it is low)
]
QUOTA_END_S = 1200.0  # a-reclaims ends; the borrower borrows again, b-greedy still may not


def test_simulated_and_live_scheduling_admit_the_same_with_quotas_and_borrowing(ctx: ServiceContext, api: TestClient) -> None:
    assert api.post("/api/v1/apply", json={"documents": QUOTA_ESTATE}).status_code == 200
    live, ids = _live_admissions(ctx, api)
    by_name = {task_id: name for name, task_id in ids.items()}
    assert [(t, by_name[task_id], borrowing) for t, task_id, borrowing in live] == [
        (0.0, "b-own", False),
        (60.0, "b-borrows", True),
        (600.0, "a-reclaims", False),
        (QUOTA_END_S, "b-borrows", True),
    ]

    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        rows = session.execute(select(TaskRow)).scalars().all()
        specs = {r.id: resolve_task_spec(inv, {k: v for k, v in r.spec.items() if k != "kind"}) for r in rows}
        live_preemptions = {r.id: r.preemptions for r in rows}
    work = {name: runtime for _, name, _, _, _, runtime in QUOTA_SCENARIO}
    trace = [
        TraceTask(ids[name], float(t), specs[ids[name]], reference_s=work[name], work_s={"nvidia-a100-80g": work[name]})
        for t, name, *_ in QUOTA_SCENARIO
    ]
    config = SimConfig(
        policy=inv.policy,
        queues=list(inv.queues.values()),
        tenant_weights=inv.tenant_weights,
        quotas=list(inv.quotas.values()),
        max_time_s=QUOTA_END_S + 1,
    )
    models = {m.name: m for m in inv.catalog.all()}
    sim = Simulator(list(inv.clusters.values()), list(inv.nodes.values()), list(inv.pools.values()), models, ctx.compat.check, config)
    result = sim.run(trace)
    assert [(a.t, a.task_id, a.borrowing) for a in result.admissions] == live
    outcomes = result.outcomes
    assert {task_id: out.preemptions for task_id, out in outcomes.items()} == live_preemptions
    assert outcomes[ids["b-borrows"]].preemptions == 1 and outcomes[ids["b-borrows"]].borrowed == 2
    assert outcomes[ids["b-greedy"]].start_s is None and outcomes[ids["b-greedy"]].over_quota_cycles > 0
    summary = summarize(result)
    # b-greedy waited on its quota; b-borrows, evicted, waited for devices (it was within what it may borrow).
    assert (summary["borrowed_admissions"], summary["waited_over_quota"]) == (2, 1)


def _live_admissions(ctx: ServiceContext, api: TestClient) -> tuple[list[tuple[float, str, bool]], dict[str, str]]:
    """Submit the scenario on the live server's clock, cycle after every event as the
    simulator does (again at once after an eviction), and record every admission."""
    start, admissions, ids = ctx.clock.now(), [], {}
    events = sorted({t for t, *_ in QUOTA_SCENARIO} | {QUOTA_END_S})
    for t in events:
        ctx.clock.advance(t - (ctx.clock.now() - start).total_seconds())
        for at, name, tenant, devices, priority, runtime in QUOTA_SCENARIO:
            if at == t:
                ids[name] = _submit(api, name, tenant, devices, priority, runtime)
        if t == QUOTA_END_S:
            assert api.post(f"/api/v1/tasks/{ids['a-reclaims']}/cancel").status_code == 200  # ends (nothing was dispatched)
        evicted = True
        while evicted:
            result = schedule_once(ctx)
            decisions = result.decisions if result else []
            with ctx.db.transaction() as session:  # who borrows: the book the next cycle will start from
                inv = load_inventory(ctx, session)
                book = quota_book(inv, running_tasks(session, inv, {}, ctx.clock.now()))
            admissions += [(float(t), d.task_id, book.is_borrowing(d.task_id)) for d in decisions if d.admit]
            evicted = any(d.victims for d in decisions)
    return admissions, ids


def _submit(api: TestClient, name: str, tenant: str, devices: int, priority: str, runtime_s: int) -> str:
    body = {"name": name, "tenant": tenant, "type": "training", "image": "img", "command": "sleep 60", "priority": priority}
    body |= {"per_worker": {"devices": {"class": "gpu", "count": devices}, "cpu": 1, "memory_gb": 1}, "runtime_estimate": f"{runtime_s}s"}
    response = api.post("/api/v1/tasks", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]
