"""Read-only aggregates for the dashboard's overview and for /metrics.

Two kinds of numbers, with different visibility:
- capacity (devices per pool and class by status, nodes needing attention, backend
  health) comes from the inventory and the scheduler's snapshot: any user who may read
  the inventory sees all of it;
- workload (waiting tasks, waits, device-hours used, task counts by state, tasks whose
  deadline is at risk: services/deadlines.py) comes from tasks and is narrowed to the tenant subtrees the caller may read (`scopes`, as
  access.visible_tenants gives them: None = everything, [] = nothing).

How the numbers are defined (docs/operations-metrics.md says the same):
- a device is *abnormal* when its agent reports it so, *offline* when its node is not
  ready (offline, draining, down…) or cordoned, *idle* when wholly free, else *busy*
  (a partly used shareable device counts as busy);
- utilisation = device-hours held by tasks ÷ device-hours of the pool's devices (its
  current size) over the window; a task holds its devices from its start (its admission
  while it has not started yet) to its end, or now;
- a waiting task is a queued one; it counts in every pool that could run it (its device
  class, models, fallbacks, queue pools and software compatibility), so per-pool queue
  lengths may add up to more than the number of waiting tasks;
- wait = admission − entry into the queue, for tasks admitted within the window (a
  requeued task keeps its first queue time, as the scheduler's aging does).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from hetpool.core.clock import iso_utc
from hetpool.core.states import ACTIVE_STATES, TaskState
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import candidate_groups
from hetpool.scheduling.filters import class_matches, pool_verdict
from hetpool.scheduling.queueing import route
from hetpool.scheduling.snapshot import Snapshot
from hetpool.server.db.models import ConnectorSyncRow, NodeStatusRow, PlacementRow, TaskRow
from hetpool.server.services import deadlines
from hetpool.server.services.cluster_state import live_snapshot, read_inventory
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory
from hetpool.server.services.queue_cache import QueuedTask, queue_cache
from hetpool.server.services.task_planning import resolve_task_spec

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}
DEVICE_STATES = ("busy", "idle", "abnormal", "offline")
LONGEST_WAITING = 10


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _ratio(part: float, whole: float) -> float:
    return round(part / whole, 4) if whole > 0 else 0.0


# --------------------------------------------------------------------------- capacity
def device_counts(snap: Snapshot) -> dict[str, dict[str, int]]:
    """Devices per pool by status, from the scheduler's own view of free capacity."""
    out: dict[str, dict[str, int]] = {}
    for view in snap.pools:
        counts = dict.fromkeys(DEVICE_STATES, 0)
        for row in view.rows:
            node_index = int(snap.row_node[row])
            for value in snap.dev_free[row]:
                if value < -0.5:
                    counts["abnormal"] += 1
                elif not snap.node_healthy[node_index]:
                    counts["offline"] += 1
                elif value >= 1.0 - 1e-9:
                    counts["idle"] += 1
                else:
                    counts["busy"] += 1
        out[view.name] = {"total": sum(counts.values()), **counts}
    return out


def pool_rows(snap: Snapshot) -> list[dict]:
    counts = device_counts(snap)
    return [
        {
            "pool": view.name,
            "cluster": view.spec.cluster,
            "model": view.model.name,
            "display_name": view.model.display_name,
            "class": view.model.device_class.value,
            **counts[view.name],
            "utilisation": _ratio(counts[view.name]["busy"], counts[view.name]["total"]),
        }
        for view in snap.pools
    ]


def class_rows(pools: list[dict]) -> list[dict]:
    totals: dict[str, dict[str, int]] = {}
    for p in pools:
        entry = totals.setdefault(p["class"], {"total": 0, **dict.fromkeys(DEVICE_STATES, 0), "pools": 0})
        entry["pools"] += 1
        for key in ("total", *DEVICE_STATES):
            entry[key] += p[key]
    return [{"class": c, **v, "utilisation": _ratio(v["busy"], v["total"])} for c, v in sorted(totals.items())]


