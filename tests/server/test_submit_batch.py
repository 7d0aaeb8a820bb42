"""Group commit of submits (services/submit_batch.py), through the API: submits that arrive
together share one transaction, and each still gets exactly the answer it would get alone —
a refused task takes nothing of its batch with it, an Idempotency-Key used twice in one
batch makes one task, a key another replica took meanwhile makes the batch fall back to
one transaction per submit, and the audit chain stays whole."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError

from hetpool.server.db.models import AuditEventRow, TaskRow
from hetpool.server.db.models_idempotency import IdempotencyKeyRow
from hetpool.server.services import audit, submit_batch
from hetpool.server.services import tasks as task_service
from hetpool.server.services.context import ServiceContext

TASK = {
    "name": "batched",
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "command": "true",
    "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 1, "memory_gb": 1},
}


def held_first_batch(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make the batcher's first transaction wait (inside it) until released, so that the
    submits sent meanwhile gather into the next batch: (first batch entered, release)."""
    entered, release = threading.Event(), threading.Event()
    real = task_service.AdmissionView.read

    def read(ctx, session):
        if not entered.is_set():
            entered.set()
            assert release.wait(30)
        return real(ctx, session)

    monkeypatch.setattr(task_service.AdmissionView, "read", staticmethod(read))
    return entered, release


def send_together(client: TestClient, requests: list[tuple[dict, dict]], monkeypatch: pytest.MonkeyPatch) -> list[httpx.Response]:
    """POST every (body, headers) at once, behind a held first batch; answers in order."""
    entered, release = held_first_batch(monkeypatch)
    opener = threading.Thread(target=lambda: client.post("/api/v1/tasks", json={**TASK, "name": "opener"}))
    opener.start()
    assert entered.wait(30)
    batcher = submit_batch.submitter(client.app.state.ctx)
    answers: list[httpx.Response | None] = [None] * len(requests)

    def go(i: int) -> Callable[[], None]:
        def send() -> None:
            body, headers = requests[i]
            answers[i] = client.post("/api/v1/tasks", json=body, headers=headers)

        return send

    threads = [threading.Thread(target=go(i)) for i in range(len(requests))]
    pause = threading.Event()
    for i, t in enumerate(threads):  # one at a time, so the batch holds them in this order
        t.start()
        for _ in range(600):
            if len(batcher._waiting) == i + 1:
                break
            pause.wait(0.05)
        assert len(batcher._waiting) == i + 1
    release.set()
    for t in [opener, *threads]:
        t.join(60)
    assert all(a is not None for a in answers)
    return answers  # type: ignore[return-value]


def count(ctx: ServiceContext, stmt) -> int:
    with ctx.db.transaction() as session:
        return session.execute(stmt).scalar_one()


