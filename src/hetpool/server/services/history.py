"""The task history as a replayable trace (for the simulator and capacity planning)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.catalog.devices import DeviceCatalog
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.sim.importers.history import TaskRecord, history_from_records
from hetpool.sim.trace import TraceTask


def load_records(session: Session) -> list[TaskRecord]:
    """Every task with its final attempt's rank-0 device model."""
    models = {
        (task_id, attempt): model
        for task_id, attempt, model in session.execute(
            select(PlacementRow.task_id, PlacementRow.attempt, PlacementRow.model).where(PlacementRow.rank == 0)
        )
    }
    return [
        TaskRecord(
            id=row.id,
            state=row.state,
            spec=row.spec,
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            model=models.get((row.id, row.attempt)),
        )
        for row in session.execute(select(TaskRow)).scalars()
    ]


def export_history(
    session: Session, catalog: DeviceCatalog, *, since: datetime | None = None, include_failed: bool = False, include_unstarted: bool = False
) -> list[TraceTask]:
    """Finished tasks (with `include_failed`, failed ones too) as a trace ordered by
    submission; `include_unstarted` adds never-started tasks with a runtime_estimate."""
    return history_from_records(load_records(session), catalog, since=since, include_failed=include_failed, include_unstarted=include_unstarted)