def nodes_needing_attention(session: Session, inv: Inventory) -> list[dict]:
    """Nodes whose agent or engine reports them not ready, or with abnormal devices."""
    out = []
    for row in session.execute(select(NodeStatusRow).order_by(NodeStatusRow.node)).scalars():
        abnormal = sorted(int(d["index"]) for d in row.devices or [] if d.get("health") == "abnormal")
        if row.state == "ready" and not abnormal:
            continue
        node = inv.nodes.get(row.node)
        out.append(
            {
                "node": row.node,
                "cluster": node.cluster if node else "",
                "state": row.state,
                "reason": row.reason or "",
                "source": row.source,
                "abnormal_devices": abnormal,
                "last_heartbeat_at": iso_utc(row.last_heartbeat_at),
            }
        )
    return out


def backend_health(session: Session, inv: Inventory) -> list[dict]:
    """Per cluster: is its backend reachable? Down when its connector's last sync failed,
    or when the reconciler could not reach it for some task (those tasks are `unknown`)."""
    syncs = {r.cluster: r for r in session.execute(select(ConnectorSyncRow)).scalars()}
    unknown = dict(
        session.execute(select(TaskRow.cluster, func.count()).where(TaskRow.state == TaskState.UNKNOWN.value).group_by(TaskRow.cluster)).all()
    )
    out = []
    for name, cluster in sorted(inv.clusters.items()):
        sync = syncs.get(name)
        reason = ""
        if sync is not None and not sync.ok:
            reason = f"last inventory sync failed: {sync.error}"[:500]
        elif unknown.get(name):
            reason = f"{unknown[name]} task(s) cannot be followed: the backend did not answer"
        out.append(
            {
                "cluster": name,
                "backend": cluster.backend.value,
                "up": not reason,
                "reason": reason,
                "last_sync_at": iso_utc(sync.last_attempt_at) if sync else None,
            }
        )
    return out


def capacity(ctx: ServiceContext, session: Session) -> dict:
    """Devices per pool and class by status, nodes needing attention, backend health."""
    inv = read_inventory(ctx, session)
    snap = live_snapshot(ctx, session)
    pools = pool_rows(snap)
    classes = class_rows(pools)
    totals = {key: sum(c[key] for c in classes) for key in ("total", *DEVICE_STATES)}
    return {
        "now": iso_utc(ctx.clock.now()),
        "pools": pools,
        "classes": classes,
        "totals": {**totals, "utilisation": _ratio(totals["busy"], totals["total"])},
        "nodes": {"total": len(inv.nodes), "attention": nodes_needing_attention(session, inv)},
        "backends": backend_health(session, inv),
    }


# --------------------------------------------------------------------------- workload
def _in_subtree(tenant: str):
    # autoescape: '_' is allowed in tenant names and is a LIKE wildcard.
    return (TaskRow.tenant == tenant) | TaskRow.tenant.startswith(tenant + "/", autoescape=True)


def scoped(stmt, scopes: list[str] | None):
    """`stmt` narrowed to tasks in `scopes` (None: all; []: none)."""
    if scopes is None:
        return stmt
    if not scopes:
        return stmt.where(TaskRow.id.is_(None))
    return stmt.where(or_(*(_in_subtree(s) for s in scopes)))


def state_counts(session: Session, scopes: list[str] | None) -> dict[str, int]:
    counts = dict.fromkeys((s.value for s in TaskState), 0)
    stmt = scoped(select(TaskRow.state, func.count()).group_by(TaskRow.state), scopes)
    for state, n in session.execute(stmt).all():
        counts[state] = int(n)
    return counts


