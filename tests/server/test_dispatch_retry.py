"""The dispatcher against an engine whose submit fails, by kind (engines/base.py classify):
a transient error keeps the task admitted with the reason and retries it after growing
delays (on the injected clock), a permanent one fails it with the engine's message, an
unclassified one fails it only after UNCLASSIFIED_LIMIT in a row, and a submit that timed
out after the engine accepted the job is adopted on the retry, not started twice. The
engine is the real local backend wrapped to fail, as a network error would."""

from __future__ import annotations

import random
from datetime import datetime

from fastapi.testclient import TestClient

from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.base import PermanentEngineError
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.dispatcher import (
    BACKOFF_CAP_S,
    DELAYED_ACTION,
    UNCLASSIFIED_LIMIT,
    dispatch_once,
    retry_delay_s,
)
from hetpool.server.workers.reconciler import reconcile_once
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task, run_to_end, task_state


class FlakySubmit:
    """The local backend, but `submit` raises `error` while it is set; counts the submits that reached it."""

    def __init__(self, inner, error: Exception | None = None, accept_then_raise: bool = False) -> None:
        self.inner, self.error, self.accept_then_raise = inner, error, accept_then_raise
        self.kind = inner.kind
        self.calls = 0
        self.accepted = 0

    def submit(self, request):
        self.calls += 1
        if self.error is not None and not self.accept_then_raise:
            raise self.error
        handle = self.inner.submit(request)
        self.accepted += 1
        if self.error is not None:  # the engine took the job, but the answer never arrived
            raise self.error
        return handle

    def __getattr__(self, name):
        return getattr(self.inner, name)


class MaxJitter(random.Random):
    """Always the top of the jitter range, so the delays are the backoff's ceilings."""

    def uniform(self, a: float, b: float) -> float:
        return b


def _admitted_task(ctx: ServiceContext, api: TestClient, command: str = "echo hello") -> str:
    task_id = api.post("/api/v1/tasks", json={**example_task("data-prep.yaml"), "command": command}).json()["id"]
    schedule_once(ctx)
    assert task_state(api, task_id) == "admitted"
    return task_id


def _task(api: TestClient, task_id: str) -> dict:
    return api.get(f"/api/v1/tasks/{task_id}").json()


def _next_try(message: str) -> datetime:
    stamp = message.split("next try after ", 1)[1].split(")", 1)[0]
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_transient_errors_keep_the_task_admitted_with_growing_delays_then_it_dispatches_once(ctx: ServiceContext, demo: TestClient) -> None:
    outage = BackendUnavailableError("slurm: sbatch could not reach slurmctld: Unable to contact slurm controller")
    engine = FlakySubmit(ctx.backends["local"], outage)
    ctx.backends["local"] = engine
    task_id = _admitted_task(ctx, demo)
    delays = []
    for _ in range(5):
        dispatch_once(ctx, rng=MaxJitter())
        body = _task(demo, task_id)
        assert body["state"] == "admitted" and body["placements"]  # still holds its capacity
        assert "waiting for the local backend (transient error" in body["message"] and "Unable to contact slurm controller" in body["message"]
        retry_at = _next_try(body["message"])
        delays.append((retry_at - ctx.clock.now()).total_seconds())
        calls = engine.calls
        dispatch_once(ctx, rng=MaxJitter())  # not due yet: the engine is left alone
        assert engine.calls == calls
        ctx.clock.advance(delays[-1])
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0]
    delayed = [e for e in _task(demo, task_id)["events"] if e["action"] == DELAYED_ACTION]
    assert len(delayed) == 1 and delayed[0]["after"]["fault"] == "transient"  # the first failure only

    engine.error = None
    assert dispatch_once(ctx) == 1
    body = run_to_end(ctx, demo, task_id)
    assert body["state"] == "succeeded" and engine.accepted == 1
    states = [e["after"]["state"] for e in body["events"] if e["after"] and "state" in e["after"]]
    assert "failed" not in states and states.count("dispatched") == 1
    dispatched = next(e for e in body["events"] if e["action"] == "task.dispatched")
    assert dispatched["after"]["message"] == "dispatched after 5 failed tries"


def test_backoff_is_capped_and_jittered() -> None:
    rng = random.Random(7)
    assert retry_delay_s(1, MaxJitter()) == 2.0 and retry_delay_s(50, MaxJitter()) == BACKOFF_CAP_S
    samples = [retry_delay_s(10, rng) for _ in range(200)]
    assert all(0.0 <= s <= BACKOFF_CAP_S for s in samples) and len({round(s, 3) for s in samples}) > 150


