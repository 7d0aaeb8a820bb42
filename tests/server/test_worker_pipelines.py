"""Worker pipelines (server/workers/loop.py): each in its own thread, so a submit blocked in
its engine holds up neither scheduling nor reconciling; bounded batch claims
(server/db/claims.py), with SKIP LOCKED on PostgreSQL; the settings that shape them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

from hetpool.core.states import TaskState
from hetpool.server.db.claims import ClaimSet, Rotation, claim_batch
from hetpool.server.db.models import TaskRow
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.wakeups import wakeups
from hetpool.server.settings import Settings
from hetpool.server.workers.dispatcher import dispatch_once
from hetpool.server.workers.loop import WorkerPipelines
from hetpool.server.workers.reconciler import reconcile_once
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import drive_until, example_task, task_state

DEADLINE_S = 60.0  # generous: CI machines are busy; every wait below ends as soon as its condition holds


def wait_until(condition, what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout_s} s: {what}")
        time.sleep(0.02)  # polling a condition, not waiting for time to pass


class GatedEngine:
    """The local engine, except that a submit of a command containing "gated" blocks until
    the gate opens (an sbatch stuck on a busy controller)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.entered = threading.Event()

    def submit(self, request):
        if "gated" in request.command:
            self.entered.set()
            if not self.gate.wait(DEADLINE_S):
                raise TimeoutError("the test never opened the gate")
        return self.inner.submit(request)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def with_settings(ctx: ServiceContext, **changes) -> ServiceContext:
    return ServiceContext(settings=ctx.settings.model_copy(update=changes), db=ctx.db, clock=ctx.clock, backends=ctx.backends)


def submit(api: TestClient, command: str) -> str:
    response = api.post("/api/v1/tasks", json=example_task("data-prep.yaml") | {"command": command})
    assert response.status_code in (200, 201), response.text
    return response.json()["id"]


@pytest.fixture
def gated(ctx: ServiceContext) -> Iterator[GatedEngine]:
    engine = GatedEngine(ctx.backends["local"])
    ctx.backends["local"] = engine
    yield engine
    engine.gate.set()  # never leave a lane thread blocked behind a failed test


def test_a_blocked_submit_holds_up_neither_scheduling_nor_reconciling(ctx: ServiceContext, demo: TestClient, gated: GatedEngine) -> None:
    running = submit(demo, "sleep 2")
    drive_until(ctx, lambda: task_state(demo, running) == "running", DEADLINE_S)
    fast = with_settings(ctx, worker_interval_s=0.02, dispatch_concurrency=1)
    pipelines = WorkerPipelines(fast)
    pipelines.start()
    try:
        stuck = submit(demo, "echo gated")
        assert gated.entered.wait(DEADLINE_S), "the dispatch lane never reached the engine"
        # The submit is blocked in the engine. Scheduling goes on: a new task is admitted,
        # and waits behind the stuck one in its lane (concurrency 1) …
        queued_behind = submit(demo, "true")
        wait_until(lambda: task_state(demo, queued_behind) == "admitted", "a task submitted meanwhile is admitted")
        # … and reconciling goes on: the running task's end is recorded.
        wait_until(lambda: task_state(demo, running) == "succeeded", "the running task's end is recorded")
        assert task_state(demo, stuck) == "admitted" and task_state(demo, queued_behind) == "admitted"
        gated.gate.set()
        wait_until(lambda: {task_state(demo, stuck), task_state(demo, queued_behind)} == {"succeeded"}, "both run once the engine answers")
    finally:
        pipelines.stop()
    assert pipelines.lanes.outstanding() == 0 and len(pipelines.lanes.claims) == 0


def test_each_round_takes_a_bounded_batch_and_every_followed_task_gets_its_turn(ctx: ServiceContext, demo: TestClient) -> None:
    ids = [submit(demo, "true") for _ in range(3)]
    one = with_settings(ctx, pipeline_batch={"dispatch": 1, "reconcile": 1})
    schedule_once(one)
    assert dispatch_once(one) == 1  # the oldest admission only
    assert sorted(task_state(demo, t) for t in ids) == ["admitted", "admitted", "dispatched"]
    while dispatch_once(one):
        pass
    drive_until(one, lambda: all(task_state(demo, t) == "succeeded" for t in ids), DEADLINE_S)  # run_pass: rotation reaches all


def test_reconcile_rotation_visits_each_followed_task_in_turn(ctx: ServiceContext, demo: TestClient) -> None:
    ids = [submit(demo, "sleep 30") for _ in range(3)]
    schedule_once(ctx)
    assert dispatch_once(ctx) == 3
    one = with_settings(ctx, pipeline_batch={"reconcile": 1})
    seen = []
    for _ in range(3):
        reconcile_once(one)  # dispatched → running, one task per round
        seen.append(sorted(t for t in ids if task_state(demo, t) == "running"))
    assert [len(s) for s in seen] == [1, 2, 3]
    for task_id in ids:
        assert demo.post(f"/api/v1/tasks/{task_id}/cancel").status_code == 200
    drive_until(ctx, lambda: all(task_state(demo, t) == "cancelled" for t in ids), DEADLINE_S)


