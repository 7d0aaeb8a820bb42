"""Scheduler worker: run one cycle over queued tasks and record its decisions.

load (queued tasks, running work; inventory and live snapshot from the cluster-state
cache) → process (the pure `run_cycle`, no session held) → apply (admissions, preemption
requests and pending explanations, each guarded by the task's state).

One task never stops the pass for the others: a queued task whose stored spec no longer
validates, or whose evaluation raises in the cycle or while its decision is applied, is
*set aside* — failed with the reason (and its audit event) — and the rest is scheduled.
"""

from __future__ import annotations

import logging

from sqlalchemy import bindparam, select, update

from hetpool.core.states import TaskState
from hetpool.scheduling.cycle import CycleResult, run_cycle
from hetpool.scheduling.explain import Explanation, for_tenant
from hetpool.server import tracing
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.server.db.models_idempotency import SchedulerEpochRow
from hetpool.server.leader import check_fence, current_fence
from hetpool.server.services import task_lifecycle
from hetpool.server.services.checkpoints import rounds
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.cycle_inputs import load_cycle, set_aside_message
from hetpool.server.services.queue_cache import queue_cache
from hetpool.server.services.wakeups import wake

ACTOR = "scheduler"
log = logging.getLogger(__name__)


def schedule_once(ctx: ServiceContext) -> CycleResult | None:
    now = ctx.clock.now()
    # load
    with ctx.db.transaction() as session:
        # Read first: whatever another scheduler commits after this read bumps the epoch,
        # so usage loaded below is never newer than the epoch we will compare against.
        epoch = session.execute(select(SchedulerEpochRow.epoch).where(SchedulerEpochRow.id == 1)).scalar_one()
        # The queued tasks from the process's cache: only rows that moved are read again.
        rows = queue_cache(ctx).refresh(session, term=current_fence())
        if not rows:
            return None
        loaded = {row.id: row for row in rows}  # what each task already says, and its row's version
        load = load_cycle(ctx, session, rows, now, whole_queue=True)
        pools = {p.name: p for p in load.inv.pools.values()}
        clusters = load.inv.clusters
        tenant_of = {row.id: row.tenant for row in rows} | {r.id: r.tenant for r in load.running}
    _fail_queued(ctx, load.invalid)
    # process (pure)
    result = run_cycle(load.snap, load.queue, ctx.compat.check, now, **load.options())
    # The nodes this cycle holds for waiting heads: the migration step leaves them alone.
    rounds(ctx).reserved_nodes = frozenset(node for r in result.reservations for node in r.nodes)
    aside = [(d.task_id, set_aside_message(d.set_aside)) for d in result.decisions if d.set_aside]
    try:
        _apply(ctx, result, epoch, loaded, pools, clusters, aside, tenant_of)
    finally:
        _fail_queued(ctx, aside)
    if any(d.admit for d in result.decisions):
        wake(ctx, "dispatch")  # admitted work waits for its submit
    if any(d.victims for d in result.decisions):
        wake(ctx, "reconcile")  # preemptions are carried out there
    return result


def _fail_queued(ctx: ServiceContext, failures: list[tuple[str, str]]) -> None:
    """Fail each still-queued task with its reason, one transaction each."""
    for task_id, message in failures:
        if message.startswith("set aside"):
            log.warning("task %s %s", task_id, message)
        with ctx.db.transaction() as session:
            check_fence(session)
            stale = task_lifecycle.get_row(session, task_id)
            if stale.state == TaskState.QUEUED.value:
                task_lifecycle.transition(ctx, session, stale, TaskState.FAILED, actor=ACTOR, message=message)