def candidate_pools(ctx: ServiceContext, inv: Inventory, snap: Snapshot, spec: TaskSpec) -> list[str]:
    """Pools that could run the task when idle: its candidate groups (models, any_of,
    fallbacks or class), its queue's pools, and what its software needs. Device-less
    work counts against CPU pools, where the scheduler prefers to put it."""
    demand = spec.per_worker.devices
    use_class = not (spec.fallback or spec.any_of or (demand is not None and demand.models))
    allowed = set(route(spec, list(inv.queues.values())).pools)
    names: list[str] = []
    for group in candidate_groups(snap, spec):
        for index in group.pools:
            pool = snap.pools[index]
            if pool.name in names:
                continue
            if use_class and not class_matches(pool, demand.device_class if demand else None):
                continue
            if demand is None and pool.model.device_class != "cpu":
                continue
            if allowed and pool.name not in allowed and pool.model.name not in allowed:
                continue
            if demand is not None and demand.count >= 1 and not any(snap.row_total[r] >= demand.count for r in pool.rows):
                continue  # no node of the pool has that many devices
            if not pool_verdict(pool, spec, ctx.compat.check).ok:
                continue
            names.append(pool.name)
    return names


def _visible(tenant: str, scopes: list[str] | None) -> bool:
    return scopes is None or any(tenant == s or tenant.startswith(s + "/") for s in scopes)


@dataclass
class WaitingShape:
    """Queued tasks of one shape (the spec but its name): one queue, one set of candidate pools."""

    queue: str
    pools: list[str]
    task_type: str
    count: int = 0
    oldest: datetime | None = None  # the earliest entry into the queue among them


@dataclass
class Waiting:
    """The queued tasks the caller may see, by shape, and each with its shape."""

    shapes: dict[str, WaitingShape]
    tasks: list[QueuedTask]

    def longest(self, n: int, now: datetime) -> list[dict]:
        """The n longest-waiting tasks (oldest entry first), as the overview lists them."""
        oldest = heapq.nsmallest(n, self.tasks, key=lambda t: (t.queued_at or t.created_at, t.id))
        return [_waiting_row(t, self.shapes[t.shape], now) for t in oldest]


def _waiting_row(task: QueuedTask, shape: WaitingShape, now: datetime) -> dict:
    since = task.queued_at or task.created_at
    return {
        "id": task.id,
        "name": task.name,
        "tenant": task.tenant,
        "type": task.task_type,
        "priority": task.priority,
        "queue": shape.queue,
        "pools": shape.pools,
        "queued_at": iso_utc(since),
        "wait_s": max(0.0, (now - since).total_seconds()),
        "reason": (task.pending_explanation or {}).get("summary", ""),
    }


def _visible(tenant: str, scopes: list[str] | None) -> bool:
    return scopes is None or any(tenant == s or tenant.startswith(s + "/") for s in scopes)


def waiting_tasks(ctx: ServiceContext, session: Session, inv: Inventory, snap: Snapshot, scopes: list[str] | None) -> Waiting:
    """Queued tasks within `scopes`, grouped by shape with their queue and candidate pools.
    From the process's queue cache (services/queue_cache.py): only rows that moved since the
    last reader are read, and the work per call is one pass over the tasks plus one
    resolution per shape. A task's `reason` is as the cache has it; the overview reads the
    few it shows from their rows (`with_current_reasons`)."""
    tasks = [t for t in queue_cache(ctx).refresh(session) if _visible(t.tenant, scopes)]
    # Long queues hold many tasks of the same shape (a sweep, a template): checking each
    # shape's pools once keeps the overview and /metrics fast at thousands of queued tasks.
    shapes: dict[str, WaitingShape] = {}
    for task in tasks:
        shape = shapes.get(task.shape)
        if shape is None:
            try:
                spec = resolve_task_spec(inv, {k: v for k, v in task.spec.items() if k != "kind"})
                shape = WaitingShape(route(spec, list(inv.queues.values())).name, candidate_pools(ctx, inv, snap, spec), task.task_type)
            except Exception:  # the inventory changed under it: the scheduler fails it on its next cycle
                shape = WaitingShape(task.spec.get("queue") or "default", [], task.task_type)
            shapes[task.shape] = shape
        since = task.queued_at or task.created_at
        shape.count += 1
        if shape.oldest is None or since < shape.oldest:
            shape.oldest = since
    return Waiting(shapes, tasks)