def test_submits_sent_together_commit_as_one_batch_and_each_gets_its_own_answer(
    ctx: ServiceContext, demo: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    batcher = submit_batch.submitter(ctx)
    requests = [
        ({**TASK, "name": "ok-1"}, {}),
        ({**TASK, "name": "bad-template", "template": "no-such-template"}, {}),
        ({**TASK, "name": "too-big", "per_worker": {"devices": {"class": "gpu", "count": 64}}}, {}),
        ({**TASK, "name": "keyed"}, {"Idempotency-Key": "same"}),
        ({**TASK, "name": "keyed"}, {"Idempotency-Key": "same"}),  # the same submit again, in the same batch
        ({**TASK, "name": "keyed", "command": "echo other"}, {"Idempotency-Key": "same"}),  # the key, another body
        ({**TASK, "name": "ok-2"}, {}),
    ]
    answers = send_together(demo, requests, monkeypatch)
    ok1, bad, big, keyed, again, other, ok2 = answers
    assert ok1.status_code == 201 and ok2.status_code == 201
    assert bad.status_code == 422 and "template" in bad.json()["message"] and "no-such-template" in bad.json()["message"]
    assert big.status_code == 422 and big.json()["code"] == "unschedulable"
    assert keyed.status_code == 201
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true" and again.json()["id"] == keyed.json()["id"]
    assert other.status_code == 409 and "different request body" in other.json()["message"]
    assert batcher.largest == len(requests) and batcher.fallbacks == 0
    # One task per accepted submit, one submit event each, and the chain verifies.
    names = ["opener", "ok-1", "ok-2", "keyed"]
    assert count(ctx, select(func.count()).select_from(TaskRow)) == len(names)
    submits = select(func.count()).select_from(AuditEventRow).where(AuditEventRow.action == "task.submit")
    assert count(ctx, submits) == len(names)
    with ctx.db.transaction() as session:
        assert audit.verify(session) is None
        assert not audit.has_pending(session)  # linked in the batch's own transaction


def test_a_key_taken_meanwhile_by_another_replica_makes_the_batch_fall_back_to_one_submit_each(
    ctx: ServiceContext, demo: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = demo.post("/api/v1/tasks", json={**TASK, "name": "raced"}, headers={"Idempotency-Key": "raced"})
    assert first.status_code == 201
    batcher = submit_batch.submitter(ctx)
    # The batch's key lookup runs before the other replica's commit: it finds nothing.
    monkeypatch.setattr(submit_batch, "_stored_keys", lambda *_: {})
    requests = [
        ({**TASK, "name": "raced"}, {"Idempotency-Key": "raced"}),
        ({**TASK, "name": "bystander"}, {}),
    ]
    raced, bystander = send_together(demo, requests, monkeypatch)
    assert batcher.fallbacks >= 1
    assert raced.status_code == 200 and raced.json()["id"] == first.json()["id"]  # the winner's task
    assert bystander.status_code == 201
    assert count(ctx, select(func.count()).select_from(TaskRow).where(TaskRow.name == "raced")) == 1
    assert count(ctx, select(func.count()).select_from(TaskRow).where(TaskRow.name == "bystander")) == 1
    assert count(ctx, select(func.count()).select_from(IdempotencyKeyRow)) == 1
    with ctx.db.transaction() as session:
        assert audit.verify(session) is None


def test_a_lone_submit_is_a_batch_of_one_and_the_batcher_thread_ends_when_idle(ctx: ServiceContext, demo: TestClient) -> None:
    batcher = submit_batch.submitter(ctx)
    assert demo.post("/api/v1/tasks", json=TASK).status_code == 201
    assert batcher.batches == 1 and batcher.largest == 1
    thread = batcher._thread
    assert thread is not None
    thread.join(submit_batch.IDLE_EXIT_S + 5)
    assert not thread.is_alive() and batcher._thread is None
    assert demo.post("/api/v1/tasks", json=TASK).status_code == 201  # a new thread for the next one
    assert batcher.batches == 2


def test_a_connection_lost_while_the_batch_commits_never_makes_a_task_twice(
    ctx: ServiceContext, demo: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit went through but its answer was lost: a keyed submit is retried and finds
    its task (the key); a keyless one gets the error instead of a second task."""
    real = ctx.db.transaction
    broken = {"left": 0}

    @contextmanager
    def transaction():
        with real() as session:
            yield session
        if broken["left"] and session.info.get("submit_batch", 0) >= 2:  # the batch of the two below, not the opener
            broken["left"] -= 1
            raise DBAPIError("COMMIT", {}, OSError("server closed the connection unexpectedly"), connection_invalidated=True)

    monkeypatch.setattr(ctx.db, "transaction", transaction)
    broken["left"] = 1
    requests = [({**TASK, "name": "keyed-lost"}, {"Idempotency-Key": "lost-ack"}), ({**TASK, "name": "keyless-lost"}, {})]
    quiet = TestClient(demo.app, headers=dict(demo.headers), raise_server_exceptions=False)  # the 500 is an answer here
    keyed, keyless = send_together(quiet, requests, monkeypatch)
    assert keyed.status_code == 200 and keyed.headers["Idempotent-Replayed"] == "true"  # its task, found by the key
    assert keyless.status_code == 500
    for name in ("keyed-lost", "keyless-lost"):
        assert count(ctx, select(func.count()).select_from(TaskRow).where(TaskRow.name == name)) == 1
    assert keyed.json()["id"] == next(iter(_ids_named(ctx, "keyed-lost")))


def _ids_named(ctx: ServiceContext, name: str) -> set[str]:
    with ctx.db.transaction() as session:
        return set(session.execute(select(TaskRow.id).where(TaskRow.name == name)).scalars())
