"""Reconciler worker: follow dispatched work on its backend and record what happened."""

from __future__ import annotations

import logging
from collections import defaultdict

from sqlalchemy import select

from hetpool.core.states import TaskState
from hetpool.engines.base import EngineFault, JobHandle, JobPhase, JobStatus, classify
from hetpool.server.db.claims import Rotation, claim_batch
from hetpool.server.db.models import TaskRow
from hetpool.server.leader import LeadershipLost
from hetpool.server.services import checkpoints, task_lifecycle
from hetpool.server.services.cluster_state import read_inventory
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.reclaim import RECLAIMED
from hetpool.server.services.wakeups import wake

log = logging.getLogger(__name__)
ACTOR = "reconciler"
_FOLLOWED = [TaskState.DISPATCHED.value, TaskState.RUNNING.value, TaskState.UNKNOWN.value]
APPLY_CHUNK = 50  # outcomes per transaction: row locks held briefly, commits few


def reconcile_once(ctx: ServiceContext) -> int:
    """One round: poll at most `batch_of("reconcile")` followed tasks — the next ones after
    the previous round's (a Rotation: each followed task is visited in turn, however many
    there are) — and record what their engines say."""
    rotation = ctx.process_state("reconcile_rotation", Rotation)
    with ctx.db.transaction() as session:
        query = select(TaskRow).where(TaskRow.state.in_(_FOLLOWED))
        rows = claim_batch(session, query, key=TaskRow.id, limit=ctx.settings.batch_of("reconcile"), rotation=rotation)
        # A preemption request stops the job like a cancel does (gracefully, for a task that
        # declared a checkpoint: services/checkpoints.py), then requeues the task.
        now = ctx.clock.now()
        work = [(r.id, r.attempt, r.backend, r.job_id, _stop_step(r, now, ctx.settings.max_checkpoint_grace_s)) for r in rows]
        clusters = read_inventory(ctx, session).clusters if rows else {}
        cluster_of = {r.id: r.cluster or "" for r in rows}
    by_backend: dict[tuple[str, str], list] = defaultdict(list)
    for item in work:
        by_backend[(item[2], cluster_of[item[0]])].append(item)
    changes = 0
    for (backend_kind, cluster_name), items in by_backend.items():
        try:
            backend = ctx.backend_for(backend_kind, clusters.get(cluster_name))
        except LookupError:
            continue
        try:
            for task_id, attempt, _, job_id, step in items:
                _stop(ctx, backend, JobHandle(backend_kind, job_id), task_id, attempt, step)
            statuses = backend.poll([JobHandle(backend_kind, job_id) for _, _, _, job_id, _ in items])
        except Exception as exc:  # of any kind (engines/base.py classify): a failed poll makes its tasks unknown, never failed
            fault = classify(exc)
            what = "unreachable" if fault == EngineFault.TRANSIENT else f"could not be polled ({fault.value} error)"
            report = log.exception if fault == EngineFault.UNCLASSIFIED else log.warning
            report("backend %s of cluster %s %s: %s", backend_kind, cluster_name, what, exc)
            for task_id, attempt, *_ in items:
                changes += _mark_unknown(ctx, task_id, attempt, f"{backend_kind} backend of cluster {cluster_name or '-'} {what}: {exc}")
            continue
        outcomes = [
            (task_id, attempt, statuses.get(job_id, JobStatus(JobPhase.LOST)), step is not None) for task_id, attempt, _, job_id, step in items
        ]
        changes += _record_all(ctx, outcomes)
        if any(status.phase.terminal for _, _, status, _ in outcomes):
            wake(ctx, "schedule")  # devices came back: the queue may move
    return changes


def _stop_step(row: TaskRow, now, max_grace_s: float) -> str | None:
    """None: the job runs on; else this round's step of stopping it (checkpoints.stop_step)."""
    if not (row.cancel_requested or row.preempt_reason):
        return None
    return checkpoints.stop_step(row, now, max_grace_s)


def _stop(ctx: ServiceContext, backend, handle: JobHandle, task_id: str, attempt: int, step: str | None) -> None:
    if step == "cancel":
        backend.cancel(handle)
    elif step == "signal":
        with ctx.db.transaction() as session:
            row = task_lifecycle.get_row(session, task_id, for_update=True)
            checkpoint = checkpoints.checkpoint_of(row, ctx.settings.max_checkpoint_grace_s)
            if row.attempt != attempt or checkpoint is None or row.stop_signalled_at is not None:
                return
        backend.stop_gracefully(handle, checkpoint.signal.value, checkpoint.grace_s)
        # Recorded after the signal went out: a crash in between signals again (harmless),
        # never kills without the grace. The grace counts from here.
        checkpoints.record_signalled(ctx, task_id, attempt, checkpoint)


