"""The active-work cache (services/active_work.py) against a from-scratch read of the
database, over random sequences of the events that change running work: admissions,
dispatch and start, preemption requested (a column written without a transition),
preemption carried out and re-admission under a new attempt, checkpointed progress,
cancellation, requeue after a failed dispatch, success."""

from __future__ import annotations

import random

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from hetpool.core.specs import parse_spec
from hetpool.core.states import ACTIVE_STATES, TaskState
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.server.services import task_lifecycle
from hetpool.server.services.active_work import ActiveWork, active_work, read_uncached
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.cycle_inputs import load_cycle
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.queue_cache import queue_cache
from hetpool.server.services.sched_state import learned_runtimes, running_tasks
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task

TEMPLATES = ["pytorch24-npu.yaml", "data-prep.yaml", "batch-inference.yaml", "llm-inference.yaml"]


def _from_scratch(session) -> dict:
    """Every active task as whole ORM rows say, with its current attempt's placements."""
    rows = session.execute(select(TaskRow).where(TaskRow.state.in_([s.value for s in ACTIVE_STATES]))).scalars().all()
    out = {}
    for row in rows:
        placements = session.execute(select(PlacementRow).where(PlacementRow.task_id == row.id, PlacementRow.attempt == row.attempt)).scalars()
        held = sorted((p.rank, p.model, p.node, p.pool, tuple(p.device_indices), p.device_fraction, p.cpu, p.memory_gb) for p in placements)
        columns = (row.attempt, row.tenant, row.priority, row.started_at, row.admitted_at, row.progress_s, row.preempt_reason, row.preemptions)
        out[row.id] = (columns, parse_spec(row.spec), held)
    return out


def _cached(session, ctx: ServiceContext) -> dict:
    out = {}
    for t in active_work(ctx).read(session):
        held = sorted((h.rank, h.model, *h.allocation.__dict__.values()) for h in t.fixed.held)
        columns = (t.attempt, t.tenant, t.priority, t.started_at, t.admitted_at, t.progress_s, t.preempt_reason, t.preemptions)
        out[t.id] = (columns, t.fixed.spec, held)
    return out


def _pick(session, rng: random.Random, state: TaskState, *, unmarked: bool = False) -> TaskRow | None:
    query = select(TaskRow).where(TaskRow.state == state.value).order_by(TaskRow.id)
    if unmarked:
        query = query.where(TaskRow.preempt_reason.is_(None))
    rows = session.execute(query).scalars().all()
    return rng.choice(rows) if rows else None


def _step(ctx: ServiceContext, api: TestClient, rng: random.Random, n: int) -> None:
    """One random event that changes the running work."""
    event = rng.choice(
        ["submit", "submit", "schedule", "schedule", "start", "start", "mark", "preempt", "progress", "finish", "cancel", "requeue", "admit_by_hand"]
    )
    if event == "submit":
        response = api.post("/api/v1/tasks", json={**example_task(rng.choice(TEMPLATES)), "name": f"w{n}", "command": "sleep 60"})
        assert response.status_code == 201, response.text
        return
    if event == "schedule":
        schedule_once(ctx)
        return
    with ctx.db.transaction() as session:
        if event == "start" and (row := _pick(session, rng, TaskState.ADMITTED)):
            task_lifecycle.transition(ctx, session, row, TaskState.DISPATCHED, actor="test", job_id=f"job-{row.id}")
            task_lifecycle.transition(ctx, session, row, TaskState.RUNNING, actor="test")
        elif event == "mark" and (row := _pick(session, rng, TaskState.RUNNING, unmarked=True)):
            row.preempt_reason = "asked to stop"  # as request_preemption writes it: no transition, no updated_at
        elif event == "preempt" and (row := _pick(session, rng, TaskState.RUNNING)):
            task_lifecycle.preempt_now(ctx, session, row, "preempted by the test")
        elif event == "progress" and (row := _pick(session, rng, TaskState.RUNNING)):
            session.execute(update(TaskRow).where(TaskRow.id == row.id).values(progress_s=TaskRow.progress_s + 600))
        elif event == "finish" and (row := _pick(session, rng, TaskState.RUNNING)):
            task_lifecycle.transition(ctx, session, row, TaskState.SUCCEEDED, actor="test")
        elif event == "requeue" and (row := _pick(session, rng, TaskState.ADMITTED)):
            task_lifecycle.transition(ctx, session, row, TaskState.QUEUED, actor="test", message="dispatch failed")
        elif event == "admit_by_hand" and (row := _pick(session, rng, TaskState.QUEUED)):
            _admit_somewhere(ctx, session, rng, row)
        elif event == "cancel" and (row := _pick(session, rng, rng.choice([TaskState.ADMITTED, TaskState.RUNNING]))):
            task_lifecycle.transition(ctx, session, row, TaskState.CANCELLED, actor="test")
    ctx.clock.advance(rng.choice([1, 30, 600]))


