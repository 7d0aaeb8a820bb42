"""Cost worker: charge every task attempt for the capacity it holds, exactly once.

A task attempt holds capacity from its admission (placement) until it leaves the holding
states (admitted, dispatched, running): it ends, is preempted or requeued. Each attempt
has a CostAccrualRow whose `accrued_until` says how far it has been charged; a pass
charges [accrued_until, now) — or up to the attempt's end, then closes it — and moves
`accrued_until` in the same transaction as the ledger rows. The row is versioned, so a
second writer that read the same `accrued_until` fails its update and rolls back: a
crash loses nothing (the next pass charges from the stored mark) and nothing is charged
twice.

Which attempts to look at: open accruals that are due, plus tasks named by task state
events in the audit trail since the last pass (new admissions, ends). The audit trail is
written under one lock per transaction (PostgreSQL's advisory lock; SQLite has one
writer), so its ids grow in commit order and a cursor over them misses nothing. On
start-up one query finds every attempt never seen before. Ended attempts take their start
and end from the task's state events, so an attempt that was admitted and preempted
between two passes is charged exactly for the time it held; an end stamped before the
mark (committed just after a pass charged past it) is taken back.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hetpool.core.clock import as_utc
from hetpool.core.limits import MAX_PRICE_PER_HOUR
from hetpool.core.states import ACTIVE_STATES, TaskState
from hetpool.governance.cost import Allocation, Charge, PriceBook, attempt_spans, charge, split_days, tenant_levels
from hetpool.server.db.models import AuditEventRow, PlacementRow, TaskRow
from hetpool.server.db.models_cost import CostAccrualRow, CostLedgerRow
from hetpool.server.services.cluster_state import read_inventory
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.cost import budgets, raise_alerts_of
from hetpool.server.services.inventory import Inventory

log = logging.getLogger(__name__)

# Open attempts are charged at most this often (and at each UTC midnight) to keep the
# ledger's write rate low; ends are charged at once. Reports lag running work by this much.
ACCRUE_STEP_S = 60.0
# Budgets are re-checked after every pass that charged something, and at least this often.
BUDGET_CHECK_S = 300.0
_HOLDING = {s.value for s in ACTIVE_STATES}
_STATE_ACTIONS = [f"task.{s.value}" for s in TaskState if s not in (TaskState.DISPATCHED, TaskState.RUNNING, TaskState.UNKNOWN)]
_CHUNK = 500


@dataclass
class _Progress:
    """Per-process state of the worker: the audit cursor and tasks to retry."""

    cursor: int | None = None  # None: not caught up since this process started
    retry: set[str] = field(default_factory=set)
    budgets_checked_at: datetime | None = None


@dataclass
class _Work:
    """One attempt to charge up to `until` (and close when `close`)."""

    task_id: str
    attempt: int
    until: datetime | None  # None: the end is read from the task's state events
    close: bool
    new: bool


def progress(ctx: ServiceContext) -> _Progress:
    return ctx.process_state("cost_progress", _Progress)


def accrue_usage(ctx: ServiceContext, *, step_s: float = ACCRUE_STEP_S) -> int:
    """One pass: charge what is due; returns the number of attempts charged or closed."""
    state = progress(ctx)
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        cursor, work = _find_work(session, state, now, step_s)
    by_task: dict[str, list[_Work]] = {}
    for item in work:
        by_task.setdefault(item.task_id, []).append(item)
    # A bounded round: the first `batch_of("cost")` tasks now, the rest on the next round
    # (the retry set brings them back, since the cursor moves past their events).
    limit = ctx.settings.batch_of("cost")
    if len(by_task) > limit:
        later = sorted(by_task)[limit:]
        state.retry |= set(later)
        for task_id in later:
            del by_task[task_id]
    done = 0
    if by_task:
        done = _charge_all(ctx, state, by_task, now)
    state.cursor = cursor
    checked = state.budgets_checked_at
    if done or checked is None or (now - checked).total_seconds() >= BUDGET_CHECK_S:
        if _check_budgets(ctx, now):
            state.budgets_checked_at = now
    return done


def _check_budgets(ctx: ServiceContext, now: datetime) -> bool:
    """Raise each budget's due alerts, one transaction per budget: one that fails holds
    back no other budget (it is retried on the next pass). True when all were checked."""
    with ctx.db.transaction() as session:
        inv = read_inventory(ctx, session)
    complete = True
    for budget in budgets(inv):
        try:
            with ctx.db.transaction() as session:
                raise_alerts_of(session, budget, now)
        except IntegrityError:  # another server raised the same alert first; re-checked next pass
            log.info("budget %s: alert raised concurrently; re-checking on the next pass", budget.name)
            complete = False
        except Exception:
            log.exception("budget %s: alerts could not be checked; the other budgets were", budget.name)
            complete = False
    return complete


def _charge_all(ctx: ServiceContext, state: _Progress, by_task: dict[str, list[_Work]], now: datetime) -> int:
    """All tasks in one transaction; if that fails, each task alone so that one bad task
    cannot hold back the others (it is retried on the next pass)."""
    with ctx.db.transaction() as session:
        inv = read_inventory(ctx, session)
    book = PriceBook(inv.by_kind("PriceList").values())
    try:
        with ctx.db.transaction() as session:
            for task_id, items in by_task.items():
                _charge_task(session, inv, book, task_id, items, now)
        state.retry -= set(by_task)
        return sum(len(items) for items in by_task.values())
    except Exception as exc:  # usually a race with another server's pass (it won; we re-read)
        log.info("cost accrual batch failed (%s); charging task by task", type(exc).__name__)
    done = 0
    for task_id, items in by_task.items():
        try:
            with ctx.db.transaction() as session:
                _charge_task(session, inv, book, task_id, items, now)
            state.retry.discard(task_id)
            done += len(items)
        except Exception:
            log.exception("cost accrual of task %s failed; retrying on the next pass", task_id)
            state.retry.add(task_id)
    return done


# ----------------------------------------------------------------------- finding work
def _find_work(session: Session, state: _Progress, now: datetime, step_s: float) -> tuple[int, list[_Work]]:
    top = session.execute(select(func.max(AuditEventRow.id))).scalar() or 0
    if state.cursor is None:
        tracked = select(CostAccrualRow.task_id, func.max(CostAccrualRow.attempt).label("top")).group_by(CostAccrualRow.task_id).subquery()
        stmt = select(TaskRow.id).outerjoin(tracked, tracked.c.task_id == TaskRow.id).where(TaskRow.attempt > func.coalesce(tracked.c.top, 0))
        touched = set(session.execute(stmt).scalars())
    else:
        stmt = select(AuditEventRow.object_id).where(
            AuditEventRow.id > state.cursor, AuditEventRow.id <= top, AuditEventRow.object_kind == "Task", AuditEventRow.action.in_(_STATE_ACTIONS)
        )
        touched = set(session.execute(stmt.distinct()).scalars())
    touched |= state.retry
    # Open attempts that are due, and every attempt of the tasks that changed (an end is charged at once).
    midnight = datetime.combine(as_utc(now).date(), time(), tzinfo=UTC)
    due = or_(CostAccrualRow.accrued_until <= now - timedelta(seconds=step_s), CostAccrualRow.accrued_until < midnight)
    open_rows = {(r.task_id, r.attempt): r for r in session.execute(select(CostAccrualRow).where(CostAccrualRow.closed.is_(False), due)).scalars()}
    task_ids = touched | {task_id for task_id, _ in open_rows}
    tasks = {row.id: row for chunk in _chunks(task_ids) for row in session.execute(select(TaskRow).where(TaskRow.id.in_(chunk))).scalars()}
    tracked_attempts: dict[str, set[int]] = {}
    for chunk in _chunks(touched):
        for acc in session.execute(select(CostAccrualRow).where(CostAccrualRow.task_id.in_(chunk))).scalars():
            tracked_attempts.setdefault(acc.task_id, set()).add(acc.attempt)
            if not acc.closed:
                open_rows[(acc.task_id, acc.attempt)] = acc
    work: list[_Work] = []
    for acc in open_rows.values():
        row = tasks.get(acc.task_id)
        holding = row is not None and row.attempt == acc.attempt and row.state in _HOLDING
        if not holding:
            work.append(_Work(acc.task_id, acc.attempt, None if row is not None else acc.accrued_until, close=True, new=False))
        elif _due(acc.accrued_until, now, step_s):
            work.append(_Work(acc.task_id, acc.attempt, now, close=False, new=False))
    # Attempts never seen: only a changed task can have one (its admission is an event).
    for task_id in touched:
        row = tasks.get(task_id)
        if row is None:
            continue
        seen = tracked_attempts.get(task_id, set())
        for attempt in range(1, row.attempt + 1):
            if attempt in seen:
                continue
            holding = attempt == row.attempt and row.state in _HOLDING
            work.append(_Work(task_id, attempt, now if holding else None, close=not holding, new=True))
    return top, work


def _due(accrued_until: datetime, now: datetime, step_s: float) -> bool:
    return (now - accrued_until).total_seconds() >= step_s or now.date() != accrued_until.date()


def _chunks(ids: set[str]) -> list[list[str]]:
    items = sorted(ids)
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


# ----------------------------------------------------------------------- charging
def _charge_task(session: Session, inv: Inventory, book: PriceBook, task_id: str, items: list[_Work], now: datetime) -> None:
    task = session.get(TaskRow, task_id)
    spans = None
    if task is not None and any(item.until is None for item in items):
        events = session.execute(
            select(AuditEventRow.action, AuditEventRow.ts, AuditEventRow.after)
            .where(AuditEventRow.object_kind == "Task", AuditEventRow.object_id == task_id, AuditEventRow.action.in_(_STATE_ACTIONS))
            .order_by(AuditEventRow.id)
        ).all()
        spans = attempt_spans(events)
    for item in items:
        span = (spans or {}).get(item.attempt)
        if item.new:
            acc = _new_accrual(session, task, item, span)
            if acc is None:
                continue
        else:
            acc = session.get(CostAccrualRow, (task_id, item.attempt))
            if acc is None or acc.closed:
                continue
        until = item.until
        if until is None:
            until = _end_of(task, item.attempt, span, acc.accrued_until)
        _advance(session, inv, book, task, acc, until, item.close)


def _new_accrual(session: Session, task: TaskRow | None, item: _Work, span: dict | None) -> CostAccrualRow | None:
    if task is None:
        return None
    if not item.close and task.admitted_at is not None:
        start, cluster, backend = task.admitted_at, task.cluster, task.backend
    elif span is not None:
        start, cluster, backend = span["start"], span.get("cluster") or task.cluster, span.get("backend") or task.backend
    else:  # no state events (rows written by hand): the task row knows only its latest attempt
        latest = item.attempt == task.attempt and task.admitted_at is not None
        start, cluster, backend = task.admitted_at if latest else task.updated_at, task.cluster, task.backend
    acc = CostAccrualRow(task_id=task.id, attempt=item.attempt, cluster=cluster, backend=backend, started_at=start, accrued_until=start, closed=False)
    session.add(acc)
    session.flush()  # a concurrent pass that created it first makes this fail: roll back
    return acc


def _end_of(task: TaskRow | None, attempt: int, span: dict | None, accrued_until: datetime) -> datetime:
    if span is not None and span["end"] is not None:
        return span["end"]
    if task is not None and task.attempt == attempt:  # no state events: the task row's last change
        return max(task.finished_at or task.updated_at, accrued_until)
    return accrued_until  # nothing known: charge nothing more


def _advance(session: Session, inv: Inventory, book: PriceBook, task: TaskRow | None, acc: CostAccrualRow, until: datetime, close: bool) -> None:
    """Charge [accrued_until, until) and move the mark; with `close`, end the attempt there.

    An end before the mark is taken back: a pass charged an open attempt up to its own
    start time while the end, stamped a moment earlier, was not yet committed."""
    start = acc.accrued_until
    if until < start and not close:
        return  # the clock went backwards: wait until it passes the mark again
    acc.accrued_until = until
    if close:
        acc.closed = True
        acc.ended_at = until
    # The versioned update first: a writer that lost the race stops here, before any ledger row.
    session.flush()
    if task is None or until == start:
        return
    sign = 1 if until > start else -1
    placements = session.execute(select(PlacementRow).where(PlacementRow.task_id == acc.task_id, PlacementRow.attempt == acc.attempt)).scalars()
    pieces = split_days(min(start, until), max(start, until))
    existing = {
        (r.rank, r.day, r.currency): r
        for r in session.execute(
            select(CostLedgerRow).where(
                CostLedgerRow.task_id == acc.task_id, CostLedgerRow.attempt == acc.attempt, CostLedgerRow.day.in_([d for d, _, _ in pieces])
            )
        ).scalars()
    }
    org, team, project = tenant_levels(task.tenant)
    for p in placements:
        devices = len(p.device_indices) * p.device_fraction
        pool = inv.pools.get(p.pool)
        cluster = acc.cluster or (pool.cluster if pool else task.cluster) or "-"
        rates = book.rates(pool=pool, cluster=cluster, model=p.model, recorded_device_price=_recorded_price(p, devices))
        alloc = Allocation(devices=devices, cpu=p.cpu, memory_gb=p.memory_gb)
        for day, piece_start, piece_end in pieces:
            c = charge(alloc, rates, piece_start, piece_end)
            row = existing.get((p.rank, day, rates.currency))
            if sign < 0:
                _take_back(session, existing, p.rank, day, row, c, piece_start)
                continue
            if row is None:
                row = CostLedgerRow(
                    task_id=acc.task_id,
                    attempt=acc.attempt,
                    rank=p.rank,
                    day=day,
                    interval_start=piece_start,
                    interval_end=piece_end,
                    tenant=task.tenant,
                    org=org,
                    team=team,
                    project=project,
                    env=task.env,
                    task_type=task.task_type,
                    pool=p.pool,
                    cluster=cluster,
                    backend=acc.backend or task.backend or "-",
                    model=p.model,
                    node=p.node,
                    devices=devices,
                    cpu=p.cpu,
                    memory_gb=p.memory_gb,
                    seconds=0.0,
                    device_hours=0.0,
                    cpu_core_hours=0.0,
                    memory_gib_hours=0.0,
                    cost_micros=0,
                    currency=rates.currency,
                )
                session.add(row)
                existing[(p.rank, day, rates.currency)] = row
            row.interval_end = piece_end
            row.seconds += c.seconds
            row.device_hours += c.device_hours
            row.cpu_core_hours += c.cpu_core_hours
            row.memory_gib_hours += c.memory_gib_hours
            row.cost_micros += c.cost_micros


def _recorded_price(p: PlacementRow, devices: float) -> float:
    """The per-device price stored with a placement (used when its pool is gone), if it is a
    price at all: a row written before prices were bounded, or by hand, may hold anything."""
    price = p.price_per_hour / devices if devices else 0.0
    if math.isfinite(price) and 0 <= price <= MAX_PRICE_PER_HOUR:
        return price
    log.error("placement of task %s on pool %s records the price %r; charged as 0 per device-hour", p.task_id, p.pool, p.price_per_hour)
    return 0.0


def _take_back(session: Session, existing: dict, rank: int, day, row: CostLedgerRow | None, c: Charge, new_end: datetime) -> None:
    """Subtract an over-charged piece from the worker's row of that day (any currency)."""
    row = row or next((r for (r_rank, r_day, _), r in existing.items() if r_rank == rank and r_day == day), None)
    if row is None:
        return
    row.seconds -= c.seconds
    row.device_hours -= c.device_hours
    row.cpu_core_hours -= c.cpu_core_hours
    row.memory_gib_hours -= c.memory_gib_hours
    row.cost_micros -= c.cost_micros
    row.interval_end = new_end
    if row.seconds <= 1e-6:  # the whole day was an over-charge
        existing.pop((row.rank, row.day, row.currency), None)
        session.delete(row)
