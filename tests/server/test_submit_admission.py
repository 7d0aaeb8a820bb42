"""Submit is admission, not planning: the spec is resolved, "could it ever fit" and the
quota ceiling are per-shape verdicts cached until the inventory changes (checked against
the estate as configured: what is unhealthy now may be back),
and no live placement is computed (the scheduler places the task on its next cycle)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient
from sqlalchemy import event

from hetpool.server.services.cluster_state import cluster_state
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.scheduler import schedule_once

H800_TASK = {
    "tenant": "ai-lab/nlp/llm-sft",
    "command": "sleep 1",
    "per_worker": {"devices": {"class": "gpu", "models": ["nvidia-h800"], "count": 8}, "cpu": 8, "memory_gb": 64},
}


def submit(client: TestClient, name: str, **fields):
    return client.post("/api/v1/tasks", json={**H800_TASK, "name": name, **fields})


@contextmanager
def statements(ctx: ServiceContext) -> Iterator[list[str]]:
    """The SQL statements run meanwhile."""
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_args) -> None:
        seen.append(statement)

    event.listen(ctx.db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(ctx.db.engine, "before_cursor_execute", record)


def test_submits_of_one_shape_share_their_admission_verdicts(ctx: ServiceContext, demo: TestClient) -> None:
    assert submit(demo, "first").status_code == 201
    state = cluster_state(ctx)
    misses, loads = state.verdict_misses, state.inventory_loads
    for i in range(5):  # names, commands and variables are not part of the shape
        assert submit(demo, f"sweep-{i}", command=f"python train.py --seed {i}", env_vars={"SEED": str(i)}).status_code == 201
    assert (state.verdict_misses, state.inventory_loads) == (misses, loads)
    # Another shape, or another tenant (reserved pools and quotas are per tenant), is judged anew.
    assert submit(demo, "smaller", per_worker={**H800_TASK["per_worker"], "cpu": 4}).status_code == 201
    assert state.verdict_misses > misses
    misses = state.verdict_misses
    assert submit(demo, "other-tenant", tenant="ai-lab/cv").status_code == 201
    assert state.verdict_misses > misses


def test_submit_reads_no_allocations(ctx: ServiceContext, demo: TestClient) -> None:
    assert submit(demo, "warm").status_code == 201
    with statements(ctx) as seen:
        created = submit(demo, "admitted-later")
    assert created.status_code == 201 and created.json()["state"] == "queued"  # placed by the scheduler's next cycle
    assert not [s for s in seen if "placements" in s.lower()], "submit looked at the live estate"


def test_what_is_unhealthy_now_makes_a_task_wait_not_refused(ctx: ServiceContext, demo: TestClient) -> None:
    """A device reported abnormal (or a node down while its engine's controller restarts)
    may be back: a task only it could run is accepted and waits, and runs once it is back.
    Only what the configured estate could never run is refused."""
    broken = [{"index": 0, "model": "nvidia-h800", "health": "abnormal"}]
    assert demo.post("/api/v1/agent/heartbeat", json={"node": "gpu-h01", "devices": broken}).status_code == 200
    waiting = submit(demo, "eight-of-seven")
    assert waiting.status_code == 201 and waiting.json()["state"] == "queued", waiting.text
    schedule_once(ctx)
    pending = demo.get(f"/api/v1/tasks/{waiting.json()['id']}").json()
    assert pending["state"] == "queued" and pending["pending"]["fits_when_idle"] is False, pending
    assert "unhealthy" in pending["pending"]["summary"] or "abnormal" in pending["pending"]["summary"], pending["pending"]["summary"]
    healthy = [{"index": i, "model": "nvidia-h800", "health": "ok"} for i in range(8)]
    assert demo.post("/api/v1/agent/heartbeat", json={"node": "gpu-h01", "devices": healthy}).status_code == 200
    schedule_once(ctx)
    assert demo.get(f"/api/v1/tasks/{waiting.json()['id']}").json()["state"] == "admitted"
    nine = {**H800_TASK["per_worker"], "devices": {"class": "gpu", "models": ["nvidia-h800"], "count": 9}}
    refused = submit(demo, "nine-of-eight", per_worker=nine)  # no node has nine: never
    assert refused.status_code == 422 and "cannot run on any pool, even when idle" in refused.json()["message"]


def test_a_cached_refusal_names_each_task(demo: TestClient) -> None:
    too_big = {**H800_TASK["per_worker"], "devices": {"class": "gpu", "models": ["nvidia-h800"], "count": 9}}
    for name in ("big-1", "big-2"):
        refused = submit(demo, name, per_worker=too_big)
        assert refused.status_code == 422, refused.text
        assert refused.json()["message"].startswith(f"task {name!r} cannot run on any pool")


def test_a_quota_change_changes_the_cached_quota_verdict(demo: TestClient) -> None:
    quota = {"kind": "Quota", "name": "llm-sft", "tenant": "ai-lab/nlp/llm-sft", "limits": [{"resource": "nvidia-h800", "nominal": 4}]}
    assert demo.post("/api/v1/apply", json={"documents": [quota]}).status_code == 200
    refused = submit(demo, "over-quota")
    assert refused.status_code == 422 and refused.json()["code"] == "exceeds_quota", refused.text
    assert submit(demo, "elsewhere", tenant="ai-lab/cv").status_code == 201  # same shape, a tenant without the quota
    raised = {**quota, "limits": [{"resource": "nvidia-h800", "nominal": 8}]}
    assert demo.post("/api/v1/apply", json={"documents": [raised]}).status_code == 200
    assert submit(demo, "within-quota").status_code == 201
