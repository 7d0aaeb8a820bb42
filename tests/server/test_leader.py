"""Leader election of the background loops: one leader per group, takeover after expiry,
fencing of a stale leader's writes, release on stop, readiness and the leader endpoint.

Two ServiceContexts on one database stand for two replicas; they share one FixedClock, so
expiry is driven by advancing it (the lease uses the context clock)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient

from hetpool.core.clock import Clock
from hetpool.engines.local import LocalBackend
from hetpool.server.app import create_app
from hetpool.server.db.session import Database, alembic_config
from hetpool.server.leader import WORKERS, LeaderElector, LeadershipLost, current_fence, fenced, leases
from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import Settings
from hetpool.server.workers import loop as loop_module
from hetpool.server.workers.dispatcher import dispatch_once
from hetpool.server.workers.loop import WorkerLoop, WorkerPipelines, run_pass
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task, task_state


@pytest.fixture
def replica(ctx: ServiceContext) -> Iterator[ServiceContext]:
    """A second replica: its own engine on the same database, the same clock."""
    db = Database(ctx.settings.resolved_database_url())
    other = ServiceContext(settings=ctx.settings, db=db, clock=ctx.clock, backends={"local": LocalBackend(ctx.settings.backend_dir / "local")})
    yield other
    db.dispose()


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_one_replica_leads_and_the_other_takes_over_after_expiry(ctx: ServiceContext, replica: ServiceContext) -> None:
    a, b = LeaderElector(ctx, WORKERS), LeaderElector(replica, WORKERS)
    assert a.try_acquire() is True
    assert b.try_acquire() is False
    assert a.fence.token == 1 and b.fence is None
    ctx.clock.advance(ctx.settings.leader_renew_s)
    assert a.ensure() is True and b.ensure() is False  # renewal keeps the token
    assert a.fence.token == 1
    ctx.clock.advance(ctx.settings.leader_lease_s - 1)
    assert b.try_acquire() is False  # renewed above: not yet expired
    ctx.clock.advance(2)  # a stopped renewing: its lease ran out
    assert a.is_leader() is False  # by its own clock, before anyone tells it
    assert b.try_acquire() is True
    assert b.fence.token == 2  # a takeover increases the fencing token
    assert a.try_acquire() is False
    (lease,) = leases(ctx)
    assert lease["group"] == WORKERS and lease["holder"] == b.holder and lease["token"] == 2
    assert lease["since"] == ctx.clock.now().isoformat()


def test_groups_have_separate_leases(ctx: ServiceContext, replica: ServiceContext) -> None:
    assert LeaderElector(ctx, WORKERS).try_acquire()
    assert LeaderElector(replica, "connectors").try_acquire()
    assert {(lease["group"], lease["token"]) for lease in leases(ctx)} == {(WORKERS, 1), ("connectors", 1)}


def test_a_stale_leaders_scheduler_and_dispatcher_writes_are_refused(ctx: ServiceContext, replica: ServiceContext, demo: TestClient) -> None:
    task_id = demo.post("/api/v1/tasks", json=example_task("data-prep.yaml")).json()["id"]
    a, b = LeaderElector(ctx, WORKERS), LeaderElector(replica, WORKERS)
    assert a.try_acquire()
    stale = a.fence
    ctx.clock.advance(ctx.settings.leader_lease_s + 1)
    assert b.try_acquire()  # a paused (GC, network) past its lease; b took over
    with fenced(stale), pytest.raises(LeadershipLost, match="token 2"):
        schedule_once(ctx)
    assert task_state(demo, task_id) == "queued"  # nothing of the stale cycle applied
    with fenced(stale):
        assert run_pass(ctx) is False  # the pass stops at the refused step
    assert task_state(demo, task_id) == "queued"
    with fenced(b.fence):
        schedule_once(replica)
    assert task_state(demo, task_id) == "admitted"
    with fenced(stale), pytest.raises(LeadershipLost):
        dispatch_once(ctx)  # may have submitted (idempotent per attempt), records nothing
    assert task_state(demo, task_id) == "admitted"
    with fenced(b.fence):
        assert dispatch_once(replica) == 1  # the new leader adopts the job by its name
    assert task_state(demo, task_id) in {"dispatched", "running", "succeeded"}


def test_a_pass_stops_before_the_next_step_once_the_lease_is_lost(ctx: ServiceContext, replica: ServiceContext) -> None:
    a, b = LeaderElector(ctx, WORKERS), LeaderElector(replica, WORKERS)
    assert a.try_acquire()
    ran = []

    def takeover(_ctx) -> None:
        ctx.clock.advance(ctx.settings.leader_lease_s + 1)
        assert b.try_acquire()

    def later_step(_ctx) -> None:
        ran.append(1)

    assert run_pass(ctx, (takeover, later_step), still_leader=a.is_leader) is False
    assert ran == []


def test_a_stopped_loop_releases_its_lease_so_a_standby_takes_over_at_once(ctx: ServiceContext, replica: ServiceContext) -> None:
    passes = []
    loop = WorkerLoop(ctx, 0.02, steps=(lambda _ctx: passes.append(1),), group=WORKERS)
    loop.start()
    try:
        wait_until(lambda: loop.is_leader() and passes)
        standby = LeaderElector(replica, WORKERS)
        assert standby.try_acquire() is False
    finally:
        loop.stop()
    assert standby.try_acquire() is True  # no clock advance: released, not expired
    assert standby.fence.token == 2
    count = len(passes)
    assert leases(ctx)[0]["holder"] == standby.holder and len(passes) == count


def test_renew_must_be_shorter_than_the_lease(ctx: ServiceContext) -> None:
    bad = ctx.settings.model_copy(update={"leader_lease_s": 2.0, "leader_renew_s": 2.0})
    with pytest.raises(ValueError, match="leader_renew_s .* must be less than leader_lease_s"):
        LeaderElector(ServiceContext(settings=bad, db=ctx.db, clock=ctx.clock), WORKERS)


def test_readyz_reports_ready_and_the_leader_endpoint_names_the_holder(ctx: ServiceContext, api: TestClient) -> None:
    ready = api.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["ready"] is True and body["leader"] is False and body["database"] == ctx.db.dialect  # no loops in this app
    # The database is at every head of this hetpool's migration tree (one after a merge).
    assert sorted(body["revisions"]) == sorted(ScriptDirectory.from_config(alembic_config()).get_heads())
    assert api.get("/api/v1/leader", headers={"Authorization": ""}).status_code == 401
    a = LeaderElector(ctx, WORKERS)
    assert a.try_acquire()
    groups = api.get("/api/v1/leader").json()["groups"]
    assert groups == [
        {
            "group": WORKERS,
            "holder": a.holder,
            "since": ctx.clock.now().isoformat(),
            "token": 1,
            "renewed_at": ctx.clock.now().isoformat(),
            "expires_at": groups[0]["expires_at"],
            "last_holder": a.holder,
        }
    ]


def test_an_app_with_workers_leads_and_reports_it(ctx: ServiceContext, admin_token: str) -> None:
    settings = ctx.settings.model_copy(update={"run_workers": True, "run_connector_sync": True})
    app = create_app(ctx=ServiceContext(settings=settings, db=ctx.db, clock=ctx.clock, backends=ctx.backends))
    with TestClient(app, headers={"Authorization": f"Bearer {admin_token}"}) as client:
        wait_until(lambda: client.get("/readyz").json()["leader"] is True)
        mine = client.get("/api/v1/leader").json()
        assert set(mine["this_replica"]) == {"workers", "connectors"}
        assert {g["group"]: g["holder"] for g in mine["groups"]} == {k: v["holder"] for k, v in mine["this_replica"].items()}
    # Shut down cleanly: both leases released.
    assert all(lease["holder"] is None for lease in leases(ctx))


@pytest.mark.parametrize("db_kind", ["sqlite"])  # the failure modes are the engine's, not the dialect's
def test_readyz_is_503_with_the_reason(tmp_path: Path, db_kind: str) -> None:
    for url, reason in [
        (f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}", "database unreachable"),
        (f"sqlite:///{tmp_path / 'empty.db'}", "migrations not at head"),
    ]:
        settings = Settings(data_dir=tmp_path / "data", database_url=url, run_workers=False)
        db = Database(url)
        app = create_app(ctx=ServiceContext(settings=settings, db=db))
        with TestClient(app) as client:
            response = client.get("/readyz")
            assert response.status_code == 503, response.text
            assert response.json()["ready"] is False and reason in response.json()["reason"]
            assert client.get("/healthz").status_code == 200  # still alive: liveness is not readiness
        db.dispose()


@pytest.mark.parametrize("loop_kind", ["pipelines", "loop"])
def test_a_pass_longer_than_the_lease_keeps_it(ctx: ServiceContext, replica: ServiceContext, monkeypatch, loop_kind: str) -> None:
    """The lease is renewed on its own thread (workers/loop.LeaseHolder): a scheduling pass
    that takes three leases long neither lets a standby take over nor loses its fence."""
    settings = ctx.settings.model_copy(update={"leader_lease_s": 1.0, "leader_renew_s": 0.2})
    live = ServiceContext(settings=settings, db=ctx.db, clock=Clock(), backends=ctx.backends)
    standby = LeaderElector(ServiceContext(settings=settings, db=replica.db, clock=Clock(), backends=replica.backends), WORKERS)
    tokens, stolen = [], []

    def slow_step(step_ctx: ServiceContext) -> None:
        if tokens:
            return  # one slow pass is the test; later passes are quick
        tokens.append(current_fence().token)
        deadline = time.monotonic() + 3 * settings.leader_lease_s
        while time.monotonic() < deadline:
            stolen.append(standby.try_acquire())
            time.sleep(0.1)
        tokens.append(current_fence().token)

    if loop_kind == "pipelines":
        monkeypatch.setitem(loop_module.PIPELINE_STEPS, "schedule", (slow_step,))
        loop = WorkerPipelines(live)
    else:
        loop = WorkerLoop(live, 0.05, steps=(slow_step,), group=WORKERS)
    loop.start()
    try:
        wait_until(lambda: len(tokens) >= 2, timeout_s=20)
        assert loop.is_leader()
    finally:
        loop.stop()
    assert tokens[:2] == [1, 1] and stolen and not any(stolen)  # never expired under the slow pass
