"""Reservations for blocked queue heads, so that backfill never delays them.

When the head of a queue cannot start, it gets a reservation: the nodes it would use
once enough running work has ended, and the time that happens (from the running tasks'
expected ends). A later, smaller task may still start now — but on reserved nodes only
if it is expected to finish before the reserved start (backfill, as in Slurm).
Without runtime estimates the reserved nodes are simply kept for the head, which is
what keeps big gangs from starving behind a stream of small tasks.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import attrgetter

from hetpool.core.clock import as_utc
from hetpool.core.inventory import DeviceModelSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import Assignment, assign
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.explain import Explanation, Reason, from_assignment
from hetpool.scheduling.filters import CompatCheck
from hetpool.scheduling.running import BASIS_ESTIMATE, RunningTask
from hetpool.scheduling.snapshot import Snapshot
from hetpool.scheduling.victim_arrays import give_back, held_of

MAX_RELEASES = 512  # bound the what-if walk; beyond this the head keeps a node reservation only

# A wait for the preferred model gives way to the substitute once it has run this long
# past the start it was promised: at least PROMISE_GRACE_S (a device freed on time but
# noticed a cycle or two late breaks no promise), or PROMISE_GRACE_SHARE of the promised
# wait (ten minutes late on a two-hour wait is not yet a broken promise).
PROMISE_GRACE_S = 60.0
PROMISE_GRACE_SHARE = 0.1


@dataclass(frozen=True)
class Reservation:
    task_id: str
    nodes: frozenset[str]
    start_at: datetime | None  # None: unknown (running work without runtime estimates)
    device_class: str | None = None  # the head's device class (for per-class backfill rules)


def release_running(snap: Snapshot, task: RunningTask) -> None:
    for a in task.allocations:
        row = snap.row_of(a.node, a.pool)
        if row is not None:
            snap.release(row, a.device_indices, a.device_fraction, a.cpu, a.memory_gb)
        elif a.node in snap.node_by_name:
            n = snap.node_by_name[a.node]
            snap.free_cpu[n] += a.cpu
            snap.free_mem[n] += a.memory_gb


def by_end(running: list[RunningTask]) -> list[RunningTask]:
    """The work with an expected end, soonest first (the order earliest_fit releases it in)."""
    return sorted((r for r in running if r.expected_end is not None), key=_END)


_END = attrgetter("expected_end")


def first_endings(running_by_end: list[RunningTask], admitted: list[RunningTask]) -> list[RunningTask]:
    """`by_end(running + admitted)[:MAX_RELEASES]` from the running work already by end (once
    per cycle: it is the same all cycle) and the cycle's admissions: a merge that keeps the
    running work first among equal ends, as the stable sort of the concatenation does, in
    place of sorting all running work per reservation (~15,000 at 5,000 nodes)."""
    merged = heapq.merge(running_by_end, by_end(admitted), key=_END)
    return list(itertools.islice(merged, MAX_RELEASES))


# Up to this many tasks are given back one allocation at a time: numpy's fixed cost per
# call is more than the loop's for a few (a small estate's reservation search), less for many.
LOOP_RELEASE_MAX = 8


def release_all(snap: Snapshot, tasks: list[RunningTask]) -> None:
    """Give back every task's capacity on `snap` (in place)."""
    if len(tasks) <= LOOP_RELEASE_MAX:
        for r in tasks:
            release_running(snap, r)
    else:
        give_back(snap, [held_of(snap, r) for r in tasks])


def earliest_fit(
    snap: Snapshot, task: TaskSpec, running: list[RunningTask], compat_check: CompatCheck, now: datetime, *, ordered: bool = False, **assign_kwargs
) -> tuple[datetime | None, Assignment | None]:
    """When `task` could first start as running work ends in expected order, and where.

    More work ended never means less capacity, so "fits after the first k endings" is
    monotone in k: a doubling search finds a k that fits, then a binary search between
    the last two probes finds the smallest — O(log n) placement attempts, not O(n).
    """
    # `ordered`: `running` is already the work with an end, by end (by_end).
    ending = (running if ordered else by_end(running))[:MAX_RELEASES]
    if not ending:
        return None, None
    scratch, done = snap.copy(), 0  # `scratch` has the first `done` endings released

    def advance(to: int) -> None:
        nonlocal done
        release_all(scratch, ending[done:to])
        done = to

    low, k = 0, 1  # invariant: the first `low` endings are not enough
    while True:
        base = scratch.copy()
        advance(k)
        result = assign(scratch, task, compat_check, explain=False, **assign_kwargs)
        if result.feasible:
            break
        if k == len(ending):
            return None, None
        low, k = k, min(2 * k, len(ending))
    # The smallest fitting count lies in (low, k]: bisect from the copy taken at `low`.
    best, best_result = k, result
    lo, hi = low + 1, k - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        probe = base.copy()
        release_all(probe, ending[low:mid])
        trial = assign(probe, task, compat_check, explain=False, **assign_kwargs)
        if trial.feasible:
            best, best_result, hi = mid, trial, mid - 1
        else:
            lo = mid + 1
    return max(ending[best - 1].expected_end, now), best_result


