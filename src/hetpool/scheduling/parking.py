"""Parking: heads whose wait nothing has changed are not decided again.

On a busy estate most heads of a cycle wait — they do not fit now — and the next cycle
would decide most of them the same way: nothing they could use was freed. Kueue keeps such
workloads aside as "inadmissible" until an event could change their fate; so does this.
A head is **parked** after a decision of one of `PARKABLE` reasons that had no side effect
on other heads (no victims, no reservation held, no FIFO queue blocked). A head whose
preemption planning was deferred by `policy.max_preemption_tries` is parked as *deferred*:
it is decided again when its turn comes in a cycle with a try left (so the most deserving
deferred heads plan first, as before), or when, at its turn, capacity that grew can hold a
worker of it (looked at then, not as the cycle opens: the capacity a victim freed is its
preemptor's, decided first). A parked head is passed
over, as a carried one is (it keeps its explanation), until one of these happens:

- capacity **grew** on a pool it could use (a device, or CPU or memory of a node of that
  pool, more free than at the end of the previous cycle; a node or device back to health)
  and, when its turn comes, a grown row can still hold one whole worker of it after what
  this cycle placed before it (cycle_parked.still_parked): capacity that only shrank cannot
  make a failed placement fit (the same monotonicity the shape cache of a cycle relies on),
  and growth that earlier heads took cannot either. Asked at its turn, not as the cycle
  opens: a few freed devices no longer wake every head that could use them (on a busy
  estate, thousands per cycle for the tens the first of them take). A head with work it
  could evict there is let go by any growth on its pools while the cycle has a preemption
  try left (a little more free beside a victim may complete a plan), and only by a row
  that holds a worker once none is left (it could not plan);
- more running work it could **evict** is on those pools (preemptible and of a lower
  priority, or borrowing) than when it was parked, and its turn comes while the cycle has a
  preemption try left (without one it could not plan: on an estate where borrowers start
  every cycle, this let every head go, to be deferred);
- its turn comes while its queue holds no reservation yet (it may be owed it), or while a
  node other heads' reservations kept it off is no longer kept from it (cycle.still_parked);
- its priority rank changed (aging raised it), its spec changed (another object), the
  policy changed, or it has been parked for `MAX_PARKED_S` of the cycle clock or
  `MAX_PARKED_CYCLES` cycles, so that what depends on time alone (estimates, a deadline
  at risk) is refreshed now and then — at most an eighth of the cycle's head budget per
  cycle, oldest first (`refresh_limit`). A refresh by cycles alone (8, before) re-decided a
  long queue's every head within 8 cycles: ~5,000 heads a cycle for a 40,000-task queue,
  more than a cycle's whole budget; and unrationed, every head parked in one cycle came due
  in the same later one (the benchmark's steady state re-decided its whole budget then).
  A head that never fits is not refreshed by time: nothing in its explanation depends on it.

The parked set and the capacity it is compared against are kept with the snapshot that the
server and the simulator keep across cycles (`Snapshot.parking`); a snapshot built anew (a
changed inventory) parks nothing. `policy.park_waiting: false` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import candidate_groups
from hetpool.scheduling.explain import Reason
from hetpool.scheduling.filters import CompatCheck, class_matches, pool_verdict, slice_fraction
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Snapshot

__all__ = [
    "PARKABLE",
    "Evictable",
    "Parked",
    "Parking",
    "close_parking",
    "fits_grown",
    "fits_on_rows",
    "grown_pools",
    "open_parking",
    "rows_of_pools",
    "usable_pools",
    "worker_slots",
]

# A head blocked by another head's reservation is kept off that reservation's nodes: it is
# let go when they are no longer kept from it (the reservation ended, moved, or it may now
# backfill it) and a worker of it fits there, as any head kept off reserved nodes is.
PARKABLE = frozenset({Reason.WAITING_FOR_CAPACITY, Reason.NEVER_FITS, Reason.BLOCKED_BY_RESERVATION})
_MAY_RESERVE = frozenset({Reason.WAITING_FOR_CAPACITY, Reason.BLOCKED_BY_RESERVATION})
MAX_PARKED_CYCLES = 64
MAX_PARKED_S = 600.0
MAX_WAKE_KEYS = 100_000


@dataclass
class Parked:
    spec: TaskSpec  # the spec it was decided with (identity: a changed spec is another object)
    queue: str
    pools: frozenset[int]  # pool indices it could use
    evictable: int  # running work it could evict on those pools, when parked
    rank: int
    excluded: frozenset[int]  # nodes other heads' reservations kept it off (see still_parked)
    reserves: bool  # it would take its queue's reservation were none held (fits the idle estate)
    # It fits no pool even idle and healthy: only a new inventory (a new snapshot), a spec
    # or a policy change can change that — not capacity, not what runs, not health.
    never: bool = False
    # (whole devices, CPU, memory GB, device share) one worker needs (see worker_demand).
    demand: tuple[int, float, float, float] | None = None
    parked_at: datetime | None = None  # the cycle clock when it was parked
    # Its preemption was not planned (policy.max_preemption_tries was used up before its
    # turn): it is let go at its turn (cycle.still_parked) when the cycle still has a try, or
    # when a grown row can hold a worker of it then (`fits_grown`) — not for more evictable
    # work, which only a plan would use.
    deferred: bool = False
    parked_cycle: int = 0  # Parking.cycle when it was parked (it has been parked for Parking.cycle - this many cycles)
    group: tuple | None = field(default=None, compare=False, repr=False)  # see `key`
    wake: int = field(default=-1, compare=False, repr=False)  # its wake key's number (Parking.wake_id)

    def wake_key(self) -> tuple:
        """What whether it may still be let go once a cycle has settled reads
        (cycle_parked.settle): heads with equal keys get the same answer."""
        return (self.never, self.pools, self.demand, self.excluded)

    def key(self) -> tuple:
        """Everything of this parked head that whether it stays parked reads
        (cycle_parked.still_parked): its parking (pools, demand, rank, evictable work, the
        nodes it was kept off, ...), its queue, and of its spec the shape and tenant
        (cycle_state.shape_key), the estimate (which reservations it may not delay) and the
        gang's width. Heads with equal keys get the same answer at the same point of a
        cycle. Built once: neither the head nor its spec changes while it is parked."""
        if self.group is None:
            spec = self.spec
            devices = spec.per_worker.devices
            mixes = devices is not None and devices.mix_models
            parking = (self.never, self.deferred, self.pools, self.demand, self.rank, self.evictable, self.reserves, self.excluded)
            self.group = (self.queue, *parking, spec.tenant, spec.placement_shape, spec.runtime_estimate, spec.workers, mixes)
        return self.group


@dataclass
class Parking:
    """What `Snapshot.parking` holds between cycles."""

    parked: dict[str, Parked] = field(default_factory=dict)
    policy_key: str = ""
    # The capacity at the end of the previous cycle: device shares, CPU, memory, health.
    after: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    # This cycle: the rows where anything grew since then (None: everything may have).
    grown: np.ndarray | None = None
    # This cycle: the parked heads by `Parked.wake_key` (a sample head and the ids), and the
    # queues a parked head would take the reservation of; both built by open_parking's one
    # pass over the parked heads, so that settle and the cycle need no pass of their own.
    wake_groups: dict[int, tuple[Parked, set[str]]] = field(default_factory=dict)
    reserves_owed: set[str] = field(default_factory=set)
    cycle: int = 0  # cycles opened (Parked.parked_cycle counts from it)
    # Each wake key met so far → a number: open_parking groups tens of thousands of heads a
    # cycle, and an int is hashed and compared at once, a tuple of sets element by element.
    wake_ids: dict[tuple, int] = field(default_factory=dict)
    next_wake_id: int = 0

    def wake_id(self, parked: Parked) -> int:
        """The number of `parked`'s wake key (equal keys, equal numbers while the table lasts)."""
        key = parked.wake_key()
        found = self.wake_ids.get(key)
        if found is None:
            if len(self.wake_ids) >= MAX_WAKE_KEYS:
                self.wake_ids.clear()  # bounded: a key met again later gets a new number (two groups, the same answer)
            found = self.wake_ids[key] = self.next_wake_id
            self.next_wake_id += 1
        return found

    def grown_rows(self, snap: Snapshot) -> np.ndarray | None:
        """The rows where anything grew since the end of the previous cycle (None: no
        reference to compare with, so everything may have)."""
        if self.after is None or self.after[0].shape != snap.dev_free.data.shape:
            return None
        dev, cpu, mem, healthy = self.after
        eps = 1e-9
        node_grew = (snap.free_cpu > cpu + eps) | (snap.free_mem > mem + eps) | (snap.node_healthy & ~healthy)
        return np.flatnonzero((snap.dev_free.data > dev + eps).any(axis=1) | node_grew[snap.row_node])

    def remember(self, working: Snapshot) -> None:
        self.after = (working.dev_free.data.copy(), working.free_cpu.copy(), working.free_mem.copy(), working.node_healthy.copy())


