"""A task's state machine: the one function that changes a task's state (`transition`,
which writes the audit event in the same transaction), and the moves built on it —
cancel and preempt. Workers, approvals and the API all change state through here."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.errors import ConflictError, NotFoundError
from hetpool.core.states import TaskState, check_transition
from hetpool.governance.access import preemption_notice
from hetpool.scheduling.migration import MOVE_REASON_PREFIX
from hetpool.server.db.models import TaskRow
from hetpool.server.services import audit
from hetpool.server.services.context import ServiceContext

# The scheduler decides preemptions; the reconciler completes those of running jobs on
# the scheduler's behalf, so both record them under this actor.
PREEMPTING_ACTOR = "scheduler"

_TIMESTAMP_FOR = {
    TaskState.QUEUED: "queued_at",
    TaskState.ADMITTED: "admitted_at",
    TaskState.RUNNING: "started_at",
    TaskState.SUCCEEDED: "finished_at",
    TaskState.FAILED: "finished_at",
    TaskState.CANCELLED: "finished_at",
}


def transition(ctx: ServiceContext, session: Session, row: TaskRow, target: TaskState, *, actor: str, message: str = "", **fields: Any) -> None:
    """The only place a task's state changes; writes the audit event in the same transaction."""
    current = TaskState(row.state)
    check_transition(current, target)
    now = ctx.clock.now()
    before = {"state": current.value}
    row.state = target.value
    row.updated_at = now
    if message:
        row.message = message
    stamp = _TIMESTAMP_FOR.get(target)
    # queued_at keeps a requeued (preempted) task's age; started_at is set by the first
    # RUNNING of an attempt (preemption clears it for the next attempt).
    if stamp and (stamp not in ("started_at", "queued_at") or getattr(row, stamp) is None):
        setattr(row, stamp, now)
    if target == TaskState.ADMITTED:  # a new admission's dispatch does not inherit an old backoff
        row.dispatch_failures, row.dispatch_unclassified, row.dispatch_retry_at = 0, 0, None
    for key, value in fields.items():
        setattr(row, key, value)
    after = {"state": target.value, **({"message": message} if message else {}), **{k: v for k, v in fields.items() if _jsonable(v)}}
    audit.record(session, actor=actor, action=f"task.{target.value}", object_kind="Task", object_id=row.id, before=before, after=after, ts=now)


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))


def get_row(session: Session, task_id: str, *, for_update: bool = False) -> TaskRow:
    stmt = select(TaskRow).where(TaskRow.id == task_id)
    if for_update and session.bind.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    row = session.execute(stmt).scalar_one_or_none()
    if row is None:
        raise NotFoundError(f"task {task_id!r} not found")
    return row


def cancel(ctx: ServiceContext, session: Session, task_id: str, actor: str) -> TaskRow:
    row = get_row(session, task_id, for_update=True)
    state = TaskState(row.state)
    if state.terminal:
        raise ConflictError(f"task {task_id} already ended ({state.value}); nothing to cancel")
    if state in (TaskState.DISPATCHED, TaskState.RUNNING, TaskState.UNKNOWN):
        # The backend job must be stopped first; the reconciler does that outside any
        # transaction and then records the cancellation.
        if not row.cancel_requested:
            row.cancel_requested = True
            audit.record(session, actor=actor, action="task.cancel_requested", object_kind="Task", object_id=row.id, ts=ctx.clock.now())
        return row
    transition(ctx, session, row, TaskState.CANCELLED, actor=actor, message=f"cancelled by {actor}")
    return row


def request_preemption(ctx: ServiceContext, session: Session, victim_id: str, preemptor_id: str, reason: str) -> None:
    """Ask a running task to give its devices back. Not yet dispatched: requeue at once;
    on a backend: the reconciler stops the job first, then calls `preempt_now`."""
    victim = get_row(session, victim_id, for_update=True)
    state = TaskState(victim.state)
    if victim.preempt_reason or state not in (TaskState.ADMITTED, TaskState.DISPATCHED, TaskState.RUNNING, TaskState.UNKNOWN):
        return
    message = reason or f"preempted by {preemptor_id}"
    preemptor = session.get(TaskRow, preemptor_id)
    if preemptor is not None:  # the victim's readers see this message: no other tenant's task id or path
        message = preemption_notice(victim.tenant, preemptor.tenant, preemptor_id, message)
    if state == TaskState.ADMITTED:
        preempt_now(ctx, session, victim, message)
    else:
        victim.preempt_reason = message
        audit.record(
            session,
            actor=PREEMPTING_ACTOR,
            action="task.preempt_requested",
            object_kind="Task",
            object_id=victim.id,
            after={"reason": message},
            ts=ctx.clock.now(),
        )


def preempt_now(ctx: ServiceContext, session: Session, victim: TaskRow, message: str, resume: dict | None = None) -> None:
    """Record the preemption and put the task back in its queue (keeping its age). `resume`:
    for a task stopped for a checkpoint, what it leaves to its next attempt
    (checkpoints.resume_fields, computed by the reconciler that stopped it)."""
    resume = {"stop_signalled_at": None, **(resume or {})}
    if resume.get("resume_from") is not None:
        message = f"{message}; resumes from attempt {resume['resume_from']}'s checkpoint"
    counted = 0 if message.startswith(MOVE_REASON_PREFIX) else 1  # a move to faster devices is not held against the task
    transition(
        ctx, session, victim, TaskState.PREEMPTED, actor=PREEMPTING_ACTOR, message=message, preemptions=victim.preemptions + counted, started_at=None
    )
    transition(ctx, session, victim, TaskState.QUEUED, actor=PREEMPTING_ACTOR, message=message, preempt_reason=None, job_id=None, **resume)
