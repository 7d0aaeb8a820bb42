"""What one scheduling cycle reads (`CycleInputs`), what it changes as each head is
decided (`CycleState`), and the head under evaluation (`Candidate`) — the data the
phases in cycle.py pass along — plus the small capacity helpers the phases share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from hetpool.core.inventory import DeviceModelSpec, TaskType
from hetpool.core.policy import ClassRule, QueueSpec, SchedulingPolicySpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import Assignment
from hetpool.scheduling.backfill import Reservation
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.filters import CompatCheck
from hetpool.scheduling.forecast import end_after
from hetpool.scheduling.queueing import FairShare, QueueOrder, tenant_weight
from hetpool.scheduling.quota_view import Held, QuotaLedger
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, Snapshot

if TYPE_CHECKING:  # cycle.py defines them and imports this module
    from hetpool.scheduling.cycle import Decision, QueuedTask


@dataclass
class Blame:
    """The task being evaluated, so that an error can be pinned on it (None: on no task)."""

    task_id: str | None = None


@dataclass
class CycleInputs:
    """What one cycle reads and never changes (besides `quota`, the book it charges)."""

    snapshot: Snapshot
    compat_check: CompatCheck  # memoised on the snapshot
    now: datetime
    policy: SchedulingPolicySpec
    models: dict[str, DeviceModelSpec]
    running: list[RunningTask]
    quota: QuotaLedger | None  # already charged with the running work; None: no quotas
    blame: Blame


@dataclass
class CycleState:
    """The working state of one cycle, changed as each head is decided."""

    working: Snapshot  # capacity left after this cycle's admissions
    fair: FairShare
    order: QueueOrder
    tenant_matters: bool  # pools reserved for tenants: the tenant is part of a task's shape
    releasing: list[RunningTask]  # preempted earlier, still giving their devices back
    failed_shapes: dict[str, Decision] = field(default_factory=dict)
    # Per shape and constraints: its placement on the idle estate (and on the recovered one);
    # the snapshot's cross-cycle memo (Snapshot.idle_memo), so it is computed once per shape.
    idle_results: dict = field(default_factory=dict)
    ceilings: dict[tuple, object] = field(default_factory=dict)  # per shape and tenant: the quota it could never be admitted under
    reservations: dict[str, Reservation] = field(default_factory=dict)  # per queue: its blocked head's reservation
    reserved_masks: dict[str, np.ndarray] = field(default_factory=dict)  # per reserving task: its nodes
    evicting: set[str] = field(default_factory=set)
    planned: dict = field(default_factory=dict)  # per head that named victims this cycle: where it lands (claims.py)
    claimants: dict = field(default_factory=dict)  # preemptor id → the placement claimed for it (claims.Claims.kept)
    claims: object = None  # the cycle's claims.Claims
    claim_checks: int = 0  # waits asked whether the claims alone keep them out (cycle._held_for_preemptors)
    no_fit_unclaimed: set = field(default_factory=set)  # shapes that fit nowhere even with the claims given back
    # Preemptible running work per priority rank, less what this cycle evicts (see preemptible_below).
    preemptible_ranks: dict[int, int] = field(default_factory=dict)
    reclaimable: dict = field(default_factory=dict)  # per (tenant, env, type): ids; None: the borrowers by reclaim group (cycle_preempt)
    preemption_tries: int = 0  # heads that planned a preemption this cycle (policy.max_preemption_tries)
    overran: list | None = None  # running work past its own estimate, once per cycle (cycle_preempt.plan_overrun_eviction)
    overran_by_start: tuple[list, list] | None = None  # the same by start: (start times, work), sorted (bisected per head)
    running_arrays: object = None  # the running work as victim_arrays.RunningArrays, once per cycle (cycle_preempt._victims)
    freeable: dict = field(default_factory=dict)  # per priority rank: the opening estate less all preemptible work below it
    hopeless: dict = field(default_factory=dict)  # per shape and rank: no plan can help (cycle_preempt._hopeless)
    preemption_deferred: int = 0  # heads that would have, past that bound
    capacity_digests: dict = field(default_factory=dict)  # per pool set and capacity version: a digest of it (plan_memo._capacity)
    policy_key: str | None = None  # repr of the policy, once per cycle (plan_memo.fingerprint)
    signatures: tuple | None = None  # per running task: its signature, and whether computed (plan_memo._signatures)
    id_masks: dict = field(default_factory=dict)  # (id of a set of task ids, its size) → (the set, a mask over the running work) (plan_memo._mask)
    evictable_digests: dict = field(default_factory=dict)  # per shape, rank, reclaimable set and evictions: a digest (plan_memo._evictable)
    carried: int = 0  # heads passed over by the rotating scan (cycle_heads.heads)
    # Parking (parking.py): the heads parked as the cycle opened, this cycle's plain waits
    # that may be parked (task id → candidate, its pools, its rank), those whose preemption
    # was deferred, and the evictable running work per pool.
    parked: dict = field(default_factory=dict)
    grown: object = None  # the rows where capacity grew since the previous cycle (parking.Parking.grown)
    grown_pools: frozenset[int] | None = None  # the pools of those rows (None: every pool may have grown)
    grown_free_of: dict[tuple, np.ndarray] = field(default_factory=dict)  # those rows off the nodes of some reservations (cycle_parked._grown_rows)
    parked_over: int = 0  # parked heads passed over this cycle
    reserves_owed: set[str] = field(default_factory=set)  # queues with a parked head that would take their reservation (Parked.reserves)
    settled: bool = False  # parked heads that can no longer be let go were passed over at once (cycle_parked.settle)
    wake_groups: dict = field(default_factory=dict)  # the parked heads by what settle asks of them (parking.Parking.wake_groups)
    staying_groups: set[tuple] = field(default_factory=set)  # Parked.key of heads that stay parked this cycle (cycle_parked.still_parked)
    failed_groups: set[tuple] = field(default_factory=set)  # (Parked.key, reservations held) whose shape failed (cycle_parked.still_parked)
    no_fit_unreserved: set[str] = field(default_factory=set)  # shapes that fit nowhere free, reservations aside (cycle._blocking_reservation)
    blocking_of: dict[tuple, tuple[str, ...]] = field(default_factory=dict)  # see cycle_parked._blocking_ids
    excluded_now: dict[tuple[str, ...], frozenset[int]] = field(default_factory=dict)  # see cycle_parked._kept_off_now
    rows_of_nodes: dict[frozenset, np.ndarray] = field(default_factory=dict)  # see cycle_parked._fits_on_nodes
    no_fit: set[tuple] = field(default_factory=set)  # see cycle_parked._fits
    rows_on_pools: dict[tuple, np.ndarray] = field(default_factory=dict)  # see cycle_parked._fits
    parkable: dict = field(default_factory=dict)
    deferred: set[str] = field(default_factory=set)  # heads whose preemption planning was deferred (parked as such)
    park_counts: object = None  # parking.Evictable
    decisions: list[Decision] = field(default_factory=list)
    waiting: list[QueuedTask] = field(default_factory=list)
    # Work admitted earlier in this cycle, as running work with its expected end, so that
    # reservation start times and wait-for-preferred count on it ending (the latter also
    # counts the work already waiting for the same devices: see backfill.prefer_waiting).
    admitted_now: list[RunningTask] = field(default_factory=list)
    running_by_end: list[RunningTask] | None = None  # the running work with an end, by end (cycle.reserve_or_block)
    slowest_runtime: dict[tuple, float | None] = field(default_factory=dict)  # per shape and estimate (cycle_parked.may_use)
    may_use: dict[tuple, bool] = field(default_factory=dict)  # per shape, estimate and reservation (cycle_parked.may_use)
    ending_memo: dict = field(default_factory=dict)  # per preferred pools: the work on them by end (backfill.prefer_waiting)
    wait_fits: dict = field(default_factory=dict)  # when the preferred devices hold a shape (backfill.prefer_waiting)
    banked: dict[str, float] = field(default_factory=dict)  # device-seconds waiting for each preferred model (see backfill.prefer_waiting)
    by_pool: dict[str, list[RunningTask]] = field(default_factory=dict)  # running work (and this cycle's admissions) per pool
    borrowers: list[tuple[QueueSpec, QueuedTask]] = field(default_factory=list)
    deferring_done: bool = False  # every non-borrowing head has been decided

    def idle(self, snapshot: Snapshot) -> Snapshot:
        """The estate with nothing running (Snapshot.emptied), built once per health."""
        if "idle" not in self.idle_results:
            self.idle_results["idle"] = snapshot.emptied()
        return self.idle_results["idle"]

    def recovered(self, snapshot: Snapshot) -> Snapshot:
        """The idle estate with what is unhealthy now back (Snapshot.recovered), built once."""
        if "recovered" not in self.idle_results:
            self.idle_results["recovered"] = snapshot.recovered()
        return self.idle_results["recovered"]

    def preemptible_below(self, rank: int) -> bool:
        """Is some preemptible running task of a lower priority not being evicted yet?"""
        return any(count > 0 and r < rank for r, count in self.preemptible_ranks.items())

    def evict(self, victims: list[RunningTask]) -> None:
        for victim in victims:
            if victim.id not in self.evicting:
                self.evicting.add(victim.id)
                if victim.preemptible:
                    self.preemptible_ranks[victim.priority_rank] -= 1

    def wait(self, item: QueuedTask, decision: Decision) -> None:
        self.decisions.append(decision)
        self.waiting.append(item)


@dataclass
class Candidate:
    """One head under evaluation, with the constraints it is assigned under."""

    queue: QueueSpec
    item: QueuedTask
    rule: ClassRule  # the policy for the task's device class
    kwargs: dict  # assign() constraints: the queue's pools and the class's placement
    blocking: list[Reservation]  # reservations the task may not use: it must not delay them
    shape: str  # see shape_key, plus the reservations it is blocked by
    target_kwargs: dict = field(default_factory=dict)  # kwargs plus the nodes `blocking` holds (set by constrain)
    base_shape: str = ""  # shape_key alone

    @property
    def spec(self) -> TaskSpec:
        return self.item.spec


def shape_key(spec: TaskSpec, queue: QueueSpec, tenant_matters: bool) -> str:
    """What decides where a task can go. Capacity only shrinks within a cycle, so once a
    shape fails, every later task of the same shape fails too — and is skipped cheaply.
    The tenant counts only where pools are reserved for tenants."""
    return f"{queue.name}|{spec.tenant if tenant_matters else ''}|{spec.placement_shape}"


def held_by(result: Assignment) -> list[Held]:
    return [Held(p.pool, p.model, len(p.device_indices) * p.device_fraction, p.cpu, p.memory_gb) for p in result.placements]


def fair_share(snapshot: Snapshot, running: list[RunningTask], weights: dict[str, float]) -> FairShare:
    perf = snapshot.row_perf(TaskType.GENERAL)
    accel_rows = ~snapshot.row_is_cpu
    totals = (float((snapshot.device_totals() * perf)[accel_rows].sum()), float(snapshot.total_cpu.sum()), float(snapshot.total_mem.sum()))
    fair = FairShare(totals, tenant_weight(weights))
    # Summed here, in the running work's order, then set once per tenant: the same sums as
    # FairShare.add per allocation, without its cache bookkeeping per running task.
    factors, used = snapshot.unit_factors, {}
    for task in running:
        sums = used.get(task.tenant)
        if sums is None:
            sums = used[task.tenant] = [0.0, 0.0, 0.0]
        for a in task.allocations:
            sums[0] += len(a.device_indices) * a.device_fraction * factors.get(a.pool, 0.0)
            sums[1] += a.cpu
            sums[2] += a.memory_gb
    for tenant, sums in used.items():
        fair.set_used(tenant, sums)
    return fair


def units(snapshot: Snapshot, pool: str, devices: float) -> float:
    """Devices in reference-device units (an H800 counts for more than a T4)."""
    return devices * snapshot.unit_factors.get(pool, 0.0)


def as_running(task_id: str, spec: TaskSpec, result: Assignment, now: datetime, models) -> RunningTask:
    seconds = [runtime_on(spec, models.get(p.model)) for p in result.placements]
    end = end_after(now, max(seconds)) if seconds and None not in seconds else None
    allocations = tuple(Allocation(p.node, p.pool, p.device_indices, p.device_fraction, p.cpu, p.memory_gb) for p in result.placements)
    return RunningTask(task_id, spec.tenant, spec.priority.rank, spec.task_type, allocations, now, end, False)


def take(snap: Snapshot, result: Assignment) -> None:
    for p in result.placements:
        snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)


def release(snap: Snapshot, result: Assignment) -> None:
    for p in result.placements:
        snap.release(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)


def index_by_pool(by_pool: dict[str, list[RunningTask]], task: RunningTask) -> None:
    allocations = task.allocations
    if len(allocations) == 1:  # most work: one worker, no set to build
        pool = allocations[0].pool
        listed = by_pool.get(pool)
        if listed is None:
            by_pool[pool] = [task]
        else:
            listed.append(task)
        return
    for pool in {a.pool for a in allocations}:
        by_pool.setdefault(pool, []).append(task)


def slowest_memo(snapshot: Snapshot, models: dict) -> dict:
    """The slowest runtime per shape and estimate (backfill.slowest_runtime_s, asked by the
    backfill test of thousands of parked heads a cycle), kept across cycles while the device
    models read the same: it depends on the task and, of each model, its name, class and
    relative performance (estimate.runtime_on) alone — the key, since the server hands each
    cycle new model objects (measured performance written over the catalog's)."""
    key = tuple((name, m.device_class, tuple(sorted(m.relative_performance.items()))) for name, m in sorted(models.items()))
    memo = snapshot.runtime_cache.get(key)
    if memo is None:
        snapshot.runtime_cache.clear()  # models changed (measured performance): start over
        memo = snapshot.runtime_cache[key] = {}
    elif len(memo) > 100_000:  # a long-lived snapshot meets ever new shapes: keep it bounded
        memo.clear()
    return memo


def idle_key(cand: Candidate, estate: str = "idle") -> tuple:
    """What an idle-estate result depends on besides the inventory and its health: the
    shape and the constraints it is placed under (a queue's pools can be edited)."""
    pools = cand.kwargs["allowed_pools"]
    return (estate, cand.base_shape, tuple(sorted(pools)) if pools else None, repr(cand.kwargs["placement"]))
