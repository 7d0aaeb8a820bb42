"""The reconciler records a round's outcomes many per transaction (workers/reconciler.py
APPLY_CHUNK): fewer commits, the same outcomes, and a task whose outcome cannot be recorded
holds back none of the others (it is recorded on a later round)."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient
from sqlalchemy import event

from hetpool.engines.base import JobHandle
from hetpool.server.services import task_lifecycle
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers import reconciler
from hetpool.server.workers.dispatcher import dispatch_once
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import task_state

TASK = {"tenant": "ai-lab/nlp/llm-sft", "type": "training", "command": "true", "per_worker": {"devices": {"class": "gpu", "count": 1}}}


def _finished_jobs(ctx: ServiceContext, demo: TestClient, n: int) -> list[str]:
    ids = [demo.post("/api/v1/tasks", json={**TASK, "name": f"r-{i}"}).json()["id"] for i in range(n)]
    schedule_once(ctx)
    dispatch_once(ctx)
    assert all(task_state(demo, i) == "dispatched" for i in ids)
    # `true` ends at once; wait (bounded) until the local backend says so for every job.
    backend = ctx.backend_for("local")
    handles = [JobHandle("local", demo.get(f"/api/v1/tasks/{i}").json()["job_id"]) for i in ids]
    deadline = time.monotonic() + 60
    while not all(s.phase.terminal for s in backend.poll(handles).values()):
        assert time.monotonic() < deadline, "local jobs did not end"
        time.sleep(0.2)
    return ids


def test_a_rounds_outcomes_are_recorded_together_and_one_bad_one_holds_back_none(ctx: ServiceContext, demo: TestClient, monkeypatch) -> None:
    ids = _finished_jobs(ctx, demo, 4)
    bad = ids[1]
    real = task_lifecycle.transition

    def transition(ctx_, session, row, target, **kwargs):
        if row.id == bad:
            raise RuntimeError("cannot record this one")
        return real(ctx_, session, row, target, **kwargs)

    monkeypatch.setattr(task_lifecycle, "transition", transition)
    for _ in range(20):
        reconciler.reconcile_once(ctx)
        if all(task_state(demo, i) == "succeeded" for i in ids if i != bad):
            break
        time.sleep(0.2)
    assert [task_state(demo, i) for i in ids if i != bad] == ["succeeded"] * 3
    assert task_state(demo, bad) == "dispatched"  # not recorded, not lost
    monkeypatch.setattr(task_lifecycle, "transition", real)
    reconciler.reconcile_once(ctx)
    assert task_state(demo, bad) == "succeeded"


def test_outcomes_of_a_round_share_one_commit(ctx: ServiceContext, demo: TestClient) -> None:
    ids = _finished_jobs(ctx, demo, 5)
    commits: list[int] = []
    event.listen(ctx.db.engine, "commit", lambda _conn: commits.append(1))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        commits.clear()
        changed = reconciler.reconcile_once(ctx)
        during = len(commits)
        if changed:
            break
        time.sleep(0.2)
    # Five transitions, and only: the claim, one transaction for all of them, its chainer round.
    assert changed == 5 and during == 3, during
    assert all(task_state(demo, i) == "succeeded" for i in ids)
