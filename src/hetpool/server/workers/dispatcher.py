"""Dispatcher worker: hand admitted tasks to their backend, exactly once per attempt.

The backend call happens outside any transaction. If the process dies after the
backend accepted the job but before the commit, the task is still `admitted` on the
next pass; `submit` is idempotent per (task, attempt) — the backend finds the job by
its deterministic name — so the job is adopted, not started again. The same holds for a
submit that timed out after the engine had accepted it: the retry adopts the job.

A failed submit is judged by its kind (engines/base.py `classify`, docs/backends.md#engine-errors):

- transient (engine unreachable, timeout, 5xx, throttled): the task stays `admitted`
  with the reason in its message and is tried again after an exponential backoff with
  full jitter (BACKOFF_BASE_S doubling up to BACKOFF_CAP_S), however long the outage
  lasts — a flaky controller delays work, it never fails it. The backoff lives on the
  row (`dispatch_*`), so a restart or a new leader keeps it. Only the first failure of
  a streak is audited (`task.dispatch_delayed`): an outage must not flood the chain.
- permanent (invalid request, unsupported, refused): the task fails with the engine's message.
- unclassified (an error no engine client put a kind on): retried like a transient one,
  but UNCLASSIFIED_LIMIT of them in a row fail the task — a bug must not keep work
  admitted, holding its devices, forever.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import or_, select

from hetpool.core.clock import iso_utc
from hetpool.core.inventory import ClusterSpec
from hetpool.core.states import TaskState
from hetpool.engines.base import EngineFault, JobHandle, LaunchRequest, WorkerLaunch, classify
from hetpool.server import tracing
from hetpool.server.db.claims import ClaimSet, claim_batch
from hetpool.server.db.models import TaskRow
from hetpool.server.leader import check_fence
from hetpool.server.services import audit, checkpoints, task_lifecycle
from hetpool.server.services.cluster_state import read_inventory
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.task_views import placements_of

log = logging.getLogger(__name__)
ACTOR = "dispatcher"
BACKOFF_BASE_S = 2.0
BACKOFF_CAP_S = 300.0
UNCLASSIFIED_LIMIT = 5
DELAYED_ACTION = "task.dispatch_delayed"
FAILED_LOG = "dispatch of %s to %s failed (%s): %s"  # server/metrics.py counts these lines
_JITTER = random.Random()


def retry_delay_s(failures: int, rng: random.Random = _JITTER) -> float:
    """Seconds before the next try after `failures` failed tries in a row: "full jitter",
    uniform in [0, min(cap, base·2^(failures-1))], so tasks that failed together on one
    outage do not all come back in the same second."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(failures - 1, 30))
    return rng.uniform(0.0, ceiling)


@dataclass(frozen=True)
class DispatchItem:
    """One admitted task's submit, as plain values (no session needed to run it)."""

    task_id: str
    attempt: int
    backend_kind: str
    cluster: ClusterSpec | None
    request: LaunchRequest
    trace_parent: str | None

    @property
    def lane(self) -> tuple[str, str]:
        """(backend kind, cluster name): the dispatch pipeline runs each lane's submits apart (workers/lanes.py)."""
        return (self.backend_kind, self.cluster.name if self.cluster is not None else "")


def _launch_request(catalog, row: TaskRow, placements, max_grace_s: float) -> LaunchRequest:
    checkpoint = checkpoints.checkpoint_of(row, max_grace_s)
    workers = []
    for p in placements:
        model = catalog.get(p.model) if p.model in catalog else None
        devices_requested = row.spec.get("per_worker", {}).get("devices")
        workers.append(
            WorkerLaunch(
                rank=p.rank,
                node=p.node,
                pool=p.pool,
                model=p.model,
                device_indices=list(p.device_indices) if devices_requested else [],
                visible_devices_env=(model.visible_devices_env if model and devices_requested else ""),
                cpu=p.cpu,
                memory_gb=p.memory_gb,
            )
        )
    return LaunchRequest(
        task_id=row.id,
        attempt=row.attempt,
        name=row.name,
        tenant=row.tenant,
        command=row.spec.get("command") or "true",
        workers=workers,
        env=dict(row.spec.get("env_vars") or {}),
        image=row.spec.get("image") or "",
        stop_signal=checkpoint.signal.value if checkpoint else "",
        stop_grace_s=checkpoint.grace_s if checkpoint else 0.0,
        resume_from=row.resume_from if checkpoint else None,
    )


def dispatch_once(ctx: ServiceContext, rng: random.Random = _JITTER) -> int:
    """Every due admitted task (one batch), submitted one after another: the serial pass
    (tests, WORKER_STEPS); the server's dispatch pipeline runs `dispatch_item` in lanes."""
    items = claim_dispatch_batch(ctx, limit=ctx.settings.batch_of("dispatch"))
    return sum(dispatch_item(ctx, item, rng) for item in items)


def dispatch_item(ctx: ServiceContext, item: DispatchItem, rng: random.Random = _JITTER) -> bool:
    """Submit one task and record the outcome; True when it was dispatched."""
    # One span per dispatch in the task's trace; logs inside carry task_id (server/tracing.py).
    with tracing.task_span(tracing.SPAN_DISPATCH, item.task_id, item.trace_parent, backend=item.backend_kind, attempt=item.attempt):
        handle, error = _submit(ctx, item)
        recorded, cancel_later = _record(ctx, item, handle, error, rng)
    if cancel_later is not None:
        # Cancelled while we were submitting: stop what we just started.
        ctx.backend_for(item.backend_kind, item.cluster).cancel(JobHandle(cancel_later.backend, cancel_later.job_id))
    return recorded


