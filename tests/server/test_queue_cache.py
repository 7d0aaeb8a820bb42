"""The queued tasks are read in full once, then only where they moved (services/queue_cache.py):
the scheduler's pass, plan and the workload overview share the cache; a task that changes
state is read again or dropped; a new lease term starts from a fresh read; and what the
overview shows as a task's reason is the row's, even when another replica wrote it."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import update

from hetpool.server.db.models import TaskRow
from hetpool.server.leader import Fence
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.queue_cache import queue_cache
from hetpool.server.workers.scheduler import schedule_once
from tests.server.test_decisions_api import ESTATE, H100, _submit


def _gangs(api: TestClient, n: int) -> list[str]:
    """n 2x8-H100 gangs: the estate runs one at a time, the rest queue."""
    return [_submit(api, f"gang-{i}", {"class": "gpu", "models": [H100], "count": 8}, workers=2, runtime_estimate="1h") for i in range(n)]


def test_queued_rows_are_read_once_and_again_only_when_they_move(ctx: ServiceContext, api: TestClient) -> None:
    assert api.post("/api/v1/apply", json={"documents": ESTATE}).status_code == 200
    ids = _gangs(api, 4)
    cache = queue_cache(ctx)
    schedule_once(ctx)
    assert cache.fetched == 4
    waiting = [i for i in ids if api.get(f"/api/v1/tasks/{i}").json()["state"] == "queued"]
    assert len(waiting) == 3

    schedule_once(ctx)  # the admitted one left the queue; the others did not move
    overview = api.get("/api/v1/stats/workload").json()
    assert api.post("/api/v1/tasks/plan", json={"name": "p", "tenant": "org/a", "type": "training", "command": "x"}).status_code == 200
    assert cache.fetched == 4, "nothing moved: nothing read again by the scheduler, the overview or plan"
    assert set(cache.entries) == set(waiting) and overview["waiting"] == 3
    # What the cache holds as each explanation is what the scheduler stored.
    for task_id in waiting:
        assert cache.entries[task_id].pending_explanation == api.get(f"/api/v1/tasks/{task_id}").json()["pending"]

    # A cancelled task leaves; a new task is read; the rest stay as they were.
    assert api.post(f"/api/v1/tasks/{waiting[0]}/cancel").status_code == 200
    newcomer = _gangs(api, 1)[0]
    schedule_once(ctx)
    assert set(cache.entries) == {*waiting[1:], newcomer}
    assert cache.fetched == 5


def test_a_new_lease_term_reads_every_queued_row_again(ctx: ServiceContext, api: TestClient) -> None:
    assert api.post("/api/v1/apply", json={"documents": ESTATE}).status_code == 200
    _gangs(api, 3)
    cache = queue_cache(ctx)
    with ctx.db.transaction() as session:
        cache.refresh(session, term=Fence("workers", "replica-a", 1))
        assert cache.fetched == 3
        cache.refresh(session, term=None)  # an API reader: no term of its own, keeps what is there
        cache.refresh(session, term=Fence("workers", "replica-a", 1))
        assert cache.fetched == 3
        # Another replica may have led meanwhile and explained these tasks: read them again.
        cache.refresh(session, term=Fence("workers", "replica-a", 2))
        assert cache.fetched == 6


def test_the_overview_shows_the_reason_a_row_holds_now(ctx: ServiceContext, api: TestClient) -> None:
    assert api.post("/api/v1/apply", json={"documents": ESTATE}).status_code == 200
    ids = _gangs(api, 3)
    schedule_once(ctx)
    api.get("/api/v1/stats/workload")  # the cache has read them
    # Another replica's scheduler explains them anew (an explanation does not move updated_at).
    with ctx.db.transaction() as session:
        session.execute(
            update(TaskRow).where(TaskRow.id.in_(ids), TaskRow.state == "queued").values(pending_explanation={"summary": "from replica b"})
        )
    longest = api.get("/api/v1/stats/workload").json()["longest_waiting"]
    assert longest and all(t["reason"] == "from replica b" for t in longest)