def with_current_reasons(session: Session, waiting: list[dict]) -> list[dict]:
    """`waiting` with each task's reason read from its row (another replica's scheduler may
    have explained it since this one's cache read it)."""
    ids = [t["id"] for t in waiting]
    current = dict(session.execute(select(TaskRow.id, TaskRow.pending_explanation).where(TaskRow.id.in_(ids))).all()) if ids else {}
    return [{**t, "reason": (current.get(t["id"]) or {}).get("summary", "")} for t in waiting]


def _admissions(session: Session, scopes: list[str] | None, since: datetime) -> list[tuple[str, str, float]]:
    """(pool, task type, wait seconds) of tasks admitted since `since` (their latest admission)."""
    stmt = (
        select(TaskRow.task_type, TaskRow.queued_at, TaskRow.admitted_at, PlacementRow.pool)
        .join(PlacementRow, (PlacementRow.task_id == TaskRow.id) & (PlacementRow.attempt == TaskRow.attempt) & (PlacementRow.rank == 0))
        .where(TaskRow.admitted_at.is_not(None), TaskRow.admitted_at >= since, TaskRow.queued_at.is_not(None))
    )
    out = []
    for task_type, queued_at, admitted_at, pool in session.execute(scoped(stmt, scopes)).all():
        out.append((pool, task_type, max(0.0, (admitted_at - queued_at).total_seconds())))
    return out


def _queue_table(key: str, waiting: Waiting, admitted: list[tuple[str, float]], names: list[str], now: datetime) -> list[dict]:
    """Per key value (a shape's "pools", "task_type" or "queue"): waiting now, oldest wait
    now, admissions in the window with p50/p90."""
    count: dict[str, int] = defaultdict(int)
    oldest: dict[str, datetime] = {}
    for shape in waiting.shapes.values():
        value = getattr(shape, key)
        for v in value if isinstance(value, list) else [value]:
            count[v] += shape.count
            if v not in oldest or shape.oldest < oldest[v]:
                oldest[v] = shape.oldest
    past: dict[str, list[float]] = defaultdict(list)
    for value, wait in admitted:
        past[value].append(wait)
    ordered = list(dict.fromkeys([*names, *sorted(count), *sorted(past)]))
    return [
        {
            "name": value,
            "waiting": count.get(value, 0),
            "oldest_wait_s": max(0.0, (now - oldest[value]).total_seconds()) if value in oldest else None,
            "admitted": len(past.get(value, [])),
            "p50_wait_s": percentile(past.get(value, []), 0.5),
            "p90_wait_s": percentile(past.get(value, []), 0.9),
        }
        for value in ordered
    ]


def _held_intervals(session: Session, scopes: list[str] | None, since: datetime, now: datetime) -> list[tuple[str, float, datetime, datetime]]:
    """(pool, devices held, from, to) per worker of every task holding devices after `since`."""
    active = [s.value for s in ACTIVE_STATES]
    stmt = (
        select(
            TaskRow.state,
            TaskRow.started_at,
            TaskRow.admitted_at,
            TaskRow.finished_at,
            PlacementRow.pool,
            PlacementRow.device_indices,
            PlacementRow.device_fraction,
        )
        .join(PlacementRow, (PlacementRow.task_id == TaskRow.id) & (PlacementRow.attempt == TaskRow.attempt))
        .where(or_(TaskRow.finished_at.is_(None), TaskRow.finished_at > since))
        .where(or_(TaskRow.started_at.is_not(None), TaskRow.state.in_(active)))
    )
    out = []
    for state, started, admitted, finished, pool, indices, fraction in session.execute(scoped(stmt, scopes)).all():
        if not indices:
            continue  # device-less work (CPU and memory only) holds no devices
        if state in active:  # still holding its devices: from its start (or admission) to now
            start, end = started or admitted, now
        elif started is not None:  # ended (a requeued, preempted attempt has no start left)
            start, end = started, finished or now
        else:
            continue
        if start is not None and end > start:
            out.append((pool, len(indices) * float(fraction or 1.0), start, end))
    return out


def _overlap_hours(start: datetime, end: datetime, lo: datetime, hi: datetime) -> float:
    return max(0.0, (min(end, hi) - max(start, lo)).total_seconds()) / 3600