def _record_all(ctx: ServiceContext, outcomes: list[tuple[str, int, JobStatus, bool]]) -> int:
    """Record a round's outcomes, APPLY_CHUNK tasks per transaction: one commit for many
    transitions instead of one each (on a durable database each commit waits for its WAL
    flush, and a busy round has hundreds). A chunk that fails is recorded again task by
    task, so one task cannot hold back the others (it is retried on the next round)."""
    changes = 0
    for start in range(0, len(outcomes), APPLY_CHUNK):
        chunk = outcomes[start : start + APPLY_CHUNK]
        try:
            with ctx.db.transaction() as session:
                done = sum(_apply(ctx, session, *outcome) for outcome in chunk)
            changes += done
            continue
        except LeadershipLost:
            raise
        except Exception:
            if len(chunk) == 1:
                log.exception("recording the outcome of task %s failed; retried on the next round", chunk[0][0])
                continue
            log.info("recording %d outcomes together failed; recording them one by one", len(chunk))
        for outcome in chunk:
            try:
                with ctx.db.transaction() as session:
                    changes += _apply(ctx, session, *outcome)
            except LeadershipLost:
                raise
            except Exception:
                log.exception("recording the outcome of task %s failed; retried on the next round", outcome[0])
    return changes


def _mark_unknown(ctx: ServiceContext, task_id: str, attempt: int, message: str) -> int:
    with ctx.db.transaction() as session:
        row = task_lifecycle.get_row(session, task_id, for_update=True)
        if row.attempt != attempt or row.state not in (TaskState.DISPATCHED.value, TaskState.RUNNING.value):
            return 0
        task_lifecycle.transition(ctx, session, row, TaskState.UNKNOWN, actor=ACTOR, message=message[:500])
        return 1


def _apply(ctx: ServiceContext, session, task_id: str, attempt: int, status: JobStatus, cancel_requested: bool) -> int:
    """Record one job's status in the caller's transaction; 1 when the task changed."""
    row = task_lifecycle.get_row(session, task_id, for_update=True)
    if row.attempt != attempt or row.state not in _FOLLOWED:
        return 0
    state = TaskState(row.state)
    preempting = bool(row.preempt_reason) and not row.cancel_requested
    # A job asked to stop for a checkpoint has been preempted however it ended (it may exit 0).
    if preempting and (status.phase == JobPhase.CANCELLED or (row.stop_signalled_at is not None and status.phase.terminal)):
        task_lifecycle.preempt_now(ctx, session, row, row.preempt_reason, checkpoints.resume_fields(ctx, session, row))
        return 1
    if cancel_requested and not preempting and status.phase.terminal:
        # A reclaim (stop) set the reason as the message; keep it rather than the generic one.
        message = row.message if row.message.startswith(RECLAIMED) else "cancelled on request"
        task_lifecycle.transition(ctx, session, row, TaskState.CANCELLED, actor=ACTOR, message=message, exit_code=status.exit_code)
        return 1
    # A job that ended on its own before a preemption took effect: record what happened.
    if status.phase in (JobPhase.RUNNING, JobPhase.PENDING) and state == TaskState.UNKNOWN:
        # The backend is back and the job is still there.
        task_lifecycle.transition(ctx, session, row, TaskState.RUNNING, actor=ACTOR, message="backend reachable again")
        return 1
    if status.phase == JobPhase.RUNNING and state == TaskState.DISPATCHED:
        task_lifecycle.transition(ctx, session, row, TaskState.RUNNING, actor=ACTOR)
        return 1
    # A job that ran and ended between two polls was never seen running (the reconcile
    # pipeline runs apart from dispatch now): its dispatch, the task's last change, is the
    # best start known — learned runtimes and history replays need one.
    started = {"started_at": row.updated_at} if state == TaskState.DISPATCHED and row.started_at is None else {}
    if status.phase == JobPhase.SUCCEEDED:
        task_lifecycle.transition(
            ctx, session, row, TaskState.SUCCEEDED, actor=ACTOR, exit_code=status.exit_code or 0, message=status.message, **started
        )
        return 1
    if status.phase == JobPhase.FAILED:
        message = status.message or f"exited with code {status.exit_code}"
        task_lifecycle.transition(ctx, session, row, TaskState.FAILED, actor=ACTOR, exit_code=status.exit_code, message=message, **started)
        return 1
    if status.phase == JobPhase.CANCELLED:
        # Killed outside hetpool (scancel, kubectl delete …): nobody asked, so it failed.
        message = f"cancelled outside hetpool: {status.message}" if status.message else "cancelled outside hetpool (on the backend)"
        task_lifecycle.transition(ctx, session, row, TaskState.FAILED, actor=ACTOR, exit_code=status.exit_code, message=message)
        return 1
    if status.phase == JobPhase.LOST:
        task_lifecycle.transition(ctx, session, row, TaskState.FAILED, actor=ACTOR, message="the backend no longer knows this job")
        return 1
    return 0
