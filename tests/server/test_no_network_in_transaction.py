"""No engine call inside a database transaction (server/engine_guard.py): the guard refuses
one, the `logs` endpoint and every worker pipeline call their engines with none open."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from hetpool.engines.base import JobHandle
from hetpool.server.db.session import in_transaction
from hetpool.server.engine_guard import NetworkInTransactionError
from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, example_task, run_to_end, task_state


class RecordingEngine:
    """The local engine, noting for each call whether a transaction was open on its thread."""

    kind = "local"

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls: list[tuple[str, bool]] = []

    def __getattr__(self, name: str):
        attr = getattr(self.inner, name)
        if name not in {"submit", "find", "poll", "cancel", "logs"}:
            return attr

        def call(*args, **kwargs):
            self.calls.append((name, in_transaction()))
            return attr(*args, **kwargs)

        return call


def test_an_engine_call_inside_a_transaction_is_refused(ctx: ServiceContext) -> None:
    assert ctx.settings.network_in_transaction == "raise"  # tests/conftest.py
    backend = ctx.backend_for("local")
    with ctx.db.transaction(), pytest.raises(NetworkInTransactionError, match="LocalBackend.poll called inside a database transaction"):
        backend.poll([JobHandle("local", "nope")])
    assert not in_transaction()
    assert set(backend.poll([JobHandle("local", "nope")])) == {"nope"}  # outside: allowed


def test_warn_mode_logs_the_call_and_lets_it_through(ctx: ServiceContext, caplog: pytest.LogCaptureFixture) -> None:
    warn = ServiceContext(settings=ctx.settings.model_copy(update={"network_in_transaction": "warn"}), db=ctx.db, backends=ctx.backends)
    with caplog.at_level(logging.ERROR, logger="hetpool.server.engine_guard"), warn.db.transaction():
        statuses = warn.backend_for("local").poll([JobHandle("local", "nope")])
    assert set(statuses) == {"nope"}
    assert "LocalBackend.poll called inside a database transaction" in caplog.text


def test_logs_asks_the_engine_outside_the_transaction(ctx: ServiceContext, demo: TestClient) -> None:
    task_id = demo.post("/api/v1/tasks", json=example_task("data-prep.yaml")).json()["id"]
    run_to_end(ctx, demo, task_id)
    response = demo.get(f"/api/v1/tasks/{task_id}/logs")
    assert response.status_code == 200, response.text
    assert response.json()["complete"] is True
    # A bogus rank is still refused before the engine is asked.
    assert demo.get(f"/api/v1/tasks/{task_id}/logs", params={"rank": 7}).status_code == 422


def test_no_worker_pipeline_calls_an_engine_inside_a_transaction(ctx: ServiceContext, demo: TestClient) -> None:
    engine = RecordingEngine(ctx.backends["local"])
    ctx.backends["local"] = engine
    done = demo.post("/api/v1/tasks", json=example_task("data-prep.yaml")).json()["id"]
    run_to_end(ctx, demo, done)
    spec = example_task("data-prep.yaml") | {"command": "sleep 60"}
    cancelled = demo.post("/api/v1/tasks", json=spec).json()["id"]
    drive_until(ctx, lambda: task_state(demo, cancelled) == "running")
    assert demo.post(f"/api/v1/tasks/{cancelled}/cancel").status_code == 200
    run_to_end(ctx, demo, cancelled)
    assert {name for name, _ in engine.calls} >= {"submit", "poll", "cancel"}
    assert [call for call in engine.calls if call[1]] == []
