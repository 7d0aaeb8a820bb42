"""Estimated start times for pending tasks: a small event simulation over a scratch snapshot.

The forecast replays what the scheduler would do if every runtime estimate held: running
tasks free their capacity at their expected end, and at `now` and after each such event
the pending tasks are walked in queue order and every one that fits starts (a later small
task may start before an earlier big one, as in the real cycle). Tasks started in the
forecast end after `runtime_on` their chosen model, which adds events of its own.

Capacity whose end is unknown (no `expected_end`, no runtime estimate and no default) is
never released, so whatever waits only for it gets `start_at=None`; so is capacity whose
end lies beyond FORECAST_SPAN, which keeps every date the walk computes a valid one.

A task that cannot be estimated (its evaluation raises) is left out of the walk and named
in `errors`, with the error; the others are estimated as if it were not there.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from hetpool.core.inventory import DeviceModelSpec, TaskType
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import WorkerPlacement, assign, candidate_groups, one_model_gang
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.explain import ETA_BEYOND_HORIZON, ETA_FORECAST, ETA_NONE, ETA_PENDING, ETA_RESERVATION, Explanation, Reason
from hetpool.scheduling.filters import CompatCheck, memoized, pool_verdict
from hetpool.scheduling.forecast_interval import LAST_FORECAST_KEY, LastForecast
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, Snapshot

if TYPE_CHECKING:  # cycle imports this module: a runtime import would be circular
    from hetpool.scheduling.cycle import Decision, QueuedTask


@dataclass(frozen=True)
class StartEstimate:
    task_id: str
    position: int  # 1-based position in the given order
    start_at: datetime | None  # None: cannot be estimated (blocked by unknown ends, or beyond horizon)
    wait_s: float | None
    pool: str | None  # where it is expected to start
    model: str | None


# Ends further out than this are not forecast (treated as unknown): no plan reaches that
# far, and runtimes of up to 366 days / 0.001 (core/limits.py) chained one after another
# would otherwise walk past the last date a datetime can hold.
FORECAST_SPAN = timedelta(days=100 * 366)


def end_after(start: datetime, seconds: float | None) -> datetime | None:
    """`start` + `seconds`; None when unknown, not finite, negative or past the calendar."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return None
    try:
        return start + timedelta(seconds=seconds)
    except OverflowError:
        return None


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


# `not_before` of a task the forecast does not hold back, and the pseudo-pool that marks a
# walk woken by a held-back task's bound (no pool has a negative index).
NO_BOUND = object()
WAKE = -1


class _Pending:
    """One not-yet-started task and what is needed to decide cheaply whether to retry it."""

    __slots__ = ("index", "item", "pools", "rows", "nodes", "parts", "whole", "slice", "shape", "tried", "not_before")

    def __init__(self, index: int, item: QueuedTask, snap: Snapshot, check: CompatCheck, not_before=NO_BOUND) -> None:
        self.index, self.item, self.tried = index, item, False
        self.not_before = not_before  # a datetime, NO_BOUND, or None: never (see forecast_starts)
        spec = item.spec
        # Every pool any candidate group could use, less those assign's own pool filter
        # rejects whatever is free: capacity freed elsewhere cannot help this task.
        groups = {i for g in candidate_groups(snap, spec) for i in g.pools}
        self.pools = frozenset(i for i in groups if pool_verdict(snap.pools[i], spec, check).ok)
        # The rows of a set of pools and a gang's parts over them depend on the snapshot's
        # layout alone: kept with it, across cycles (the parts' np.unique was a tenth of a
        # forecast, per waiting gang per cycle).
        cache = snap.forecast_cache
        found = cache.get(self.pools)
        if found is None:
            arrays = [snap.pools[p].row_array for p in sorted(self.pools)]
            rows = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
            found = cache[self.pools] = (rows, snap.row_node[rows])
        self.rows, self.nodes = found
        key = (self.pools, _parts_rule(spec))
        if key not in cache:
            cache[key] = _gang_parts(snap, spec, self.rows)
        self.parts = cache[key]
        # Equal shapes fit or fail together (TaskSpec.placement_shape, as the cycle's failed
        # shapes); the tenant too, where pools are reserved for tenants.
        self.shape = (self.pools, spec.tenant, spec.placement_shape)
        demand = spec.per_worker.devices
        self.whole = self.slice = None
        if demand is not None and demand.count >= 1 and not (demand.memory_gb or demand.cores_percent):
            self.whole = demand.count
        elif demand is not None:
            # A lower bound on the share of one device a worker takes (the memory part
            # depends on the pool's model and is left out), for a bound over devices.
            parts = [demand.count if demand.count < 1 else 0.0, (demand.cores_percent or 0.0) / 100.0]
            self.slice = max(parts) or None

    def may_fit(self, snap: Snapshot) -> bool:
        """A necessary condition for `assign` to succeed, over the union of candidate rows.

        It ignores health, topology, groups and per-node sharing, all of which only make
        placement harder, so a False here is always a true "does not fit".
        """
        if not len(self.rows):
            return False
        per_worker, workers = self.item.spec.per_worker, self.item.spec.workers
        slots = np.minimum(
            np.floor(snap.free_cpu[self.nodes] / per_worker.cpu + 1e-9),
            np.floor(snap.free_mem[self.nodes] / per_worker.memory_gb + 1e-9),
        )
        if self.whole is not None:
            slots = np.minimum(slots, np.floor(snap.whole_free()[self.rows] / self.whole + 1e-9))
        slots = np.maximum(slots, 0)
        if slots.sum() < workers:
            return False
        if self.parts is not None and np.bincount(self.parts, weights=slots).max() < workers:
            return False  # no one model / node / network group / zone holds the whole gang
        if self.slice is not None:
            # Padding (-2) and broken devices (-1) count as nothing free.
            return np.floor(np.maximum(snap.dev_free.data[self.rows], 0) / self.slice + 1e-9).sum() >= workers
        return True