def fits_grown(working: Snapshot, rows: np.ndarray | None, pools: frozenset[int], demand: tuple | None) -> bool:
    """Can one of the grown `rows` of `pools` hold a whole worker of `demand` on the working
    snapshot as it is now, after what this cycle already placed (a preemptor, decided first,
    has taken what its victims freed)? None rows or demand: it may."""
    if rows is None:
        return True
    return fits_on_rows(working, rows_of_pools(working, rows, pools), demand)


def rows_of_pools(snap: Snapshot, rows: np.ndarray, pools: frozenset[int]) -> np.ndarray:
    """Those of `rows` in `pools` (a mask over pools: np.isin costs ten times more)."""
    mask = np.zeros(len(snap.pools), dtype=bool)
    mask[list(pools)] = True
    return rows[mask[snap.row_pool[rows]]]


def fits_on_rows(working: Snapshot, rows: np.ndarray, demand: tuple | None) -> bool:
    """Can one of `rows` hold a whole worker of `demand` now (None demand: any row will do)?"""
    if not len(rows) or demand is None:
        return bool(len(rows))
    whole, cpu, mem, share = demand
    nodes = working.row_node[rows]
    fits = working.node_healthy[nodes] & (working.row_free_whole[rows] >= whole)
    fits &= (working.free_cpu[nodes] >= cpu - 1e-9) & (working.free_mem[nodes] >= mem - 1e-9)
    if share:  # a slice: some device of the row has that much of it free
        fits &= (working.dev_free.data[rows] >= share - 1e-9).any(axis=1)
    return bool(fits.any())


