"""Crash safety of dispatch: a crash between the backend's submit and the database
commit is reconciled by the job's deterministic name — the job is adopted, never
started twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hetpool.core.states import TaskState
from hetpool.server.services import task_lifecycle
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.dispatcher import dispatch_once
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task, run_to_end, task_state


class Crash(Exception):
    pass


def test_crash_after_backend_submit_does_not_start_the_job_twice(ctx: ServiceContext, demo: TestClient, tmp_path: Path, monkeypatch) -> None:
    # Each start appends to the task's log (tasks cannot write to the test's tmp_path).
    task = {**example_task("data-prep.yaml"), "command": "echo start; sleep 1"}
    task_id = demo.post("/api/v1/tasks", json=task).json()["id"]
    schedule_once(ctx)
    assert task_state(demo, task_id) == "admitted"

    real_transition = task_lifecycle.transition

    def crash_on_dispatch(ctx_, session, row, target, **kwargs):
        if target == TaskState.DISPATCHED:
            raise Crash("process died before commit")
        return real_transition(ctx_, session, row, target, **kwargs)

    monkeypatch.setattr(task_lifecycle, "transition", crash_on_dispatch)
    with pytest.raises(Crash):
        dispatch_once(ctx)  # the backend started the job; the commit never happened
    monkeypatch.setattr(task_lifecycle, "transition", real_transition)
    assert task_state(demo, task_id) == "admitted"

    assert dispatch_once(ctx) == 1  # the next pass finds the job by name and adopts it
    done = run_to_end(ctx, demo, task_id)
    assert done["state"] == "succeeded"
    assert done["job_id"] == f"hetpool-{task_id}-1"
    assert demo.get(f"/api/v1/tasks/{task_id}/logs").json()["text"].splitlines() == ["start"]


def test_a_new_server_context_reconciles_running_work(ctx: ServiceContext, demo: TestClient, tmp_path: Path) -> None:
    """A second context on the same database and backend directory (a restarted server)."""
    from hetpool.engines.local import LocalBackend
    from hetpool.server.workers.loop import run_pass

    task_id = demo.post("/api/v1/tasks", json={**example_task("data-prep.yaml"), "command": "echo start; sleep 2"}).json()["id"]
    run_pass(ctx)
    run_pass(ctx)
    assert task_state(demo, task_id) in {"dispatched", "running"}
    restarted = ServiceContext(
        settings=ctx.settings, db=ctx.db, clock=ctx.clock, backends={"local": LocalBackend(ctx.settings.backend_dir / "local")}
    )
    done = run_to_end(restarted, demo, task_id)
    assert done["state"] == "succeeded"
    assert demo.get(f"/api/v1/tasks/{task_id}/logs").json()["text"].splitlines() == ["start"]
    run_pass(restarted)
    assert task_state(demo, task_id) == "succeeded"
