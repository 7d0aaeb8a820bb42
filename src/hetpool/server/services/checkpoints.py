"""Checkpointable tasks on the server side (core/checkpoint.py): how the reconciler stops
one that must give its devices back, what a stopped attempt leaves to the next, and how
much work is left.

The stop is two steps a round apart, with the moment of the first on the row
(`stop_signalled_at`): the backend sends the task's signal, and once the grace has
passed the job is cancelled (killed). A job that ends in between — whatever its exit
code: it was asked to stop — is a preemption, and the task is requeued as a resume:
`resume_from` names the stopped attempt and `progress_s` grows by the time it ran, in
seconds on the reference device (the work it checkpointed is not done again; the
scheduler counts only the rest: scheduling.estimate.with_progress).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.checkpoint import CheckpointSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.estimate import perf_of
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.server.services import audit
from hetpool.server.services.cluster_state import read_inventory
from hetpool.server.services.context import ServiceContext


def checkpoint_of(row: TaskRow, max_grace_s: float | None = None) -> CheckpointSpec | None:
    """The task's checkpoint contract, or None (none declared, or unreadable: stop it plainly).

    `max_grace_s` (the server's max_checkpoint_grace_s) cuts the grace: the grace is time a
    preemptor or a migration waits for devices it was promised, so a member must not be
    able to make everyone else wait up to the hour a task may declare."""
    raw = (row.spec or {}).get("checkpoint") if isinstance(row.spec, dict) else None
    if not isinstance(raw, dict):
        return None
    try:
        checkpoint = CheckpointSpec.model_validate(raw)
        if max_grace_s is not None and checkpoint.grace_s > max_grace_s:
            checkpoint = CheckpointSpec.model_validate({**raw, "grace": max_grace_s})
        return checkpoint
    except ValueError:
        return None


def capped_grace(spec: TaskSpec, max_grace_s: float) -> TaskSpec:
    """`spec` with its checkpoint's grace cut to `max_grace_s` (as checkpoint_of applies it)."""
    checkpoint = spec.checkpoint
    if checkpoint is None or checkpoint.grace_s <= max_grace_s:
        return spec
    # Validated again, not model_copy'd: grace_s is a cached property and a copy keeps its value.
    capped = CheckpointSpec.model_validate({**checkpoint.model_dump(), "grace": max_grace_s})
    return spec.model_copy(update={"checkpoint": capped})


def stop_step(row: TaskRow, now: datetime, max_grace_s: float | None = None) -> str:
    """What the reconciler does this round for a task it must stop: "cancel" (no
    checkpoint, a user's cancel, or the grace is over), "signal" (first round of a
    graceful stop) or "wait" (within the grace, cut to `max_grace_s`)."""
    checkpoint = checkpoint_of(row, max_grace_s)
    if row.cancel_requested or checkpoint is None:
        return "cancel"
    if row.stop_signalled_at is None:
        return "signal"
    return "wait" if (now - row.stop_signalled_at).total_seconds() < checkpoint.grace_s else "cancel"


def resume_fields(ctx: ServiceContext, session: Session, row: TaskRow) -> dict:
    """The fields a stopped attempt leaves to the next: unchanged unless it was stopped
    gracefully after it started and the task resumes (then it resumes from this attempt)."""
    checkpoint = checkpoint_of(row)
    fields: dict = {"stop_signalled_at": None}
    if checkpoint is None or not checkpoint.resume or row.stop_signalled_at is None or row.started_at is None:
        return fields
    ran_s = max((row.stop_signalled_at - row.started_at).total_seconds(), 0.0)
    fields["resume_from"] = row.attempt
    fields["progress_s"] = round((row.progress_s or 0.0) + ran_s * _slowest_perf(ctx, session, row), 3)
    return fields


def _slowest_perf(ctx: ServiceContext, session: Session, row: TaskRow) -> float:
    """The relative performance of the attempt's slowest device (it sets a gang's pace): a
    second on it is that many seconds on the reference device."""
    try:
        spec = TaskSpec.model_validate(row.spec)
    except ValueError:
        return 1.0
    if spec.per_worker.devices is None:
        return 1.0
    catalog = read_inventory(ctx, session).catalog
    models = session.execute(select(PlacementRow.model).where(PlacementRow.task_id == row.id, PlacementRow.attempt == row.attempt)).scalars()
    perfs = [perf_of(spec, catalog.get(m)) for m in models if m and m in catalog]
    return min(perfs) if perfs else 1.0


def record_signalled(ctx: ServiceContext, task_id: str, attempt: int, checkpoint: CheckpointSpec) -> None:
    """The stop signal went out: the grace counts from now (on the row, so it survives a
    restart or a change of leader), and the task's history says so."""
    with ctx.db.transaction() as session:
        row = session.get(TaskRow, task_id, with_for_update=session.bind.dialect.name == "postgresql")
        if row is None or row.attempt != attempt or row.stop_signalled_at is not None:
            return
        now = ctx.clock.now()
        row.stop_signalled_at = now
        row.message = f"stopping for a checkpoint: {checkpoint.signal.value} sent, killed after {checkpoint.grace_s:g} s if still running"
        after = {"signal": checkpoint.signal.value, "grace_s": checkpoint.grace_s, "attempt": attempt}
        audit.record(session, actor="reconciler", action="task.stop_signalled", object_kind="Task", object_id=task_id, after=after, ts=now)


@dataclass
class MigrationRounds:
    """This process's round clock and what the last cycle reserved (nodes held for heads)."""

    last_round: datetime | None = None
    reserved_nodes: frozenset[str] = field(default_factory=frozenset)


def rounds(ctx: ServiceContext) -> MigrationRounds:
    return ctx.process_state("migration_rounds", MigrationRounds)