def utilisation(inv: Inventory, totals: dict[str, int], intervals, now: datetime) -> dict:
    """Device-hours used ÷ available per pool and class for each window, and per hour of
    the last 24 h per class (for the trend chart)."""
    class_of = {}
    for name, pool in inv.pools.items():
        model = inv.catalog.get(pool.model) if pool.model in inv.catalog else None
        class_of[name] = model.device_class.value if model else "unknown"
    used: dict[str, dict[str, float]] = {w: defaultdict(float) for w in WINDOWS}
    hours = [now - timedelta(hours=24 - i) for i in range(24)]
    hourly_used: dict[str, list[float]] = defaultdict(lambda: [0.0] * 24)
    for pool, devices, start, end in intervals:
        for window, span in WINDOWS.items():
            used[window][pool] += devices * _overlap_hours(start, end, now - span, now)
        for i, lo in enumerate(hours):
            if end > lo and start < lo + timedelta(hours=1):
                hourly_used[class_of.get(pool, "unknown")][i] += devices * _overlap_hours(start, end, lo, lo + timedelta(hours=1))
    pools = []
    for name in sorted(totals):
        entry = {"pool": name, "class": class_of.get(name, "unknown"), "devices": totals[name]}
        for window, span in WINDOWS.items():
            entry[window] = _ratio(used[window].get(name, 0.0), totals[name] * span.total_seconds() / 3600)
            entry[f"{window}_device_hours"] = round(used[window].get(name, 0.0), 3)
        pools.append(entry)
    classes = []
    class_devices: dict[str, int] = defaultdict(int)
    for name, count in totals.items():
        class_devices[class_of.get(name, "unknown")] += count
    for cls in sorted(class_devices):
        entry = {"class": cls, "devices": class_devices[cls]}
        for window, span in WINDOWS.items():
            hours_used = sum(used[window].get(p, 0.0) for p in totals if class_of.get(p) == cls)
            entry[window] = _ratio(hours_used, class_devices[cls] * span.total_seconds() / 3600)
            entry[f"{window}_device_hours"] = round(hours_used, 3)
        classes.append(entry)
    return {
        "pools": pools,
        "classes": classes,
        "hourly": {
            "hours": [iso_utc(h) for h in hours],
            "classes": {cls: [_ratio(v, class_devices[cls]) for v in hourly_used.get(cls, [0.0] * 24)] for cls in sorted(class_devices)},
        },
    }


def workload(ctx: ServiceContext, session: Session, scopes: list[str] | None, window: str) -> dict:
    """Queues, waits, utilisation and task counts, counting only tasks within `scopes`."""
    now = ctx.clock.now()
    since = now - WINDOWS[window]
    inv = read_inventory(ctx, session)
    snap = live_snapshot(ctx, session)
    waiting = waiting_tasks(ctx, session, inv, snap, scopes)
    admitted = _admissions(session, scopes, since)
    totals = {name: counts["total"] for name, counts in device_counts(snap).items()}
    pool_names = sorted(totals)
    type_names = sorted({s.task_type for s in waiting.shapes.values()} | {a[1] for a in admitted})
    queue_names = ["default", *sorted(inv.queues)]
    states = state_counts(session, scopes)
    return {
        "now": iso_utc(now),
        "window": window,
        "scoped": scopes is not None,
        "states": states,
        "waiting": len(waiting.tasks),
        "pending_approval": states.get(TaskState.PENDING_APPROVAL.value, 0),
        "queues": {
            "by_pool": _queue_table("pools", waiting, [(p, w) for p, _, w in admitted], pool_names, now),
            "by_task_type": _queue_table("task_type", waiting, [(t, w) for _, t, w in admitted], type_names, now),
            "by_queue": _queue_table("queue", waiting, [], queue_names, now),
        },
        "longest_waiting": with_current_reasons(session, waiting.longest(LONGEST_WAITING, now)),
        "deadlines_at_risk": deadlines.at_risk(ctx, session, waiting.tasks, scopes),
        "utilisation": utilisation(inv, totals, _held_intervals(session, scopes, now - max(WINDOWS.values()), now), now),
    }