def test_a_permanent_error_fails_the_task_with_the_engines_message(ctx: ServiceContext, demo: TestClient) -> None:
    ctx.backends["local"] = FlakySubmit(ctx.backends["local"], PermanentEngineError("sbatch refused hetpool-x-1: Invalid partition name specified"))
    task_id = _admitted_task(ctx, demo)
    dispatch_once(ctx)
    body = _task(demo, task_id)
    assert body["state"] == "failed" and body["message"] == "dispatch to local failed: sbatch refused hetpool-x-1: Invalid partition name specified"


def test_an_invalid_request_fails_at_once(ctx: ServiceContext, demo: TestClient) -> None:
    ctx.backends["local"] = FlakySubmit(ctx.backends["local"], ValueError("never fit: rank 0 asks for 9 GPUs"))
    task_id = _admitted_task(ctx, demo)
    dispatch_once(ctx)
    assert _task(demo, task_id)["state"] == "failed" and "never fit" in _task(demo, task_id)["message"]


def test_unclassified_errors_fail_the_task_only_after_the_limit(ctx: ServiceContext, demo: TestClient) -> None:
    engine = FlakySubmit(ctx.backends["local"], RuntimeError("something odd"))
    ctx.backends["local"] = engine
    task_id = _admitted_task(ctx, demo)
    for _ in range(UNCLASSIFIED_LIMIT - 1):
        dispatch_once(ctx)
        assert _task(demo, task_id)["state"] == "admitted" and "unclassified error" in _task(demo, task_id)["message"]
        ctx.clock.advance(BACKOFF_CAP_S)
    dispatch_once(ctx)
    body = _task(demo, task_id)
    assert body["state"] == "failed" and f"{UNCLASSIFIED_LIMIT} times in a row" in body["message"] and "something odd" in body["message"]


def test_a_transient_error_resets_the_unclassified_streak(ctx: ServiceContext, demo: TestClient) -> None:
    engine = FlakySubmit(ctx.backends["local"], RuntimeError("odd"))
    ctx.backends["local"] = engine
    task_id = _admitted_task(ctx, demo)
    for i in range(2 * UNCLASSIFIED_LIMIT):
        engine.error = RuntimeError("odd") if i % 2 else ConnectionError("connection refused")
        dispatch_once(ctx)
        ctx.clock.advance(BACKOFF_CAP_S)
    assert _task(demo, task_id)["state"] == "admitted"


def test_a_submit_that_timed_out_after_the_engine_took_the_job_is_adopted(ctx: ServiceContext, demo: TestClient) -> None:
    engine = FlakySubmit(ctx.backends["local"], TimeoutError("read timed out"), accept_then_raise=True)
    ctx.backends["local"] = engine
    task_id = _admitted_task(ctx, demo, command="echo ran-once")
    dispatch_once(ctx)
    assert _task(demo, task_id)["state"] == "admitted" and engine.accepted == 1
    engine.error = None
    ctx.clock.advance(BACKOFF_CAP_S)
    assert dispatch_once(ctx) == 1
    body = run_to_end(ctx, demo, task_id)
    assert body["state"] == "succeeded"
    log = demo.get(f"/api/v1/tasks/{task_id}/logs").json()
    assert log["text"].count("ran-once") == 1  # the retry found the job by its name: one run


def test_a_cancel_during_the_backoff_ends_the_task_without_a_submit(ctx: ServiceContext, demo: TestClient) -> None:
    engine = FlakySubmit(ctx.backends["local"], ConnectionError("connection refused"))
    ctx.backends["local"] = engine
    task_id = _admitted_task(ctx, demo)
    dispatch_once(ctx)
    assert demo.post(f"/api/v1/tasks/{task_id}/cancel").status_code == 200
    engine.error = None
    ctx.clock.advance(BACKOFF_CAP_S)
    dispatch_once(ctx)
    assert _task(demo, task_id)["state"] == "cancelled" and engine.accepted == 0


class FailingPoll:
    """The local backend, but `poll` raises `error` while it is set."""

    def __init__(self, inner) -> None:
        self.inner, self.error, self.kind = inner, None, inner.kind

    def poll(self, handles):
        if self.error is not None:
            raise self.error
        return self.inner.poll(handles)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_poll_error_of_any_kind_leaves_the_task_unknown_with_its_kind(ctx: ServiceContext, demo: TestClient) -> None:
    engine = FailingPoll(ctx.backends["local"])
    ctx.backends["local"] = engine
    task_id = _admitted_task(ctx, demo, command="sleep 2; echo done")
    dispatch_once(ctx)
    kinds = ((RuntimeError("odd answer"), "could not be polled (unclassified error): odd answer"), (ValueError("bad"), "(permanent error)"))
    for error, said in kinds:
        engine.error = error
        reconcile_once(ctx)
        body = _task(demo, task_id)
        assert body["state"] == "unknown" and said in body["message"]
        engine.error = None
        reconcile_once(ctx)  # the engine answers again: the job is still there
    assert run_to_end(ctx, demo, task_id)["state"] == "succeeded"
