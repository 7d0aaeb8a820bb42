"""Dispatcher worker: hand admitted tasks to their backend, exactly once per attempt.

The backend call happens outside any transaction. If the process dies after the
backend accepted the job but before the commit, the task is still `admitted` on the
next pass; `submit` is idempotent per (task, attempt) — the backend finds the job by
its deterministic name — so the job is adopted, not started again.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from hetpool.core.states import TaskState
from hetpool.engines.base import JobHandle, LaunchRequest, WorkerLaunch
from hetpool.server import tracing
from hetpool.server.db.models import TaskRow
from hetpool.server.leader import check_fence
from hetpool.server.services import task_lifecycle
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.task_views import placements_of

log = logging.getLogger(__name__)
ACTOR = "dispatcher"


def _launch_request(catalog, row: TaskRow, placements) -> LaunchRequest:
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
    )


def dispatch_once(ctx: ServiceContext) -> int:
    with ctx.db.transaction() as session:
        rows = session.execute(select(TaskRow).where(TaskRow.state == TaskState.ADMITTED.value)).scalars().all()
        if not rows:
            return 0
        inv = load_inventory(ctx, session)
        catalog = inv.catalog
        work, unlaunchable = [], []
        for r in rows:
            try:
                request = _launch_request(catalog, r, placements_of(session, r))
            except Exception as exc:  # one task's stored data must not hold back the others' dispatch
                log.exception("task %s cannot be turned into a launch request", r.id)
                unlaunchable.append((r.id, r.attempt, f"set aside by the dispatcher: {type(exc).__name__}: {exc}"[:600]))
                continue
            work.append((r.id, r.attempt, r.backend, inv.clusters.get(r.cluster or ""), request, r.trace_parent))
    for task_id, attempt, message in unlaunchable:
        with ctx.db.transaction() as session:
            check_fence(session)
            row = task_lifecycle.get_row(session, task_id, for_update=True)
            if row.attempt == attempt and row.state == TaskState.ADMITTED.value:
                task_lifecycle.transition(ctx, session, row, TaskState.FAILED, actor=ACTOR, message=message)
    dispatched = 0
    for task_id, attempt, backend_kind, cluster, request, trace_parent in work:
        # One span per dispatch in the task's trace; logs inside carry task_id (server/tracing.py).
        with tracing.task_span(tracing.SPAN_DISPATCH, task_id, trace_parent, backend=backend_kind, attempt=attempt):
            try:
                backend = ctx.backend_for(backend_kind, cluster)
                with tracing.task_span(tracing.SPAN_ENGINE_SUBMIT, task_id, backend=backend_kind) as span:
                    handle = backend.submit(request)
                    if span is not None:
                        span.set_attribute("hetpool.job_id", handle.job_id)
                error = None
            except Exception as exc:  # a backend refusing the job fails the task with the reason
                log.exception("dispatch of %s failed", task_id)
                handle, error = None, f"dispatch to {backend_kind} failed: {exc}"
            with ctx.db.transaction() as session:
                check_fence(session)  # a replica that lost the lease records nothing; the new leader adopts the job by its name
                row = task_lifecycle.get_row(session, task_id, for_update=True)
                if row.attempt != attempt or row.state != TaskState.ADMITTED.value:
                    if handle is not None and row.attempt == attempt and row.state == TaskState.CANCELLED.value:
                        cancel_later = handle
                    else:
                        cancel_later = None
                else:
                    cancel_later = None
                    if error:
                        task_lifecycle.transition(ctx, session, row, TaskState.FAILED, actor=ACTOR, message=error)
                    else:
                        task_lifecycle.transition(ctx, session, row, TaskState.DISPATCHED, actor=ACTOR, job_id=handle.job_id)
                        dispatched += 1
            if cancel_later is not None:
                # Cancelled while we were submitting: stop what we just started.
                ctx.backend_for(backend_kind, cluster).cancel(JobHandle(cancel_later.backend, cancel_later.job_id))
    return dispatched