def test_claims_leave_out_held_rows_and_postgres_skips_locked_ones(ctx: ServiceContext, demo: TestClient) -> None:
    ids = []
    for _ in range(3):
        ids.append(submit(demo, "true"))
        ctx.clock.advance(1)  # distinct creation times: "oldest first" is then by time, not by id
    queued = select(TaskRow).where(TaskRow.state == TaskState.QUEUED.value)
    claims = ClaimSet()
    with ctx.db.transaction() as session:
        first = [r.id for r in claim_batch(session, queued, key=TaskRow.id, order_by=(TaskRow.created_at, TaskRow.id), limit=2, claims=claims)]
    assert first == ids[:2]  # oldest first, at most `limit`
    with ctx.db.transaction() as session:
        assert [r.id for r in claim_batch(session, queued, key=TaskRow.id, limit=2, claims=claims)] == [ids[2]]  # held ones left out
    claims.release(first)
    rotation = Rotation()
    with ctx.db.transaction() as session:
        pages = [[r.id for r in claim_batch(session, queued, key=TaskRow.id, limit=2, rotation=rotation)] for _ in range(3)]
    assert sorted(pages[0] + pages[1]) == sorted(ids) and pages[2] == pages[0]  # every row in turn, then round again
    with pytest.raises(ValueError, match="at least one row"), ctx.db.transaction() as session:
        claim_batch(session, queued, key=TaskRow.id, limit=0)
    if ctx.db.dialect != "postgresql":
        return
    locked = sorted(ids)[0]
    with ctx.db.transaction() as holder:
        holder.execute(select(TaskRow).where(TaskRow.id == locked).with_for_update()).scalar_one()
        with ctx.db.transaction() as session:  # another connection: the locked row is skipped, not waited on
            got = [r.id for r in claim_batch(session, queued, key=TaskRow.id, limit=3)]
    assert locked not in got and len(got) == 2


def test_pipeline_settings_are_checked() -> None:
    with pytest.raises(ValidationError, match="unknown pipeline bogus; the pipelines are schedule, dispatch"):
        Settings(pipeline_batch={"bogus": 5})
    with pytest.raises(ValidationError, match="reconcile: must be more than 0"):
        Settings(pipeline_interval_s={"reconcile": 0})
    with pytest.raises(ValidationError, match="slurm: concurrency must be between 1 and 256"):
        Settings(dispatch_concurrency_per_backend={"slurm": 10**9})
    settings = Settings(worker_interval_s=0.5, pipeline_interval_s={"cost": 5}, dispatch_concurrency_per_backend={"slurm": 8})
    assert (settings.interval_of("cost"), settings.interval_of("schedule")) == (5, 0.5)
    assert (settings.dispatch_concurrency_of("slurm"), settings.dispatch_concurrency_of("ray")) == (8, 4)


def test_a_pipeline_that_changed_anothers_work_wakes_it(ctx: ServiceContext, api: TestClient) -> None:
    """Intervals of 30 s, but a task that ends frees its device at once for the next one:
    the reconciler wakes the scheduler, which wakes dispatch, which wakes the reconciler
    (services/wakeups.py). Without wake-ups the second task would wait out the intervals."""
    estate = [
        {"kind": "Tenant", "name": "org"},
        {"kind": "Cluster", "name": "c1"},
        {"kind": "Node", "name": "n1", "cluster": "c1", "cpu_cores": 8, "memory_gb": 32, "devices": [{"model": "nvidia-a100-80g", "count": 1}]},
        {"kind": "Pool", "name": "one-gpu", "cluster": "c1", "model": "nvidia-a100-80g", "nodes": ["n1"]},
    ]
    assert api.post("/api/v1/apply", json={"documents": estate}).status_code == 200
    task = {"tenant": "org", "type": "general", "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 1, "memory_gb": 1}}
    first = api.post("/api/v1/tasks", json={**task, "name": "first", "command": "sleep 1"}).json()["id"]
    second = api.post("/api/v1/tasks", json={**task, "name": "second", "command": "true"}).json()["id"]
    slow = with_settings(ctx, worker_interval_s=30.0, pipeline_interval_s={"reconcile": 1.0})
    pipelines = WorkerPipelines(slow)
    started = time.monotonic()
    pipelines.start()
    try:
        # The fixture's clock is fixed, so both share one queued_at and either may go first.
        both_done = lambda: task_state(api, first) == task_state(api, second) == "succeeded"  # noqa: E731
        wait_until(both_done, "the other task runs once the first one ends", timeout_s=25)
    finally:
        pipelines.stop()
    assert time.monotonic() - started < 25  # well inside one 30 s interval of the scheduler
    sent = wakeups(slow).sent
    assert sent["schedule"] >= 1 and sent["dispatch"] >= 1 and sent["reconcile"] >= 1