def claim_dispatch_batch(
    ctx: ServiceContext, *, limit: int, claims: ClaimSet | None = None, skip_clusters: frozenset[str] = frozenset()
) -> list[DispatchItem]:
    """At most `limit` admitted tasks due for a try (backoff over), oldest admission first,
    leaving out tasks of `skip_clusters` (full lanes); tasks whose stored data cannot make a
    launch request are failed here."""
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        due = select(TaskRow).where(
            TaskRow.state == TaskState.ADMITTED.value, or_(TaskRow.dispatch_retry_at.is_(None), TaskRow.dispatch_retry_at <= now)
        )
        if skip_clusters:
            due = due.where(TaskRow.cluster.notin_(skip_clusters))
        rows = claim_batch(session, due, key=TaskRow.id, order_by=(TaskRow.admitted_at, TaskRow.id), limit=limit, claims=claims)
        if not rows:
            return []
        inv = read_inventory(ctx, session)
        items, unlaunchable = [], []
        for r in rows:
            try:
                request = _launch_request(inv.catalog, r, placements_of(session, r), ctx.settings.max_checkpoint_grace_s)
            except Exception as exc:  # one task's stored data must not hold back the others' dispatch
                log.exception("task %s cannot be turned into a launch request", r.id)
                unlaunchable.append((r.id, r.attempt, f"set aside by the dispatcher: {type(exc).__name__}: {exc}"[:600]))
                continue
            items.append(DispatchItem(r.id, r.attempt, r.backend, inv.clusters.get(r.cluster or ""), request, r.trace_parent))
    if claims is not None and unlaunchable:
        claims.release([task_id for task_id, _, _ in unlaunchable])
    for task_id, attempt, message in unlaunchable:
        with ctx.db.transaction() as session:
            check_fence(session)
            row = task_lifecycle.get_row(session, task_id, for_update=True)
            if row.attempt == attempt and row.state == TaskState.ADMITTED.value:
                task_lifecycle.transition(ctx, session, row, TaskState.FAILED, actor=ACTOR, message=message)
    return items


def _submit(ctx: ServiceContext, item: DispatchItem) -> tuple[JobHandle | None, Exception | None]:
    try:
        backend = ctx.backend_for(item.backend_kind, item.cluster)
        with tracing.task_span(tracing.SPAN_ENGINE_SUBMIT, item.task_id, backend=item.backend_kind) as span:
            handle = backend.submit(item.request)
            if span is not None:
                span.set_attribute("hetpool.job_id", handle.job_id)
        return handle, None
    except Exception as exc:  # judged by its kind in _record: wait and retry, or fail the task
        fault = classify(exc)
        # A transient error repeats on every try of an outage: one line, no traceback.
        level = logging.ERROR if fault == EngineFault.UNCLASSIFIED else logging.WARNING
        log.log(level, FAILED_LOG, item.task_id, item.backend_kind, fault.value, exc, exc_info=fault != EngineFault.TRANSIENT)
        return None, exc


def _record(
    ctx: ServiceContext, item: DispatchItem, handle: JobHandle | None, error: Exception | None, rng: random.Random
) -> tuple[bool, JobHandle | None]:
    """Write the outcome of one submit: (dispatched, a handle to cancel as the task was cancelled meanwhile)."""
    with ctx.db.transaction() as session:
        check_fence(session)  # a replica that lost the lease records nothing; the new leader adopts the job by its name
        row = task_lifecycle.get_row(session, item.task_id, for_update=True)
        if row.attempt != item.attempt or row.state != TaskState.ADMITTED.value:
            cancelled = row.attempt == item.attempt and row.state == TaskState.CANCELLED.value
            return False, (handle if handle is not None and cancelled else None)
        if handle is not None:
            retried = row.dispatch_failures
            row.dispatch_failures, row.dispatch_unclassified, row.dispatch_retry_at = 0, 0, None
            message = f"dispatched after {retried} failed tries" if retried else ""
            task_lifecycle.transition(ctx, session, row, TaskState.DISPATCHED, actor=ACTOR, job_id=handle.job_id, message=message)
            return True, None
        _failed_try(ctx, session, row, item.backend_kind, error, rng)
        return False, None


def _failed_try(ctx: ServiceContext, session, row: TaskRow, backend_kind: str, error: Exception, rng: random.Random) -> None:
    fault = classify(error)
    failures = row.dispatch_failures + 1
    unclassified = row.dispatch_unclassified + 1 if fault == EngineFault.UNCLASSIFIED else 0
    detail = str(error) or type(error).__name__
    if fault == EngineFault.PERMANENT:
        message = f"dispatch to {backend_kind} failed: {detail}"
    elif unclassified >= UNCLASSIFIED_LIMIT:
        message = f"dispatch to {backend_kind} failed {unclassified} times in a row with an unclassified error: {type(error).__name__}: {detail}"
    else:
        now = ctx.clock.now()
        retry_at = now + timedelta(seconds=retry_delay_s(failures, rng))
        row.dispatch_failures, row.dispatch_unclassified, row.dispatch_retry_at = failures, unclassified, retry_at
        row.message = (
            f"waiting for the {backend_kind} backend ({fault.value} error, {failures} failed tr{'y' if failures == 1 else 'ies'}; "
            f"next try after {iso_utc(retry_at)}): {detail}"
        )[:1000]
        if failures == 1:  # the streak's first failure only: an outage must not flood the audit chain
            after = {"reason": detail[:500], "fault": fault.value, "retry_at": iso_utc(retry_at)}
            audit.record(session, actor=ACTOR, action=DELAYED_ACTION, object_kind="Task", object_id=row.id, after=after, ts=now)
        return
    task_lifecycle.transition(ctx, session, row, TaskState.FAILED, actor=ACTOR, message=message[:1000])