def _parts_rule(spec: TaskSpec) -> tuple:
    """What _gang_parts reads of a task: equal rules give equal parts over the same rows."""
    return (spec.workers >= 2, spec.topology.same if spec.topology else "none", one_model_gang(spec))


def _gang_parts(snap: Snapshot, spec: TaskSpec, rows: np.ndarray) -> np.ndarray | None:
    """For a gang that must sit within one part — one device model (assign.one_model_gang),
    one node, network group or zone (its topology) — each row's part as a small integer, so
    that may_fit can ask whether any one part has room for every worker. None: no such rule."""
    same = spec.topology.same if spec.topology else "none"
    if spec.workers < 2 or not len(rows) or (same == "none" and not one_model_gang(spec)):
        return None
    nodes = snap.row_node[rows]
    keys: list[np.ndarray] = []
    if one_model_gang(spec):
        keys.append(snap.row_model_index[rows])
    if same == "node":
        keys.append(nodes)
    elif same == "zone":
        keys.append(np.unique(snap.node_zone_array[nodes], return_inverse=True)[1])
    elif same != "none":
        keys.append(snap.node_group_index[nodes])
    combined = np.stack(keys, axis=1) if len(keys) > 1 else keys[0][:, None]
    return np.unique(combined, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _release(snap: Snapshot, held: Allocation | WorkerPlacement) -> tuple[int, ...]:
    """Give capacity back (allocations and placements carry the same fields); returns the
    pools with a row on the node touched, whose free capacity changed."""
    row = snap.row_of(held.node, held.pool)
    if row is not None:
        snap.release(row, held.device_indices, held.device_fraction, held.cpu, held.memory_gb)
        return snap.row_node_pools[row]
    n = snap.node_by_name.get(held.node)
    if n is None:
        return ()
    # Pool gone: build_snapshot still held the node's CPU and memory.
    snap.free_cpu[n] += held.cpu
    snap.free_mem[n] += held.memory_gb
    return tuple(int(snap.row_pool[r]) for r in np.flatnonzero(snap.row_node == n))


def _runtime(spec: TaskSpec, placements: list[WorkerPlacement], snap: Snapshot, models: dict[str, DeviceModelSpec]) -> float | None:
    """Gang runtime: the slowest worker's model decides when the whole task ends."""
    runtimes = []
    for p in placements:
        model = models.get(p.model)
        if model is None and p.pool in snap.pool_by_name:
            model = snap.pools[snap.pool_by_name[p.pool]].model
        runtimes.append(runtime_on(spec, model))
    if not runtimes or any(r is None for r in runtimes):
        return None
    return max(runtimes)


def forecast_starts(
    snap: Snapshot,
    ordered: list[QueuedTask],
    running: list[RunningTask],
    compat_check: CompatCheck,
    now: datetime,
    models: dict[str, DeviceModelSpec],
    *,
    horizon: int = 200,
    default_runtime_s: float | None = None,
    errors: dict[str, str] | None = None,
    not_before: dict[str, datetime | None] | None = None,
) -> dict[str, StartEstimate]:
    """Estimated start per task id, for `ordered` in the given (queue) order.

    `snap` must already hold the allocations of `running`; it is not changed. `errors`,
    when given, receives task id → error for each task that could not be estimated.
    `not_before` holds back a task until a time (None: for the whole forecast) — a task
    blocked by another head's reservation may not start before that reservation does.
    """
    errors = {} if errors is None else errors
    forecast = _Forecast(snap.copy(), memoized(compat_check), now, models, default_runtime_s, errors)
    forecast.hold_until_their_ends(running)
    forecast.queue(ordered[: max(horizon, 0)], not_before or {})
    forecast.run()
    out: dict[str, StartEstimate] = {}
    for i, item in enumerate(ordered):
        if i in forecast.started:
            at, placed = forecast.started[i]
            out[item.id] = StartEstimate(item.id, i + 1, at, (at - now).total_seconds(), placed.pool, placed.model)
        else:
            out[item.id] = StartEstimate(item.id, i + 1, None, None, None, None)
    return out


class _Forecast:
    """The replay behind forecast_starts: a scratch snapshot, the ends still to come (as
    events that give capacity back) and the tasks not yet started."""

    def __init__(self, scratch: Snapshot, check: CompatCheck, now: datetime, models, default_runtime_s, errors: dict[str, str]) -> None:
        self.scratch, self.check, self.now, self.models = scratch, check, now, models
        self.default_runtime_s, self.errors = default_runtime_s, errors
        # Events: (time, seq, allocations or placements to give back). seq keeps heap order total.
        self.seq = itertools.count()
        self.events: list[tuple[datetime, int, tuple]] = []
        self.pending: list[_Pending] = []
        self.started: dict[int, tuple[datetime, WorkerPlacement]] = {}  # index in the order → (start, first placement)

    def hold_until_their_ends(self, running: list[RunningTask]) -> None:
        for rt in running:
            if rt.expected_end is not None:  # unknown end: held for the whole forecast
                self.events.append((max(rt.expected_end, self.now), next(self.seq), rt.allocations))
        heapq.heapify(self.events)

    def queue(self, ordered: list[QueuedTask], not_before: dict[str, datetime | None]) -> None:
        for i, item in enumerate(ordered):
            try:
                self.pending.append(_Pending(i, item, self.scratch, self.check, not_before.get(item.id, NO_BOUND)))
            except Exception as exc:  # this task alone goes without an estimate
                self.errors[item.id] = _error(exc)
                continue
            bound = self.pending[-1].not_before
            if isinstance(bound, datetime) and bound > self.now:  # an event with nothing to give back: a walk at `bound`
                heapq.heappush(self.events, (bound, next(self.seq), ()))

    def run(self) -> None:
        t, first = self.now, True
        watched: set[int] = set()  # the pools some pending task could use
        while True:
            dirty = self.release_until(t)
            # A walk in which nothing any pending task could use was freed (and no held-back
            # task woke) would skip every task: most ends on a large estate free such pools.
            if first or WAKE in dirty or not watched.isdisjoint(dirty):
                before = len(self.pending)
                self.walk(t, dirty)
                if first or len(self.pending) != before:  # tasks started (or dropped out): fewer pools to watch
                    watched = set().union(*(p.pools for p in self.pending))
            first = False
            if not self.pending or not self.events:
                break
            t = self.events[0][0]

    def release_until(self, t: datetime) -> set[int]:
        """Release everything ending by t (past ends count as ending now); the pools it freed."""
        dirty: set[int] = set()
        while self.events and self.events[0][0] <= t:
            held = heapq.heappop(self.events)[2]
            if not held:
                dirty.add(WAKE)  # a held-back task may start now: walk, though nothing was freed
            for piece in held:
                # CPU and memory are per node: a release there can help a task on any of its pools.
                dirty.update(_release(self.scratch, piece))
        return dirty

    def walk(self, t: datetime, dirty: set[int]) -> None:
        """Start, in order, every pending task that fits at t."""
        scratch = self.scratch
        still: list[_Pending] = []
        failed: set = set()  # shapes that did not fit in this walk

        for p in self.pending:
            if p.not_before is not NO_BOUND and (p.not_before is None or p.not_before > t):
                p.tried = False  # not tried yet: the walk at its bound must try it
                still.append(p)
                continue
            # Early exits, cheapest first. Capacity only shrinks within a walk, so what
            # failed earlier in it (the same shape) still fails; nothing it could use was
            # freed since it last failed; a capacity bound already says no.
            try:
                skip = p.shape in failed or (p.tried and p.pools.isdisjoint(dirty)) or not p.may_fit(scratch)
                p.tried = True
                if skip or not (result := assign(scratch, p.item.spec, self.check, explain=False)).feasible:
                    failed.add(p.shape)
                    still.append(p)
                    continue
                # Before anything is taken: an error here leaves the scratch snapshot as it was.
                runtime = _runtime(p.item.spec, result.placements, scratch, self.models)
            except Exception as exc:  # this task alone drops out of the forecast
                self.errors[p.item.id] = _error(exc)
                continue
            self._start(p, t, result.placements, runtime)
        self.pending = still

    def _start(self, p: _Pending, t: datetime, placements: list[WorkerPlacement], runtime: float | None) -> None:
        for w in placements:
            self.scratch.take(self.scratch.row_of(w.node, w.pool), w.device_indices, w.device_fraction, w.cpu, w.memory_gb)
        self.started[p.index] = (t, placements[0])
        if runtime is None:
            runtime = self.default_runtime_s
        end = end_after(t, runtime)
        if end is not None and end - self.now <= FORECAST_SPAN:  # otherwise: never released in the forecast
            heapq.heappush(self.events, (end, next(self.seq), tuple(placements)))


def attach_estimates(
    snapshot, working, waiting, running, decisions: list[Decision], compat_check, now, models, horizon, blame, policy=None, due: bool = True
) -> set[str]:
    """Write each waiting task's position and estimated start into its decision's explanation.

    A task that can never start as it is (never fits, exceeds its quota) is left out of the
    walk: `eta_basis` "none". The others get `position`, `estimated_start` and
    `estimated_wait_s` and how the start was found (`eta_basis`): "forecast", or
    "reservation" where the task holds one that starts earlier than the forecast says (or
    the forecast found none) — the reserved start is the promise, so the estimate is never
    later than it — or "beyond_horizon" (no start found: `estimated_start` null, and the
    summary says so). `estimated_at` dates the estimate.

    The forecast walks the running work's ends and up to `horizon` tasks: on a large estate a
    tenth of a cycle. A cycle within `policy.estimate_interval` of the last forecast (not `due`,
    see forecast_interval.py) does not walk again: each waiting task keeps what the last forecast said
    of it (its position is this cycle's; a reservation made since still counts), and a task
    the last forecast did not cover gets what a forecast now would say past the horizon
    ("beyond_horizon"), or within it `eta_basis` "pending" and `next_estimate_at` — as Slurm's
    backfill scheduler revises the start times it shows every bf_interval. Returns the ids of
    the pending tasks (the next forecast's cycle decides them again: forecast_interval.py).
    `blame` (the cycle's) is kept naming the admitted task whose runtime is being read."""
    by_id = {d.task_id: d for d in decisions}
    walked = [item for item in waiting if by_id[item.id].explanation.reason not in NO_ESTIMATE]
    for item in waiting:
        if by_id[item.id].explanation.reason in NO_ESTIMATE:
            by_id[item.id].explanation.with_facts(estimated_start=None, estimated_wait_s=None, eta_basis=ETA_NONE)
    if not due:
        return _carry(snapshot.parking[LAST_FORECAST_KEY], walked, by_id, now, policy.estimate_interval_s)
    admitted = _admitted_as_running(decisions, models, now, blame)
    # The forecast answers for each task on its own: a task it cannot estimate says why,
    # and is still scheduled (an estimate is information, not a decision).
    errors: dict[str, str] = {}
    blocked = [item.id for item in walked if by_id[item.id].explanation.reason == Reason.BLOCKED_BY_RESERVATION]
    held_back = {task_id: _blocked_until(by_id[task_id].explanation) for task_id in blocked}
    estimates = forecast_starts(working, walked, running + admitted, compat_check, now, models, horizon=horizon, errors=errors, not_before=held_back)
    starts = {task_id: (est.start_at, est.pool) for task_id, est in estimates.items()}
    snapshot.parking[LAST_FORECAST_KEY] = LastForecast(now, horizon, policy, starts, errors)
    for item in walked:
        expl = by_id[item.id].explanation
        if item.id in errors:
            expl.with_facts(estimate_error=errors[item.id])
        est = estimates.get(item.id)
        if est is not None:
            facts = _eta_facts(est.start_at, _reserved_start(expl), now, horizon)
            expl.with_facts(position=est.position, estimated_pool=est.pool, estimated_at=now.isoformat(), **facts)
    return set()


def _carry(last: LastForecast, walked: list, by_id: dict, now: datetime, interval_s: float) -> set[str]:
    """Between forecasts: the last one's estimates, dated, with this cycle's positions; the
    ids of the tasks within the horizon that it did not cover."""
    pending: set[str] = set()
    for position, item in enumerate(walked, start=1):
        expl = by_id[item.id].explanation
        reserved = _reserved_start(expl)
        if item.id in last.starts or reserved is not None or position > last.horizon:
            start, pool = last.starts.get(item.id, (None, None))
            facts = _eta_facts(start, reserved, now, last.horizon)
            # A reservation made in this cycle is this cycle's promise; the rest is the last forecast's.
            at = now if facts["eta_basis"] == ETA_RESERVATION else last.at
            expl.with_facts(position=position, estimated_pool=pool, estimated_at=at.isoformat(), **facts)
            if item.id in last.errors:
                expl.with_facts(estimate_error=last.errors[item.id])
            continue
        due = last.at + timedelta(seconds=interval_s)
        facts = {"estimated_start": None, "estimated_wait_s": None, "eta_basis": ETA_PENDING, "next_estimate_at": due.isoformat()}
        expl.with_facts(position=position, estimated_pool=None, **facts)
        pending.add(item.id)
    return pending


# Reasons whose task cannot start as it stands: no forecast, no position.
NO_ESTIMATE = frozenset({Reason.NEVER_FITS, Reason.WAITING_FOR_RECOVERY, Reason.EXCEEDS_QUOTA, Reason.SET_ASIDE})


def _eta_facts(forecast: datetime | None, reserved: datetime | None, now: datetime, horizon: int) -> dict:
    if reserved is not None and (forecast is None or forecast > reserved):
        start, basis = reserved, ETA_RESERVATION
    elif forecast is not None:
        start, basis = forecast, ETA_FORECAST
    else:
        return {"estimated_start": None, "estimated_wait_s": None, "eta_basis": ETA_BEYOND_HORIZON, "horizon": horizon}
    return {"estimated_start": start.isoformat(), "estimated_wait_s": max(0.0, (start - now).total_seconds()), "eta_basis": basis}


def _blocked_until(expl: Explanation) -> datetime | None:
    """The start of the reservation that blocks the task (None: unknown, so never in the forecast)."""
    start = expl.facts.get("blocking_start_at")
    return datetime.fromisoformat(start) if start else None


def _reserved_start(expl: Explanation) -> datetime | None:
    start = (expl.facts.get("reservation") or {}).get("start_at")
    return datetime.fromisoformat(start) if start else None


def _admitted_as_running(decisions: list[Decision], models, now: datetime, blame) -> list[RunningTask]:
    """Work admitted this cycle already holds capacity in `working`; it runs from now on
    and gives its devices back after its own estimated runtime."""
    admitted = []
    for d in decisions:
        if not d.admit:
            continue
        blame.task_id = d.task_id
        spec = d.spec
        model = models.get(d.assignment.placements[0].model)
        seconds = runtime_on(spec, model) if spec is not None else None
        admitted.append(RunningTask(d.task_id, "", 0, TaskType.GENERAL, tuple(_as_allocations(d)), now, end_after(now, seconds), False))
    blame.task_id = None
    return admitted


def _as_allocations(decision: Decision) -> Iterator[Allocation]:
    for p in decision.assignment.placements:
        yield Allocation(p.node, p.pool, p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
