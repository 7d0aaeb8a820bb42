"""Scheduler worker: run one cycle over queued tasks and record admissions."""

from __future__ import annotations

from sqlalchemy import select

from hetpool.core.states import TaskState
from hetpool.scheduling.cycle import CycleResult, QueuedTask, run_cycle
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.server.services import tasks as task_service
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory

ACTOR = "scheduler"


def schedule_once(ctx: ServiceContext) -> CycleResult | None:
    # load
    with ctx.db.transaction() as session:
        rows = session.execute(select(TaskRow).where(TaskRow.state == TaskState.QUEUED.value)).scalars().all()
        if not rows:
            return None
        inv = load_inventory(ctx, session)
        snap = task_service.current_snapshot(ctx, session, inv)
        queue = []
        for row in rows:
            try:
                spec = task_service.resolve_task_spec(inv, {k: v for k, v in row.spec.items() if k != "kind"})
            except Exception as exc:  # inventory changed under the task (tenant/template deleted)
                spec = None
                with ctx.db.transaction() as inner:
                    stale = task_service.get_row(inner, row.id)
                    if stale.state == TaskState.QUEUED.value:
                        task_service.transition(ctx, inner, stale, TaskState.FAILED, actor=ACTOR, message=f"spec no longer valid: {exc}")
            if spec is not None:
                queue.append(QueuedTask(row.id, spec, task_service.aware(row.queued_at)))
        pools = {p.name: p for p in inv.pools.values()}
        clusters = inv.clusters
    # process (pure)
    result = run_cycle(snap, queue, ctx.compat.check, ctx.clock.now())
    # apply
    with ctx.db.transaction() as session:
        for decision in result.decisions:
            row = session.get(TaskRow, decision.task_id)
            if row is None or row.state != TaskState.QUEUED.value:
                continue  # cancelled meanwhile
            attempts = [a.to_dict() for a in decision.assignment.attempts]
            if not decision.admit:
                if row.pending_explanation != decision.explanation:
                    row.pending_explanation = decision.explanation
                    row.placement_attempts = attempts
                continue
            attempt = row.attempt + 1
            for p in decision.assignment.placements:
                session.add(
                    PlacementRow(
                        task_id=row.id,
                        attempt=attempt,
                        rank=p.rank,
                        node=p.node,
                        pool=p.pool,
                        model=p.model,
                        device_indices=list(p.device_indices),
                        device_fraction=p.device_fraction,
                        cpu=p.cpu,
                        memory_gb=p.memory_gb,
                        price_per_hour=p.price_per_hour,
                    )
                )
            cluster = clusters[pools[decision.assignment.placements[0].pool].cluster]
            task_service.transition(
                ctx,
                session,
                row,
                TaskState.ADMITTED,
                actor=ACTOR,
                message=decision.explanation["summary"],
                attempt=attempt,
                cluster=cluster.name,
                backend=cluster.backend.value,
                fallback_used=decision.assignment.fallback_used,
                placement_attempts=attempts,
                pending_explanation=None,
                job_id=None,
            )
    return result
