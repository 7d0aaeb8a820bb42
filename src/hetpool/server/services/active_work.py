"""The admitted, dispatched and running tasks as this process last read them: what each
holds and its parsed spec, read again only for an attempt not seen before.

Why: every scheduler pass (and `plan`, the quota views, the live snapshot) needs every
active task's allocations and spec. Reading them as whole ORM rows and parsing each
stored spec again was a fifth of a pass at 1,000 nodes (bench/server_pass.py; the
database's JSON decoding and pydantic's validation of thousands of specs). Both are fixed
for an attempt: placement rows are written with the admission that starts the attempt and
never change, and a task's spec is written only at submit and at approval, both before
it is queued. So each read scans the small columns that do change while a task runs
(state, start, preemption marks, progress) and reads spec and placements only for an
(id, attempt) it does not hold.

Shared by the scheduler's thread and API threads: entries are immutable, the map is
replaced under a lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.specs import parse_spec
from hetpool.core.states import ACTIVE_STATES
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.snapshot import Allocation
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.server.services.context import ServiceContext

_FETCH_CHUNK = 500  # ids per IN (...) when reading specs and placements
_ACTIVE = [s.value for s in ACTIVE_STATES]


@dataclass(frozen=True)
class Held:
    """One worker's placement as the scheduler reads it."""

    rank: int
    model: str
    allocation: Allocation


@dataclass(frozen=True)
class Attempt:
    """What is fixed for one attempt of a task: its spec (None: it no longer parses) and placements."""

    spec: TaskSpec | None
    held: tuple[Held, ...]


@dataclass(frozen=True)
class ActiveTask:
    """An active task: the columns that change while it runs, as of this read, and its attempt's fixed part."""

    id: str
    attempt: int
    tenant: str
    priority: str
    task_type: str
    env: str
    template: str | None
    started_at: datetime | None
    admitted_at: datetime | None
    progress_s: float
    preempt_reason: str | None
    preemptions: int
    fixed: Attempt


# Table columns, not ORM attributes: the statement then takes SQLAlchemy's Core path (no
# ORM row processing, half the cost of a scan of thousands of rows), with the same types.
_TASK = TaskRow.__table__.c
_PLACED = PlacementRow.__table__.c
_SCAN = (
    _TASK.id,
    _TASK.attempt,
    _TASK.tenant,
    _TASK.priority,
    _TASK.task_type,
    _TASK.env,
    _TASK.template,
    _TASK.started_at,
    _TASK.admitted_at,
    _TASK.progress_s,
    _TASK.preempt_reason,
    _TASK.preemptions,
)

_PLACEMENT = (
    _PLACED.task_id,
    _PLACED.attempt,
    _PLACED.rank,
    _PLACED.model,
    _PLACED.node,
    _PLACED.pool,
    _PLACED.device_indices,
    _PLACED.device_fraction,
    _PLACED.cpu,
    _PLACED.memory_gb,
)


@dataclass
class ActiveWork:
    lock: threading.Lock = field(default_factory=threading.Lock)
    attempts: dict[tuple[str, int], Attempt] = field(default_factory=dict)
    fetched: int = 0  # attempts read in full (tests and benchmarks look)

    def read(self, session: Session) -> list[ActiveTask]:
        """Every active task as of `session`'s transaction."""
        scan = session.execute(select(*_SCAN).where(_TASK.state.in_(_ACTIVE))).all()
        with self.lock:
            kept = self.attempts
        missing = [(r.id, r.attempt) for r in scan if (r.id, r.attempt) not in kept]
        fresh = _read_attempts(session, missing)
        attempts = {}
        out = []
        for r in scan:
            key = (r.id, r.attempt)
            fixed = attempts[key] = fresh.get(key) or kept[key]
            out.append(ActiveTask(*r, fixed=fixed))
        with self.lock:
            self.attempts = attempts  # tasks no longer active are forgotten
            self.fetched += len(fresh)
        return out


def _read_attempts(session: Session, keys: list[tuple[str, int]]) -> dict[tuple[str, int], Attempt]:
    """Spec and placements of each (task id, attempt) in `keys`. By id and attempt, not by
    state: a task that moved on since the scan still has this attempt's placement rows."""
    wanted = set(keys)
    specs: dict[str, TaskSpec | None] = {}
    held: dict[tuple[str, int], list[Held]] = {key: [] for key in keys}
    ids = sorted({task_id for task_id, _ in keys})
    for start in range(0, len(ids), _FETCH_CHUNK):
        part = ids[start : start + _FETCH_CHUNK]
        for task_id, document in session.execute(select(_TASK.id, _TASK.spec).where(_TASK.id.in_(part))):
            specs[task_id] = _parsed(document)
        for p in session.execute(select(*_PLACEMENT).where(_PLACED.task_id.in_(part))):
            if (p.task_id, p.attempt) in wanted:
                held[(p.task_id, p.attempt)].append(Held(p.rank, p.model, allocation_of(p)))
    return {key: Attempt(specs.get(key[0]), tuple(sorted(held[key], key=lambda h: h.rank))) for key in keys}


def _parsed(document: dict) -> TaskSpec | None:
    try:
        return parse_spec(document)
    except Exception:  # stored before a limit existed, or written by hand: it still holds its devices
        return None


def allocation_of(p) -> Allocation:
    """What a placement row (or a row of its columns) holds, as the snapshot takes it."""
    return Allocation(p.node, p.pool, tuple(p.device_indices), p.device_fraction, p.cpu, p.memory_gb)


def read_uncached(session: Session) -> list[ActiveTask]:
    """The active tasks read afresh (callers without a service context)."""
    return ActiveWork().read(session)


def active_work(ctx: ServiceContext) -> ActiveWork:
    return ctx.process_state("active_work", ActiveWork)