def worker_slots(working: Snapshot, rows: np.ndarray, demand: tuple, most: int, by_model: bool) -> int:
    """How many whole workers of `demand` `rows` could hold now, at most `most` per row — in
    the best device model alone when `by_model`. An upper bound: rows on one node each count
    the node's CPU and memory."""
    if not len(rows):
        return 0
    whole, cpu, mem, share = demand
    nodes = working.row_node[rows]
    slots = np.where(working.node_healthy[nodes], most, 0)
    if whole:
        slots = np.minimum(slots, working.row_free_whole[rows] // whole)
    if share:  # slices share a device while enough of it is free (as filters.workers_fit counts them)
        by_device = np.floor(np.clip(working.dev_free.data[rows], 0, None) / share + 1e-9).sum(axis=1)
        slots = np.minimum(slots, by_device.astype(np.int64))
    if cpu > 0:
        slots = np.minimum(slots, np.floor((working.free_cpu[nodes] + 1e-9) / cpu).astype(np.int64))
    if mem > 0:
        slots = np.minimum(slots, np.floor((working.free_mem[nodes] + 1e-9) / mem).astype(np.int64))
    slots = np.maximum(slots, 0)
    if by_model:
        return int(np.bincount(working.row_model_index[rows], weights=slots).max())
    return int(slots.sum())


def grown_pools(snap: Snapshot, rows: np.ndarray | None) -> frozenset[int] | None:
    """The pools with a grown row (None: no reference, every pool may have grown)."""
    return None if rows is None else frozenset(snap.row_pool[rows].tolist())


def worker_demand(spec: TaskSpec, snap: Snapshot, pools: frozenset[int]) -> tuple[int, float, float, float] | None:
    """(whole devices, CPU, memory GB, device share) of one worker on the pools it could use:
    a slice (a device share, or device memory or compute) needs no whole device but some
    device with the smallest share it takes on any of those pools free (filters.slice_fraction;
    as assign, a slice that takes a whole device or more everywhere takes `count` whole
    ones). An upper bound of what it needs, for the parking's "could it fit now?" (before,
    a slice woke at any growth on its pools: on the benchmark's estate, ~120 slices a cycle
    were let go to fail again). None: no pool to take the share from."""
    per_worker = spec.per_worker
    devices = per_worker.devices
    cpu, mem = float(per_worker.cpu), float(per_worker.memory_gb)
    if devices is None:
        return (0, cpu, mem, 0.0)
    if devices.count < 1 or devices.memory_gb or devices.cores_percent:
        if not pools:
            return None
        share = min(slice_fraction(snap.pools[i], spec) for i in pools)
        if share < 1.0:
            return (0, cpu, mem, share)
    return (int(devices.count), cpu, mem, 0.0)


def usable_pools(snap: Snapshot, spec: TaskSpec, compat_check: CompatCheck, allowed_pools: set[str] | None) -> frozenset[int]:
    """The pools `spec` could run on at all, capacity aside (as assign filters them)."""
    demand = spec.per_worker.devices
    device_class = demand.device_class if demand is not None else None
    use_class = not (spec.fallback or spec.any_of or (demand is not None and demand.models))
    found: set[int] = set()
    for group in candidate_groups(snap, spec):
        for index in group.pools:
            pool = snap.pools[index]
            if use_class and not class_matches(pool, device_class):
                continue
            if allowed_pools is not None and pool.name not in allowed_pools and pool.model.name not in allowed_pools:
                continue
            if pool_verdict(pool, spec, compat_check).ok:
                found.add(index)
    return frozenset(found)


def evictable_counts(snap: Snapshot, running: list[RunningTask], borrowing: set[str]) -> dict[int, list[int]]:
    """Per pool index: preemptible running work per priority rank (index 0..3), and the
    borrowers among it (index 4)."""
    counts: dict[int, list[int]] = {}
    pool_by_name = snap.pool_by_name
    for r in running:
        if not r.preemptible or r.being_preempted:
            continue
        allocations = r.allocations
        # Each pool counted once per task; most work has one worker (no set to build).
        pools = (allocations[0].pool,) if len(allocations) == 1 else {a.pool for a in allocations}
        rank, borrows = min(max(r.priority_rank, 0), 3), r.id in borrowing
        for pool in pools:
            index = pool_by_name.get(pool)
            if index is None:
                continue
            row = counts.get(index)
            if row is None:
                row = counts[index] = [0, 0, 0, 0, 0]
            row[rank] += 1
            if borrows:
                row[4] += 1
    return counts


class Evictable:
    """Running work a head could evict per pool, counted on first use (most cycles of a
    quiet estate park nothing and never ask)."""

    def __init__(self, snap: Snapshot, running: list[RunningTask], quota) -> None:
        self.snap, self.running, self.quota = snap, running, quota
        self.counts: dict[int, list[int]] | None = None

    def on(self, pools: frozenset[int], rank: int) -> int:
        """Preemptible running work of a lower priority than `rank`, or borrowing, on `pools`."""
        if self.counts is None:
            quota = self.quota
            borrowing = {r.id for r in self.running if quota.is_borrowing(r.id)} if quota is not None else set()
            self.counts = evictable_counts(self.snap, self.running, borrowing)
        total = 0
        for index in pools:
            row = self.counts.get(index)
            if row is not None:
                total += sum(row[: max(0, min(rank, 4))]) + row[4]
        return total


def open_parking(snapshot: Snapshot, policy, running: list[RunningTask], quota, queued: dict, now: datetime) -> tuple[Parking, Evictable]:
    """The parking of this snapshot, with every head whose wait may have changed let go;
    also the evictable counts per pool (for parking this cycle's waits). `queued`: task id
    → its line entry (.item, and .rank: its priority rank now) for the queued tasks
    (QueueOrder.where); a head not in it is no longer queued."""
    park: Parking = snapshot.parking.setdefault("state", Parking())
    key = repr(policy)
    if not policy.park_waiting or park.policy_key != key:
        park.parked.clear()
        park.policy_key = key
    counts = Evictable(snapshot, running, quota)
    park.grown = None
    park.wake_groups, park.reserves_owed = {}, set()
    park.cycle += 1
    if not park.parked:
        return park, counts
    park.grown = park.grown_rows(snapshot)
    # Growth and more evictable work are asked about at each head's turn
    # (cycle_parked.still_parked): here only what does not depend on what this cycle does.
    # One pass over every parked head (tens of thousands on a busy estate): keep it lean.
    stale: list[tuple] = []  # parked long enough to be refreshed: (parked at, parked cycle, id)
    due = now - timedelta(seconds=MAX_PARKED_S)  # parked at or before this: refreshed (one compare per head)
    due_cycle = park.cycle - MAX_PARKED_CYCLES  # parked before this cycle: refreshed
    groups, reserving, gone = park.wake_groups, {}, []
    for task_id, p in park.parked.items():
        found = queued.get(task_id)
        if found is None or found.item.spec is not p.spec or found.rank != p.rank:
            gone.append(task_id)
            continue
        group = groups.get(p.wake)
        if group is None:
            group = groups[p.wake] = (p, set())
        group[1].add(task_id)
        if p.reserves:
            reserving[p.queue] = reserving.get(p.queue, 0) + 1
        if p.never:
            continue  # nothing in its explanation depends on time: no refresh (a rank change lets it go above)
        if p.parked_cycle < due_cycle or (p.parked_at is not None and p.parked_at <= due):
            stale.append((p.parked_at or now, p.parked_cycle, task_id))
    for task_id in gone:
        del park.parked[task_id]
    # The refresh is rationed, oldest first: heads parked in the same cycle would otherwise
    # all come due in the same later one (a whole queue's worth on a busy estate).
    limit = refresh_limit(policy)
    for _, _, task_id in sorted(stale)[:limit] if limit else stale:
        p = park.parked.pop(task_id)
        groups[p.wake][1].discard(task_id)
        if p.reserves:
            reserving[p.queue] -= 1
    park.reserves_owed = {queue for queue, heads in reserving.items() if heads}
    return park, counts


def refresh_limit(policy) -> int:
    """Parked heads refreshed per cycle at most (0: all that are due): an eighth of the
    cycle's head budget, so refreshing never takes more than a small share of it."""
    return max(1, policy.max_heads_per_cycle // 8) if policy.max_heads_per_cycle else 0


def close_parking(park: Parking, working: Snapshot, decisions: list, candidates: dict, counts: Evictable, deferred: set, now: datetime) -> None:
    """Park this cycle's plain waits; remember the capacity they were decided against.
    `candidates`: task id → (Candidate, the pools it could use, its priority rank now);
    `deferred`: the heads whose preemption planning was deferred."""
    for d in decisions:
        park.parked.pop(d.task_id, None)  # decided again: parked anew below, or not
        entry = candidates.get(d.task_id)
        if entry is None or d.admit or d.victims or d.explanation.reason not in PARKABLE:
            continue
        cand, pools, rank = entry
        never = d.explanation.reason is Reason.NEVER_FITS
        if not pools and not never:
            continue  # no pool to watch: decided every cycle
        reserved = cand.target_kwargs.get("reserved_nodes")
        excluded = frozenset(np.flatnonzero(reserved).tolist()) if reserved is not None else frozenset()
        reserves = d.explanation.reason in _MAY_RESERVE and cand.queue.ordering != "fifo"
        evict = 0 if never else counts.on(pools, rank)
        if evict and d.explanation.reason is Reason.BLOCKED_BY_RESERVATION:
            # Blocked, it plans no preemption ("no preemption helps"); once the free capacity
            # it would take beside the reservation is taken, it is no longer blocked and
            # plans one. Capacity shrinking changes its decision: nothing parking watches.
            continue
        demand = worker_demand(cand.item.spec, working, pools)
        late = d.task_id in deferred
        parked = Parked(cand.item.spec, cand.queue.name, pools, evict, rank, excluded, reserves, never, demand, now, late, park.cycle)
        parked.wake = park.wake_id(parked)
        park.parked[d.task_id] = parked
    if park.parked:  # what the next cycle compares against (nothing to compare: nothing to copy)
        park.remember(working)
    else:
        park.after = None
