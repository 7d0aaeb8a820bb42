"""A database that cannot be reached gives a clear, retryable answer (503
database_unavailable with Retry-After), never a bare 500; the next request after it is
back is served as usual."""

from __future__ import annotations

from contextlib import contextmanager

from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from hetpool.server.services.context import ServiceContext


def test_requests_while_the_database_is_down_get_503_and_then_succeed(ctx: ServiceContext, demo: TestClient, monkeypatch) -> None:
    real = ctx.db.transaction

    @contextmanager
    def refused():
        raise OperationalError("SELECT 1", {}, OSError('connection to server at "127.0.0.1", port 5432 failed: Connection refused'))
        yield  # pragma: no cover

    monkeypatch.setattr(ctx.db, "transaction", refused)
    task = {"name": "during-outage", "tenant": "ai-lab/nlp/llm-sft", "type": "training", "command": "true"}
    for response in (demo.get("/api/v1/tasks"), demo.post("/api/v1/tasks", json=task, headers={"Idempotency-Key": "outage-1"})):
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"] == "1"
        body = response.json()
        assert body["code"] == "database_unavailable" and "Idempotency-Key" in body["message"]
    monkeypatch.setattr(ctx.db, "transaction", real)
    again = demo.post("/api/v1/tasks", json=task, headers={"Idempotency-Key": "outage-1"})
    assert again.status_code == 201, again.text