def _apply(
    ctx: ServiceContext, result: CycleResult, epoch: int, loaded: dict, pools: dict, clusters: dict, aside: list, tenant_of: dict[str, str]
) -> None:
    """Record the cycle's decisions; a decision that cannot be turned into rows joins `aside`."""
    written: dict = {}  # explanations written, told to the queue cache once committed
    with ctx.db.transaction() as session:
        check_fence(session)  # a replica that lost the lease since its load applies nothing
        if any(d.admit or d.victims for d in result.decisions) and not _claim_epoch(session, epoch):
            # Another replica admitted since our load: our usage and free devices are stale.
            # Apply nothing; the next pass decides again from fresh data.
            return
        # Most decisions of a long queue are "still waiting, for the same reason": those
        # need no write; a new reason is one UPDATE for all of them; only admissions and
        # preemptions read their rows (in one query rather than one each).
        acting = [d for d in result.decisions if (d.admit or d.victims) and not d.set_aside]
        explained = [d for d in result.decisions if not (d.admit or d.victims or d.set_aside)]
        written.update(_write_explanations(session, explained, tenant_of, loaded, aside))
        current = _rows_by_id(session, [d.task_id for d in acting])
        for decision in acting:
            row = current.get(decision.task_id)
            if row is None or row.state != TaskState.QUEUED.value:
                continue  # unchanged, or cancelled meanwhile
            try:  # everything that can fail before a row is written
                attempts = [a.to_dict() for a in decision.assignment.attempts]
                cluster = clusters[pools[decision.assignment.placements[0].pool].cluster] if decision.admit else None
            except Exception as exc:
                aside.append((decision.task_id, set_aside_message(f"{type(exc).__name__}: {exc}")))
                continue
            for victim_id in decision.victims:
                task_lifecycle.request_preemption(ctx, session, victim_id, decision.task_id, decision.preemption_reason)
            if not decision.admit:
                explanation = _stored(decision, tenant_of)
                if row.pending_explanation != explanation:
                    row.pending_explanation = explanation
                    row.placement_attempts = attempts
                    written[row.id] = (row.updated_at, explanation)
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
            # A child of the task's submit span (server/tracing.py): one trace per task.
            pool = decision.assignment.placements[0].pool
            with tracing.task_span(tracing.SPAN_ADMIT, row.id, row.trace_parent, attempt=attempt, cluster=cluster.name, pool=pool):
                task_lifecycle.transition(
                    ctx,
                    session,
                    row,
                    TaskState.ADMITTED,
                    actor=ACTOR,
                    message=decision.explanation.summary,
                    attempt=attempt,
                    cluster=cluster.name,
                    backend=cluster.backend.value,
                    fallback_used=decision.assignment.fallback_used,
                    placement_attempts=attempts,
                    pending_explanation=None,
                    job_id=None,
                    preempt_reason=None,
                )
    queue_cache(ctx).wrote_explanations(written)


_EXPLAIN = (
    update(TaskRow.__table__)
    .where(
        TaskRow.__table__.c.id == bindparam("task_id"),
        TaskRow.__table__.c.state == TaskState.QUEUED.value,
        TaskRow.__table__.c.updated_at == bindparam("loaded_at"),
        TaskRow.__table__.c.attempt == bindparam("loaded_attempt"),
    )
    .values(pending_explanation=bindparam("explanation"), placement_attempts=bindparam("attempts"))
)


def _write_explanations(session, decisions: list, tenant_of: dict[str, str], loaded: dict, aside: list) -> dict:
    """Write the explanations that changed, in one statement, each only onto the row as it
    was loaded (a task cancelled or requeued since keeps what its transition wrote); one
    that cannot be written joins `aside`. Returns what was written: task id → (the row's
    updated_at, explanation)."""
    params, written = [], {}
    for decision in decisions:
        row = loaded.get(decision.task_id)
        if row is None:
            continue
        shown = _shown(decision, tenant_of)
        if shown.matches(row.pending_explanation, queue=decision.queue):
            continue  # most of a long queue: still waiting, for the same reason
        try:
            explanation = {**shown.to_dict(), "queue": decision.queue}
            attempts = [a.to_dict() for a in decision.assignment.attempts]
        except Exception as exc:
            aside.append((decision.task_id, set_aside_message(f"{type(exc).__name__}: {exc}")))
            continue
        params.append({"task_id": row.id, "loaded_at": row.updated_at, "loaded_attempt": row.attempt, "explanation": explanation})
        params[-1]["attempts"] = attempts
        written[row.id] = (row.updated_at, explanation)
    if params:
        session.execute(_EXPLAIN, params)
    return written


def _shown(decision, tenant_of: dict[str, str]) -> Explanation:
    """A waiting task's explanation as its readers may see it (other tenants' task ids left out)."""
    return for_tenant(decision.explanation, tenant_of.get(decision.task_id, ""), tenant_of)


def _stored(decision, tenant_of: dict[str, str]) -> dict:
    """A waiting task's explanation as stored and shown to its readers (the flat form, with
    its queue; other tenants' task ids left out)."""
    return {**_shown(decision, tenant_of).to_dict(), "queue": decision.queue}


def _rows_by_id(session, task_ids: list[str], chunk: int = 500) -> dict[str, TaskRow]:
    rows = {}
    for start in range(0, len(task_ids), chunk):
        part = task_ids[start : start + chunk]
        rows.update((row.id, row) for row in session.execute(select(TaskRow).where(TaskRow.id.in_(part))).scalars())
    return rows


def _claim_epoch(session, loaded: int) -> bool:
    """Compare-and-set the scheduler epoch. The UPDATE holds the row lock (PostgreSQL) or
    the database write lock (SQLite) until commit,
    so cycles apply one at a time, and only from the state they were computed on."""
    bumped = session.execute(update(SchedulerEpochRow).where(SchedulerEpochRow.id == 1, SchedulerEpochRow.epoch == loaded).values(epoch=loaded + 1))
    return bumped.rowcount == 1
