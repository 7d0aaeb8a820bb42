"""Idempotent submits: a retried POST /api/v1/tasks with the same Idempotency-Key returns the
first task (200, Idempotent-Replayed), a different body under the key is a 409, keys are
per user and expire after 24 h, concurrent first requests create one task, and the CLI
sends a key and retries a lost connection with it."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from typer.testing import CliRunner

from hetpool.client import HetpoolClient
from hetpool.server.db.models import TaskRow
from hetpool.server.services import idempotency
from hetpool.server.services.context import ServiceContext
from tests.server.test_access_api import make_user

TASK = {
    "name": "idem-task",
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "image": "img",
    "command": "true",
    "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 1, "memory_gb": 1},
}


def tasks_named(ctx: ServiceContext, name: str) -> int:
    with ctx.db.transaction() as session:
        return session.execute(select(func.count()).select_from(TaskRow).where(TaskRow.name == name)).scalar_one()


def post(client: TestClient, body: dict, key: str | None) -> httpx.Response:
    return client.post("/api/v1/tasks", json=body, headers={"Idempotency-Key": key} if key is not None else {})


def test_a_retry_with_the_same_key_and_body_returns_the_first_task(ctx: ServiceContext, demo: TestClient) -> None:
    first = post(demo, TASK, "k-1")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    # Key order in the body does not matter: the canonical JSON is hashed.
    again = post(demo, dict(reversed(list(TASK.items()))), "k-1")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert tasks_named(ctx, "idem-task") == 1
    # Without a key every submit is a new task, as before.
    assert post(demo, TASK, None).status_code == 201 and post(demo, TASK, None).status_code == 201
    assert tasks_named(ctx, "idem-task") == 3


def test_the_same_key_with_another_body_is_a_conflict_naming_the_key(ctx: ServiceContext, demo: TestClient) -> None:
    assert post(demo, TASK, "k-2").status_code == 201
    other = post(demo, {**TASK, "command": "echo other"}, "k-2")
    assert other.status_code == 409, other.text
    assert "Idempotency-Key 'k-2'" in other.json()["message"] and "different request body" in other.json()["message"]
    assert tasks_named(ctx, "idem-task") == 1


def test_keys_are_per_user_and_expire_after_a_day(ctx: ServiceContext, demo: TestClient) -> None:
    alice = make_user(demo, "alice", ("member", "ai-lab/nlp"))
    mine = post(demo, TASK, "shared-key").json()["id"]
    hers = post(alice, TASK, "shared-key")
    assert hers.status_code == 201 and hers.json()["id"] != mine  # another user's key is independent
    assert post(alice, TASK, "shared-key").json()["id"] == hers.json()["id"]
    ctx.clock.advance(24 * 3600 + 1)
    fresh = post(demo, {**TASK, "command": "echo a day later"}, "shared-key")  # expired: the key is free again
    assert fresh.status_code == 201 and fresh.json()["id"] != mine
    with ctx.db.transaction() as session:
        assert idempotency.purge_expired(ctx, session) == 1  # alice's stale key; admin's was replaced


def test_a_bad_key_is_a_422_naming_the_header(demo: TestClient) -> None:
    for key in ["", "   ", "x" * 201, "naïve", "tab\there"]:
        response = demo.post("/api/v1/tasks", json=TASK, headers=[("Idempotency-Key", key.encode("utf-8"))])
        assert response.status_code == 422, (key, response.text)
        assert "Idempotency-Key" in response.json()["message"] and "printable ASCII" in response.json()["message"]


def test_concurrent_first_requests_with_one_key_create_one_task(ctx: ServiceContext, demo: TestClient) -> None:
    user_id = 4242  # keys are scoped by this id; the user need not exist for the race
    n = 8
    barrier, results, errors = threading.Barrier(n), [], []

    def go() -> None:
        barrier.wait()
        try:
            results.append(idempotency.submit(ctx, dict(TASK), user_id=user_id, actor="admin", key="race"))
        except Exception as exc:  # collected: a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len({body.id for body, _ in results}) == 1
    assert sorted(replayed for _, replayed in results) == [False] + [True] * (n - 1)
    assert tasks_named(ctx, "idem-task") == 1


def test_the_cli_sends_a_key_and_retries_a_lost_connection_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hetpool.cli import main as cli

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Idempotency-Key", ""))
        if len(seen) == 1:
            raise httpx.ConnectError("connection reset", request=request)
        # A whole task body: the client parses answers into TaskResponse.
        task = {"id": "t-cli", "name": "cli-task", "tenant": "ai-lab", "env": "dev", "type": "training", "priority": "normal", "state": "queued"}
        none = ("template", "cluster", "backend", "job_id", "exit_code", "message", "fallback_used", "admitted_at", "started_at", "finished_at")
        task |= {**dict.fromkeys(none), "attempt": 0, "created_by": "admin", "created_at": "2026-01-01T00:00:00Z", "placements": []}
        return httpx.Response(201, json=task)

    monkeypatch.setattr(cli, "_client", lambda url, token: HetpoolClient("http://hetpool", "tok", transport=httpx.MockTransport(handler)))
    task = tmp_path / "task.yaml"
    task.write_text("name: cli-task\ntenant: ai-lab\ntype: training\ncommand: 'true'\n")
    result = CliRunner().invoke(cli.app, ["submit", "-f", str(task)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "t-cli"
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0].startswith("cli-")  # the retry reuses the key
    seen.clear()
    result = CliRunner().invoke(cli.app, ["submit", "-f", str(task), "--idempotency-key", "my-key"])
    assert result.exit_code == 0 and seen == ["my-key", "my-key"]


def test_a_crash_between_backend_submit_and_commit_is_adopted_by_job_name_not_run_twice(ctx: ServiceContext, api: TestClient, tmp_path: Path) -> None:
    from hetpool.engines.base import job_name
    from hetpool.server.services.inventory import load_inventory
    from hetpool.server.services.task_lifecycle import get_row
    from hetpool.server.services.task_views import placements_of
    from hetpool.server.workers.dispatcher import _launch_request, dispatch_once
    from hetpool.server.workers.scheduler import schedule_once
    from tests.server.helpers import drive_until, task_state
    from tests.server.test_concurrency import ESTATE

    assert api.post("/api/v1/apply", json={"documents": ESTATE[:-1]}).status_code == 200
    body = {**TASK, "tenant": "org", "command": "echo ran"}  # each start appends to the log
    task_id = post(api, body, "crash-1").json()["id"]
    schedule_once(ctx)
    assert task_state(api, task_id) == "admitted"
    # The dispatcher's first half: the backend accepts the job ... and the server dies before the commit.
    with ctx.db.transaction() as session:
        row = get_row(session, task_id)
        request = _launch_request(load_inventory(ctx, session).catalog, row, placements_of(session, row), ctx.settings.max_checkpoint_grace_s)
    ctx.backend_for("local").submit(request)
    assert task_state(api, task_id) == "admitted"  # nothing was recorded
    # A restarted dispatcher finds the task still admitted and submits again: the job is found by its name.
    assert dispatch_once(ctx) == 1
    assert api.get(f"/api/v1/tasks/{task_id}").json()["job_id"] == job_name(task_id, 1)
    drive_until(ctx, lambda: task_state(api, task_id) == "succeeded")
    assert api.get(f"/api/v1/tasks/{task_id}/logs").json()["text"].splitlines() == ["ran"]  # the command ran once