def reserve(
    task_id: str,
    snap: Snapshot,
    idle: Snapshot,
    task: TaskSpec,
    running: list[RunningTask],
    compat_check: CompatCheck,
    now: datetime,
    *,
    ordered: bool = False,
    **assign_kwargs,
) -> Reservation | None:
    """Where and from when `task` is held a reservation (None: it fits nowhere, even idle);
    `ordered`: `running` is already the work with an end, by end (see earliest_fit)."""
    start, result = earliest_fit(snap, task, running, compat_check, now, ordered=ordered, **assign_kwargs)
    if result is None:
        result = assign(idle, task, compat_check, explain=False, **assign_kwargs)
        if not result.feasible:
            return None
    demand = task.per_worker.devices
    return Reservation(task_id, frozenset(p.node for p in result.placements), start, demand.device_class.value if demand else None)


def may_use_reserved(task: TaskSpec, reservation: Reservation, now: datetime, models: dict[str, DeviceModelSpec]) -> bool:
    """A backfill candidate may use reserved nodes only if it ends before the reserved start.

    Its runtime is taken on the slowest device it could get, to stay on the safe side. It
    must be preemptible: should its estimate prove wrong, it gives way to the head once it
    has overrun it (cycle_preempt.plan_overrun_eviction, the backfill bound).
    """
    return ends_before(slowest_runtime_s(task, models), reservation, now)


def slowest_runtime_s(task: TaskSpec, models: dict[str, DeviceModelSpec]) -> float | None:
    """The task's runtime on the slowest device it could get; None: it may never backfill
    reserved nodes (no estimate, or not preemptible). Depends on the task alone."""
    if task.runtime_estimate_s is None or not task.preemptible:
        return None
    demand = task.per_worker.devices
    named = [models[m] for m in (task.candidates or (demand.models if demand else [])) if m in models]
    if demand is not None and not named:
        named = [m for m in models.values() if m.device_class == demand.device_class]
    return max((runtime_on(task, m) or 0.0) for m in named) if named else task.runtime_estimate_s


def ends_before(seconds: float | None, reservation: Reservation, now: datetime) -> bool:
    """Does work of `seconds` (slowest_runtime_s) started now end before the reserved start?"""
    if reservation.start_at is None or seconds is None:
        return False
    return now + timedelta(seconds=seconds) <= reservation.start_at


@dataclass(frozen=True)
class PreferredWait:
    """The promise a task was given when it chose to wait for its preferred model: that
    model's devices would be its by `promised_start`. Carried from one cycle to the next
    in the task's explanation (facts `preferred_model`, `promised_start`, `waiting_since`),
    so that a wait whose estimate keeps being revised still ends."""

    model: str
    promised_start: datetime
    since: datetime

    @classmethod
    def from_explanation(cls, data: dict | None) -> PreferredWait | None:
        """The promise in a stored explanation; None when it holds none (or not readably)."""
        if not isinstance(data, dict) or data.get("reason") != Reason.WAITING_FOR_PREFERRED.value:
            return None
        try:
            promised, since = (as_utc(datetime.fromisoformat(data[key])) for key in ("promised_start", "waiting_since"))
            return cls(str(data["preferred_model"]), promised, since)
        except (KeyError, TypeError, ValueError):  # written by an older version: no promise to hold it to
            return None

    def deadline(self) -> datetime:
        """The last moment the wait is kept: the promised start plus its grace."""
        promised_wait = max((self.promised_start - self.since).total_seconds(), 0.0)
        try:
            return self.promised_start + timedelta(seconds=max(PROMISE_GRACE_S, PROMISE_GRACE_SHARE * promised_wait))
        except OverflowError:  # a promise at the end of the calendar: no grace to add
            return self.promised_start

    def broken(self, now: datetime) -> bool:
        return now > self.deadline()


def preferred_only(spec: TaskSpec) -> TaskSpec:
    """The task restricted to its preferred (first) candidate: what a waiting task waits for."""
    return spec.copy_with(fallback=spec.fallback[:1], any_of=[])


