"""Deadlines of tasks as the API, /metrics and the dashboard report them.

A task's deadline is `goal.deadline` in its stored spec: an ISO time (a duration is pinned
at submit, services/recommend.pin_deadline; one stored before that counts from the task's
creation). A task is *at risk* when, as things stand, it cannot finish by its deadline:

- queued: the scheduler's explanation of why it waits holds its expected finish (estimated
  start, or now, plus the runtime on the model it is expected to start on: see
  scheduling/deadlines.py); that finish, and now plus the same runtime, are compared with
  the deadline again here, so that an explanation kept over several cycles (a parked task)
  does not stay "on time" while time runs out;
- admitted, dispatched, running, unknown: its start (its admission until it has started)
  plus its runtime estimate on the slowest device model it holds ends after the deadline;
- any unfinished task whose deadline has passed (with or without a runtime estimate).

A finished task is never at risk. Reading a task without a deadline costs one dict lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.clock import as_utc, iso_utc
from hetpool.core.goal import Goal
from hetpool.core.specs import parse_spec
from hetpool.core.states import ACTIVE_STATES, TERMINAL_STATES, TaskState
from hetpool.scheduling.estimate import runtime_on
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.server.services.cluster_state import read_inventory
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.queue_cache import QueuedTask

# Unfinished and not queued: read from their rows (bounded by the work placed and the
# approvals open); the queued ones come from the queue cache.
_OTHER_UNFINISHED = sorted(s.value for s in TaskState if s not in TERMINAL_STATES and s is not TaskState.QUEUED)


@dataclass(frozen=True)
class DeadlineStatus:
    deadline: datetime
    at_risk: bool
    late_s: float | None = None  # expected lateness (or how long ago the deadline passed), when at risk

    def as_row(self, task_id: str, name: str, tenant: str, state: str) -> dict:
        return {"id": task_id, "name": name, "tenant": tenant, "state": state, "deadline": iso_utc(self.deadline), "late_s": self.late_s}


def deadline_of(spec: dict | None, created_at: datetime) -> datetime | None:
    """The deadline of a stored spec (None: it has none, or none that reads)."""
    goal = spec.get("goal") if isinstance(spec, dict) else None
    text = goal.get("deadline") if isinstance(goal, dict) else None
    if not text:
        return None
    try:
        return Goal.model_validate({"deadline": text}).deadline_at(as_utc(created_at))
    except (ValueError, OverflowError):  # stored before a bound existed: report no deadline
        return None


def _status(deadline: datetime, finish: datetime) -> DeadlineStatus:
    late = (finish - deadline).total_seconds()
    return DeadlineStatus(deadline, late > 0, round(late) if late > 0 else None)


def _after(start: datetime, seconds: float) -> datetime:
    try:
        return start + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max.replace(tzinfo=start.tzinfo)


def queued_status(deadline: datetime, pending: dict | None, now: datetime) -> DeadlineStatus:
    """A queued task, from the facts of its explanation (`expected_finish`, `expected_runtime_s`)."""
    facts = pending if isinstance(pending, dict) else {}
    finish = now
    runtime = facts.get("expected_runtime_s")
    if isinstance(runtime, (int, float)) and not isinstance(runtime, bool) and runtime >= 0:
        finish = _after(now, runtime)
    try:
        expected = as_utc(datetime.fromisoformat(facts["expected_finish"])) if isinstance(facts.get("expected_finish"), str) else None
    except ValueError:
        expected = None
    return _status(deadline, max(finish, expected) if expected else finish)


def placed_runtime(spec: dict, models: Iterable[str], catalog: DeviceCatalog) -> float | None:
    """The runtime of a placed task on the slowest of its models (as the cycle reckons a
    gang's end); None without a runtime estimate, or with a spec that no longer reads."""
    if not (spec.get("runtime_estimate") if isinstance(spec, dict) else None):
        return None
    try:
        task = parse_spec({"kind": "Task", **spec})
    except Exception:  # stored before a limit existed: no estimate to go by
        return None
    runtimes = [runtime_on(task, catalog.get(m) if m in catalog else None) for m in models] or [runtime_on(task, None)]
    known = [r for r in runtimes if r is not None]
    return max(known) if known else None


def row_status(row: TaskRow, placed_models: Callable[[], list[str]], now: datetime, catalog: Callable[[], DeviceCatalog]) -> DeadlineStatus | None:
    """The deadline status of a task row (None: it has no deadline). `placed_models` and
    `catalog` are asked only for placed work with a deadline."""
    deadline = deadline_of(row.spec, row.created_at)
    if deadline is None:
        return None
    state = TaskState(row.state)
    if state in TERMINAL_STATES:
        return DeadlineStatus(deadline, False)
    if state is TaskState.QUEUED:
        return queued_status(deadline, row.pending_explanation, now)
    finish = now
    if state in ACTIVE_STATES:
        runtime = placed_runtime(row.spec, placed_models(), catalog())
        started = as_utc(row.started_at or row.admitted_at) or now
        if runtime is not None:
            finish = max(now, _after(started, runtime))
    return _status(deadline, finish)


def _visible(tenant: str, scopes: list[str] | None) -> bool:
    return scopes is None or any(tenant == s or tenant.startswith(s + "/") for s in scopes)


def at_risk(ctx: ServiceContext, session: Session, queued: list[QueuedTask], scopes: list[str] | None) -> list[dict]:
    """The unfinished tasks within `scopes` (None: all) whose deadline is at risk, the
    earliest deadline first: {id, name, tenant, state, deadline, late_s}. `queued`: the
    queued tasks as the queue cache has them (the callers have read it already)."""
    now = ctx.clock.now()
    found: list[tuple[DeadlineStatus, dict]] = []
    for task in queued:
        deadline = deadline_of(task.spec, task.created_at)
        if deadline is not None and _visible(task.tenant, scopes):
            status = queued_status(deadline, task.pending_explanation, now)
            if status.at_risk:
                found.append((status, status.as_row(task.id, task.name, task.tenant, TaskState.QUEUED.value)))
    rows = [r for r in session.execute(select(TaskRow).where(TaskRow.state.in_(_OTHER_UNFINISHED))).scalars() if _visible(r.tenant, scopes)]
    rows = [r for r in rows if deadline_of(r.spec, r.created_at) is not None]
    models = _placed_models(session, [r for r in rows if TaskState(r.state) in ACTIVE_STATES])
    inventory: list[DeviceCatalog] = []

    def catalog() -> DeviceCatalog:
        if not inventory:
            inventory.append(read_inventory(ctx, session).catalog)
        return inventory[0]

    for row in rows:
        status = row_status(row, lambda row=row: models.get(row.id, []), now, catalog)
        if status is not None and status.at_risk:
            found.append((status, status.as_row(row.id, row.name, row.tenant, row.state)))
    found.sort(key=lambda pair: (pair[0].deadline, pair[1]["id"]))
    return [row for _, row in found]


def _placed_models(session: Session, rows: list[TaskRow]) -> dict[str, list[str]]:
    """Task id → the device models of its current placement."""
    if not rows:
        return {}
    attempt = {r.id: r.attempt for r in rows}
    out: dict[str, list[str]] = {}
    stmt = select(PlacementRow.task_id, PlacementRow.attempt, PlacementRow.model).where(PlacementRow.task_id.in_(list(attempt)))
    for task_id, placed_attempt, model in session.execute(stmt).all():
        if attempt.get(task_id) == placed_attempt:
            out.setdefault(task_id, []).append(model)
    return out
