"""The queued tasks as this process last read them, brought up to date by what changed.

Why: the scheduler's pass, `plan`, the workload overview and /metrics all need every
queued task, and reading thousands of whole rows (their JSON spec and explanation) on each
of them was most of a pass's time and most of the overview's (docs/operations.md,
"Capacity"). A queued task's row changes only through a state transition, which moves its
`updated_at` (and, on requeue, its attempt), or by the scheduler's own explanation of why it waits. So each use scans
just (id, updated_at) of the queued rows and reads in full only the rows that are new or
moved; the others are kept.

The one write that does not move `updated_at` is the waiting explanation, and only the
scheduler makes it, on the replica that holds the workers' lease: the scheduler records
what it wrote here once its transaction has committed (`wrote_explanations`), and a pass
under a new lease term (another replica may have written meanwhile) starts from a fresh
read. A reader on another replica may see an older explanation here; the overview reads
the explanations it shows from the rows themselves.

Entries are shared between readers and never changed after being handed out, except for
their explanation, which is replaced as a whole (an atomic attribute write).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from sqlalchemy import select, type_coerce
from sqlalchemy.orm import Session
from sqlalchemy.types import NullType

from hetpool.core.states import TaskState
from hetpool.server.db.models import TaskRow
from hetpool.server.services.context import ServiceContext

_FETCH_CHUNK = 500  # ids per IN (...) when reading changed rows in full
_TASK = TaskRow.__table__.c  # table columns: SQLAlchemy's Core path, no ORM row processing (same types)
_COLUMNS = (
    _TASK.id,
    _TASK.name,
    _TASK.tenant,
    _TASK.task_type,
    _TASK.priority,
    _TASK.priority_rank,
    _TASK.updated_at,
    _TASK.attempt,
    _TASK.queued_at,
    _TASK.created_at,
    _TASK.spec,
    _TASK.pending_explanation,
    _TASK.progress_s,
)


@dataclass(eq=False)
class QueuedTask:
    """A queued task's row, as far as its readers need it (the fields keep TaskRow's names,
    so the cycle's loader takes either)."""

    id: str
    name: str
    tenant: str
    task_type: str
    priority: str
    priority_rank: int
    updated_at: datetime
    attempt: int
    queued_at: datetime | None
    created_at: datetime
    spec: dict
    pending_explanation: dict | None
    progress_s: float  # work done by earlier attempts that checkpointed (services/checkpoints.py)
    version: tuple = ()  # (updated_at as scanned, attempt): a row whose version moved is read again

    @cached_property
    def shape(self) -> str:
        """The spec but its name: tasks of one shape have the same candidate pools. Only
        the workload overview asks; computed on first use (a restarted scheduler reads
        tens of thousands of rows and needs none of these)."""
        return json.dumps({k: v for k, v in self.spec.items() if k not in ("kind", "name")}, sort_keys=True, default=str)


@dataclass
class QueueCache:
    lock: threading.Lock = field(default_factory=threading.Lock)
    entries: dict[str, QueuedTask] = field(default_factory=dict)
    term: object = None  # the lease term of the last scheduler refresh (leader.current_fence())
    fetched: int = 0  # rows read in full (tests and benchmarks look)

    def refresh(self, session: Session, *, term: object = None) -> list[QueuedTask]:
        """Every queued task as of `session`'s transaction. `term`: the caller's lease fence
        (the scheduler's); a new one drops what was kept. Readers without one pass None."""
        # The attempt too: a clock that did not move (tests' FixedClock) still tells a
        # task that was admitted and requeued since from one that waited all along.
        # updated_at as the driver returns it (no conversion to aware UTC): only compared.
        raw_updated = type_coerce(_TASK.updated_at, NullType())
        scan = session.execute(select(_TASK.id, raw_updated, _TASK.attempt).where(_TASK.state == TaskState.QUEUED.value)).all()
        with self.lock:
            kept = self.entries if term is None or term == self.term else {}
        versions = {task_id: (updated, attempt) for task_id, updated, attempt in scan}
        stale = [task_id for task_id, version in versions.items() if (e := kept.get(task_id)) is None or e.version != version]
        fresh = {}
        for start in range(0, len(stale), _FETCH_CHUNK):
            part = stale[start : start + _FETCH_CHUNK]
            rows = session.execute(select(*_COLUMNS).where(_TASK.id.in_(part), _TASK.state == TaskState.QUEUED.value))
            for r in rows:
                fresh[r.id] = QueuedTask(*r)
                fresh[r.id].version = versions[r.id]
        entries = {}
        for task_id in versions:
            entry = fresh.get(task_id) or kept.get(task_id)
            if entry is not None:  # None: it left the queue between the scan and the read
                entries[task_id] = entry
        with self.lock:
            self.entries = entries
            if term is not None:
                self.term = term
            self.fetched += len(fresh)
        return list(entries.values())

    def wrote_explanations(self, written: dict[str, tuple[datetime, dict]]) -> None:
        """The scheduler committed these explanations (task id → (the row's updated_at, explanation))."""
        with self.lock:
            for task_id, (updated_at, explanation) in written.items():
                entry = self.entries.get(task_id)
                if entry is not None and entry.updated_at == updated_at:
                    entry.pending_explanation = explanation


def queue_cache(ctx: ServiceContext) -> QueueCache:
    return ctx.process_state("queue_cache", QueueCache)
