"""Reading tasks: a task as the API shows it (`task_response`: a TaskResponse), the task list, and a worker's log."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from hetpool.core.clock import iso_utc
from hetpool.core.errors import SpecError
from hetpool.core.states import TaskState
from hetpool.engines.base import Backend, JobHandle
from hetpool.server.db.models import AuditEventRow, PlacementRow, TaskRow
from hetpool.server.schemas.tasks import TaskResponse
from hetpool.server.services import audit, checkpoints, deadlines
from hetpool.server.services.approvals import pending_for_task
from hetpool.server.services.cluster_state import read_inventory
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.task_lifecycle import get_row


def placements_of(session: Session, row: TaskRow) -> list[PlacementRow]:
    return list(
        session.execute(
            select(PlacementRow).where(PlacementRow.task_id == row.id, PlacementRow.attempt == row.attempt).order_by(PlacementRow.rank)
        ).scalars()
    )


def task_response(session: Session, row: TaskRow, *, detail: bool = False, ctx: ServiceContext | None = None) -> TaskResponse:
    """The API's view of a task. Keys that do not apply are left unset (not null): the
    routes answer with exclude_unset, so a queued task's `pending` is the only sign it waits.
    With `ctx` (its clock and inventory), a task with a deadline shows it and whether it is
    at risk (services/deadlines.py)."""
    placements = placements_of(session, row) if row.attempt else []
    body = {
        "id": row.id,
        "name": row.name,
        "tenant": row.tenant,
        "env": row.env,
        "type": row.task_type,
        "template": row.template,
        "priority": row.priority,
        "state": row.state,
        "attempt": row.attempt,
        "cluster": row.cluster,
        "backend": row.backend,
        "job_id": row.job_id,
        "exit_code": row.exit_code,
        "message": row.message,
        "fallback_used": row.fallback_used,
        "created_by": row.created_by,
        "created_at": iso_utc(row.created_at),
        "admitted_at": iso_utc(row.admitted_at),
        "started_at": iso_utc(row.started_at),
        "finished_at": iso_utc(row.finished_at),
        "placements": [
            {"rank": p.rank, "node": p.node, "pool": p.pool, "model": p.model, "devices": p.device_indices, "device_fraction": p.device_fraction}
            for p in placements
        ],
    }
    if ctx is not None:
        status = deadlines.row_status(row, lambda: [p.model for p in placements], ctx.clock.now(), lambda: read_inventory(ctx, session).catalog)
        if status is not None:
            body["deadline"], body["deadline_at_risk"] = iso_utc(status.deadline), status.at_risk
    checkpoint = checkpoints.checkpoint_of(row, ctx.settings.max_checkpoint_grace_s if ctx is not None else None)
    if checkpoint is not None:
        body["checkpoint"] = {
            "signal": checkpoint.signal.value,
            "grace_s": checkpoint.grace_s,  # as the server applies it (cut to max_checkpoint_grace_s)
            "resume": checkpoint.resume,
            "resume_from": row.resume_from,
            "progress_s": row.progress_s or 0.0,
            "stop_signalled_at": iso_utc(row.stop_signalled_at),
        }
    if row.state == TaskState.QUEUED.value and row.pending_explanation:
        body["pending"] = row.pending_explanation
    if row.state == TaskState.PENDING_APPROVAL.value:
        body["approval"] = pending_for_task(session, row.id)
    if detail:
        body["spec"] = row.spec
        body["placement_attempts"] = row.placement_attempts or []
        body["pending"] = row.pending_explanation
        events = session.execute(
            select(AuditEventRow).where(AuditEventRow.object_kind == "Task", AuditEventRow.object_id == row.id).order_by(AuditEventRow.id)
        ).scalars()
        body["events"] = [audit.event_dict(e) for e in events]
    return TaskResponse.model_validate(body)


def _in_subtree(tenant: str):
    # autoescape: '_' is allowed in tenant names and is a LIKE wildcard.
    return (TaskRow.tenant == tenant) | TaskRow.tenant.startswith(tenant + "/", autoescape=True)


def list_tasks(
    session: Session, *, state: str | None = None, tenant: str | None = None, limit: int = 200, scopes: list[str] | None = None
) -> list[TaskRow]:
    """Newest first; `scopes` (from access.visible_tenants) keeps only tasks in those
    subtrees (None: no restriction, []: nothing)."""
    if scopes is not None and not scopes:
        return []
    stmt = select(TaskRow).order_by(TaskRow.created_at.desc(), TaskRow.id).limit(limit)
    if state:
        stmt = stmt.where(TaskRow.state == state)
    if tenant:
        stmt = stmt.where(_in_subtree(tenant.strip("/")))
    if scopes is not None:
        stmt = stmt.where(or_(*(_in_subtree(s) for s in scopes)))
    return list(session.execute(stmt).scalars())


@dataclass(frozen=True)
class LogsRead:
    """What `prepare_logs` found in the database; `fetch` asks the engine, and must be
    called after the transaction (server/engine_guard.py refuses it inside one)."""

    state: str
    backend: Backend | None  # None: never dispatched, nothing to read
    handle: JobHandle | None
    rank: int

    def fetch(self, *, offset: int, limit: int) -> dict:
        terminal = TaskState(self.state).terminal
        if self.backend is None or self.handle is None:
            return {"text": "", "offset": 0, "complete": terminal, "state": self.state}
        chunk = self.backend.logs(self.handle, rank=self.rank, offset=offset, limit=limit)
        return {"text": chunk.text, "offset": chunk.offset, "complete": chunk.complete and terminal, "state": self.state}


def prepare_logs(ctx: ServiceContext, session: Session, task_id: str, *, rank: int) -> LogsRead:
    row = get_row(session, task_id)
    if not row.job_id or not row.backend:
        return LogsRead(row.state, None, None, rank)
    if rank < 0 or (row.spec.get("workers", 1) <= rank):
        raise SpecError(f"rank: worker {rank} does not exist; the task has ranks 0..{row.spec.get('workers', 1) - 1}")
    cluster = load_inventory(ctx, session).clusters.get(row.cluster or "")
    return LogsRead(row.state, ctx.backend_for(row.backend, cluster), JobHandle(row.backend, row.job_id), rank)