def _admit_somewhere(ctx: ServiceContext, session, rng: random.Random, row: TaskRow) -> None:
    """Admit `row` onto a random device of a random pool, as any writer of the database
    could: a task admitted again lands elsewhere than its last attempt (the scheduler,
    on an estate this small, tends to pick the same devices again)."""
    pool = rng.choice(sorted(load_inventory(ctx, session).pools.values(), key=lambda p: p.name))
    attempt = row.attempt + 1
    node = rng.choice(pool.nodes)
    session.add(
        PlacementRow(
            task_id=row.id,
            attempt=attempt,
            rank=0,
            node=node,
            pool=pool.name,
            model=pool.model,
            device_indices=[rng.randrange(8)],
            device_fraction=1.0,
            price_per_hour=1.0,
            cpu=1,
            memory_gb=1,
        )
    )
    task_lifecycle.transition(ctx, session, row, TaskState.ADMITTED, actor="test", attempt=attempt)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cached_active_work_matches_a_fresh_read_after_any_events(ctx: ServiceContext, demo: TestClient, seed: int) -> None:
    rng = random.Random(seed)
    seen_attempts = set()
    for n in range(80):
        _step(ctx, demo, rng, n)
        if rng.random() < 0.6:
            continue  # reads are irregular: a task may leave and come back between two of them
        with ctx.db.transaction() as session:
            expected = _from_scratch(session)
            assert _cached(session, ctx) == expected, f"after event {n}"
            inv = load_inventory(ctx, session)
            learned, now = learned_runtimes(session, inv), ctx.clock.now()
            cached = running_tasks(session, inv, learned, now, active_work(ctx).read(session))
            assert cached == running_tasks(session, inv, learned, now, read_uncached(session))
        seen_attempts |= {(task_id, columns[0]) for task_id, (columns, _, _) in expected.items()}
    # The sequence did exercise the cache: tasks ran, and some ran again under a new attempt.
    assert len(seen_attempts) >= 5
    assert any(attempt > 1 for _, attempt in seen_attempts), "no task was re-admitted after a preemption or requeue"
    assert active_work(ctx).fetched < 2 * len(seen_attempts)  # each attempt read once (or twice under a race), not each pass


def test_a_pass_reads_each_attempt_once(ctx: ServiceContext, demo: TestClient) -> None:
    for i in range(4):
        assert demo.post("/api/v1/tasks", json={**example_task("data-prep.yaml"), "name": f"d{i}", "command": "sleep 60"}).status_code == 201
    schedule_once(ctx)
    cache = active_work(ctx)
    with ctx.db.transaction() as session:
        active = cache.read(session)
        assert active and cache.fetched == len(active)
        # A later pass, plan and the quota book read the same attempts: nothing fetched again.
        load_cycle(ctx, session, queue_cache(ctx).refresh(session), ctx.clock.now())
        assert cache.fetched == len(active)


def test_the_cycle_sees_running_work_in_one_order_whatever_order_the_database_returns(
    ctx: ServiceContext, demo: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL returns rows in storage order, which moves as rows are updated; the
    cycle breaks ties by the running work's order (forecast, victims), so that order is
    fixed by the loader: start, then id."""
    rng = random.Random(7)
    for n in range(8):
        assert demo.post("/api/v1/tasks", json={**example_task(rng.choice(TEMPLATES)), "name": f"o{n}"}).status_code == 201
    schedule_once(ctx)
    with ctx.db.transaction() as session:  # what the scheduler left waiting is admitted by hand, a few seconds apart
        for row in session.execute(select(TaskRow).where(TaskRow.state == TaskState.QUEUED.value).order_by(TaskRow.id)).scalars().all()[:4]:
            ctx.clock.advance(5)
            _admit_somewhere(ctx, session, rng, row)
    cache = active_work(ctx)

    def load(reverse: bool):
        read = ActiveWork.read
        monkeypatch.setattr(ActiveWork, "read", lambda self, session: list(reversed(read(self, session))) if reverse else read(self, session))
        with ctx.db.transaction() as session:
            loaded = load_cycle(ctx, session, queue_cache(ctx).refresh(session), ctx.clock.now())
        monkeypatch.setattr(ActiveWork, "read", read)
        return loaded

    as_stored, reversed_ = load(False), load(True)
    assert len(as_stored.running) >= 3 and cache.fetched > 0
    assert [r.id for r in reversed_.running] == [r.id for r in as_stored.running]
    assert [(r.started_at, r.id) for r in as_stored.running] == sorted((r.started_at, r.id) for r in as_stored.running)