def prefer_waiting(
    working,
    spec,
    result,
    by_pool,
    compat_check,
    now,
    models,
    kwargs,
    banked: dict[str, float],
    promise: PreferredWait | None = None,
    ending_memo: dict | None = None,
    fit_memo: tuple[dict, tuple] | None = None,
) -> Explanation | None:
    """Wait for the preferred (first) candidate when it would finish before the substitute.

    `banked` holds, per device model, the device-seconds of work that already chose to
    wait for it in this cycle: the preferred devices are then expected to be free only
    after that work too (spread over the model's devices), so that not every waiting
    task counts on the same soon-free device.

    `promise` is what the task was told when it started waiting: once that start has
    passed (with grace, see PreferredWait.broken) the substitute is taken, whatever the
    revised estimates say now — they were wrong once already.

    `fit_memo` — (the cycle's memo, the task's shape under its constraints) — keeps when and
    where the preferred devices would hold the task, per shape, while nothing was taken on
    or given back to the preferred pools (Snapshot.capacity_version) and the work on them
    is the same: tasks of one shape then ask it once, not once each.
    """
    if promise is not None and promise.broken(now):
        return None
    substitute = models.get(result.placements[0].model)
    sub_end = now.timestamp() + (runtime_on(spec, substitute) or 0.0)
    preferred = preferred_only(spec)
    # Only work on the preferred devices' pools can free them (host CPU and memory aside).
    wanted = set(spec.fallback[:1]) | set(spec.per_worker.devices.models if spec.per_worker.devices else [])
    pools = [p.name for p in working.pools if p.name in wanted or p.model.name in wanted]
    # The work on those pools by end, once per cycle while it stays the same (`ending_memo`, the
    # cycle's: the lists of `by_pool` only grow within a cycle, as work is admitted).
    memo = {} if ending_memo is None else ending_memo
    key = (tuple(pools), tuple(len(by_pool.get(pool, ())) for pool in pools))
    if key not in memo:
        memo[key] = by_end(list({id(r): r for pool in pools for r in by_pool.get(pool, ())}.values()))
    relevant = memo[key]
    versions = working.capacity_version([working.pool_by_name[p] for p in pools])
    fits, shape = fit_memo if fit_memo is not None else ({}, None)
    found = fits.get((shape, key, versions)) if shape is not None else None
    if found is None:
        found = earliest_fit(working, preferred, relevant, compat_check, now, ordered=True, **kwargs)
        if shape is not None:
            fits[(shape, key, versions)] = found
    start, pref = found
    if pref is None:
        return None
    model_name = pref.placements[0].model
    pref_model = models.get(model_name)
    pref_seconds = runtime_on(spec, pref_model) or 0.0
    queue_delay = banked.get(model_name, 0.0) / max(devices_of(working, model_name), 1)
    pref_end = start.timestamp() + queue_delay + pref_seconds
    if pref_end >= sub_end:
        return None
    devices = sum(len(p.device_indices) * p.device_fraction for p in pref.placements)
    banked[model_name] = banked.get(model_name, 0.0) + devices * pref_seconds
    sub_model = result.placements[0].model
    info = from_assignment(result, True)
    info.reason = Reason.WAITING_FOR_PREFERRED
    kept = promise if promise is not None and promise.model == model_name else None
    promised = kept.promised_start if kept else datetime.fromtimestamp(start.timestamp() + queue_delay, now.tzinfo)
    info.with_facts(
        preferred_model=model_name,
        free_at=start.isoformat(timespec="minutes"),
        substitute_model=sub_model,
        substitute_rejected={"model": sub_model, "finish_at": datetime.fromtimestamp(sub_end, now.tzinfo).isoformat()},
        promised_start=promised.isoformat(),
        waiting_since=(kept.since if kept else now).isoformat(),
    )
    return info.with_facts(**revision_facts(relevant, start))


def revision_facts(running: list[RunningTask], by: datetime) -> dict:
    """How the ends counted on up to `by` were revised, if any was: `estimate_basis`
    (running.BASIS_OVERRUN or BASIS_HISTORY) and `revised_from` (the end the overrunning
    task's own estimate gave) of the latest such end; {} when all are the tasks' own."""
    revised = [r for r in running if r.estimate_basis != BASIS_ESTIMATE and r.expected_end is not None and r.expected_end <= by]
    if not revised:
        return {}
    last = max(revised, key=lambda r: r.expected_end)
    return {"estimate_basis": last.estimate_basis, "revised_from": last.revised_from.isoformat(timespec="minutes") if last.revised_from else None}


def devices_of(snap: Snapshot, model: str) -> int:
    return int(sum(snap.device_totals()[p.rows].sum() for p in snap.pools if p.model.name == model))
