"""One scheduling cycle: a pure function from a snapshot and a queue to decisions.

Recipe (after Kueue's `schedule()`): route tasks into queues → hand out heads in order
(priority with aging, tenant fair share, age) → for each, assign on the working
snapshot: admit and subtract its capacity; or wait for preferred devices when that ends
earlier than a substitute; or preempt lower-priority work; or wait, holding a
reservation so that backfill never delays it. Waiting tasks then get a queue position
and an estimated start. Only the server's workers turn decisions into writes and calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from hetpool.core.inventory import DeviceModelSpec, TaskType
from hetpool.core.policy import ClassRule, QueueSpec, SchedulingPolicySpec
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.scheduling.assign import Assignment, assign
from hetpool.scheduling.backfill import Reservation, may_use_reserved, prefer_waiting, release_running, reserve
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.explain import explanation
from hetpool.scheduling.filters import CompatCheck, memoized
from hetpool.scheduling.forecast import attach_estimates, end_after
from hetpool.scheduling.preempt import find_victims
from hetpool.scheduling.queueing import FairShare, QueueOrder, effective_rank, route, tenant_weight
from hetpool.scheduling.quota_view import Held
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, Snapshot

DEFAULT_POLICY = SchedulingPolicySpec()


@dataclass(frozen=True)
class QueuedTask:
    id: str
    spec: TaskSpec
    queued_at: datetime
    quota_exempt: bool = False  # admitted over quota by approval (counted as borrowing)


@dataclass
class Decision:
    task_id: str
    admit: bool
    assignment: Assignment
    explanation: dict = field(default_factory=dict)
    queue: str = "default"
    victims: list[str] = field(default_factory=list)  # running tasks to evict for this task
    preemption_reason: str = ""
    spec: TaskSpec | None = None
    set_aside: str = ""  # evaluating the task raised this error: the cycle went on without it


@dataclass
class CycleResult:
    decisions: list[Decision]
    duration_s: float
    reservations: list[Reservation] = field(default_factory=list)

    @property
    def admitted(self) -> list[Decision]:
        return [d for d in self.decisions if d.admit]


def shape_key(spec: TaskSpec, queue: QueueSpec, tenant_matters: bool) -> str:
    """What decides where a task can go. Capacity only shrinks within a cycle, so once a
    shape fails, every later task of the same shape fails too — and is skipped cheaply.
    The tenant counts only where pools are reserved for tenants."""
    return f"{queue.name}|{spec.tenant if tenant_matters else ''}|{spec.placement_shape}"


def _fair_share(snapshot: Snapshot, running: list[RunningTask], weights: dict[str, float]) -> FairShare:
    perf = snapshot.row_perf(TaskType.GENERAL)
    accel_rows = ~snapshot.row_is_cpu
    totals = (float((snapshot.device_totals() * perf)[accel_rows].sum()), float(snapshot.total_cpu.sum()), float(snapshot.total_mem.sum()))
    fair = FairShare(totals, tenant_weight(weights))
    for task in running:
        for a in task.allocations:
            fair.add(task.tenant, _units(snapshot, a.pool, len(a.device_indices) * a.device_fraction), a.cpu, a.memory_gb)
    return fair


def _units(snapshot: Snapshot, pool: str, devices: float) -> float:
    """Devices in reference-device units (an H800 counts for more than a T4)."""
    return devices * snapshot.unit_factors.get(pool, 0.0)


@dataclass
class _Blame:
    """The task being evaluated, so that an error can be pinned on it (None: on no task)."""

    task_id: str | None = None


REASON_SET_ASIDE = "set aside"
REASON_QUOTA = "quota exceeded"
# At most this many re-runs per cycle: an error that every task hits (a fault of shared
# data, not of one task) would otherwise cost one full cycle per queued task. Past it, the
# cycle returns only the tasks set aside so far; the next pass goes on from there.
MAX_SET_ASIDE = 16


def run_cycle(snapshot: Snapshot, queue: list[QueuedTask], compat_check: CompatCheck, now: datetime, **options) -> CycleResult:
    """One scheduling cycle; `options` as for `_run_cycle`.

    One task must not stop scheduling for everyone: when evaluating a task raises, the
    cycle is run again from the same snapshot without it (the quota book restored first),
    and the task gets a decision with `set_aside` set to the error, which the worker turns
    into a failure with that reason. An error that no single task can be blamed for
    propagates. Nothing is paid when no task raises."""
    started = time.perf_counter()
    quota = options.get("quota")
    saved = (dict(quota.used), dict(quota.charged)) if quota else None
    aside: dict[str, str] = {}
    result = CycleResult(decisions=[], duration_s=0.0)
    while len(aside) < MAX_SET_ASIDE:
        blame = _Blame()
        try:
            result = _run_cycle(snapshot, [q for q in queue if q.id not in aside], compat_check, now, blame=blame, **options)
            break
        except Exception as exc:
            if blame.task_id is None or blame.task_id in aside:
                raise
            aside[blame.task_id] = f"{type(exc).__name__}: {exc}"[:500]
            if saved is not None:
                quota.used, quota.charged = dict(saved[0]), dict(saved[1])
    for task_id, error in aside.items():
        info = {
            "summary": f"set aside: evaluating this task raised {error}; the others were scheduled without it",
            "fits_when_idle": False,
            "reasons": {REASON_SET_ASIDE: 1},
            "attempts": [],
        }
        result.decisions.append(Decision(task_id, False, Assignment(False, [], False, []), info, set_aside=error))
    result.duration_s = time.perf_counter() - started
    return result


@dataclass
class CycleInputs:
    """What one cycle reads and never changes (besides `quota`, the book it charges)."""

    snapshot: Snapshot
    compat_check: CompatCheck  # memoised on the snapshot
    now: datetime
    policy: SchedulingPolicySpec
    models: dict[str, DeviceModelSpec]
    running: list[RunningTask]
    quota: object | None  # a governance.quota.QuotaBook; None: no quotas
    blame: _Blame


@dataclass
class CycleState:
    """The working state of one cycle, changed as each head is decided."""

    working: Snapshot  # capacity left after this cycle's admissions
    fair: FairShare
    order: QueueOrder
    tenant_matters: bool  # pools reserved for tenants: the tenant is part of a task's shape
    releasing: list[RunningTask]  # preempted earlier, still giving their devices back
    lowest_preemptible: int  # cheap guard before scanning running work for victims on every waiting task
    failed_shapes: dict[str, Decision] = field(default_factory=dict)
    idle_fits: dict[str, bool] = field(default_factory=dict)  # per shape: fits the idle estate
    reservations: dict[str, Reservation] = field(default_factory=dict)  # per queue: its blocked head's reservation
    reserved_masks: dict[str, np.ndarray] = field(default_factory=dict)  # per reserving task: its nodes
    evicting: set[str] = field(default_factory=set)
    decisions: list[Decision] = field(default_factory=list)
    waiting: list[QueuedTask] = field(default_factory=list)
    # Work admitted earlier in this cycle, as running work with its expected end, so that
    # reservation start times and wait-for-preferred count on it ending (the latter also
    # counts the work already waiting for the same devices: see backfill.prefer_waiting).
    admitted_now: list[RunningTask] = field(default_factory=list)
    may_use: dict[tuple, bool] = field(default_factory=dict)
    banked: dict[str, float] = field(default_factory=dict)  # device-seconds waiting for each preferred model (see backfill.prefer_waiting)
    by_pool: dict[str, list[RunningTask]] = field(default_factory=dict)  # running work (and this cycle's admissions) per pool
    borrowers: list[tuple[QueueSpec, QueuedTask]] = field(default_factory=list)
    deferring_done: bool = False  # every non-borrowing head has been decided
    idle_snapshot: Snapshot | None = None

    def idle(self, snapshot: Snapshot) -> Snapshot:
        if self.idle_snapshot is None:
            self.idle_snapshot = snapshot.emptied()
        return self.idle_snapshot

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
    target_kwargs: dict = field(default_factory=dict)  # kwargs plus the nodes `blocking` holds (set by _constrain)

    @property
    def spec(self) -> TaskSpec:
        return self.item.spec


def _run_cycle(
    snapshot: Snapshot,
    queue: list[QueuedTask],
    compat_check: CompatCheck,
    now: datetime,
    *,
    running: list[RunningTask] = (),
    queues: list[QueueSpec] = (),
    policy: SchedulingPolicySpec | None = None,
    tenant_weights: dict[str, float] | None = None,
    models: dict[str, DeviceModelSpec] | None = None,
    estimate: bool = True,
    quota=None,
    blame: _Blame | None = None,
) -> CycleResult:
    """One scheduling cycle. `quota` (a governance.quota.QuotaBook, already charged with the
    running work) is asked before each admission; None: no quotas. `blame` is kept naming
    the task under evaluation (see run_cycle).

    Phases: open (queue order over the snapshot) → per head: nominate (constraints, known
    outcomes) → assign (or wait for preferred devices) → quota gate → admit, or else
    preempt / reserve → the rest behind blocked FIFO heads → estimates for the waiting."""
    started = time.perf_counter()
    blame = blame or _Blame()
    policy = policy or DEFAULT_POLICY
    # Kept on the snapshot (shared by its copies): the server and the simulator keep one
    # snapshot across cycles, so verdicts are computed once per pool and request.
    compat_check = memoized(compat_check, snapshot.compat_cache)
    models = models or {p.model.name: p.model for p in snapshot.pools}
    cx = CycleInputs(snapshot, compat_check, now, policy, models, list(running), quota, blame)
    st = _open_cycle(cx, queue, list(queues), tenant_weights or {})
    for q, item in _heads(st, blame):
        blame.task_id = item.id
        _decide(cx, st, q, item)
    blame.task_id = None
    _wait_behind_fifo_heads(st)
    if estimate and st.waiting and policy.estimate_horizon:
        attach_estimates(snapshot, st.working, st.waiting, cx.running, st.decisions, compat_check, now, models, policy.estimate_horizon, blame)
    return CycleResult(decisions=st.decisions, duration_s=time.perf_counter() - started, reservations=list(st.reservations.values()))


def _open_cycle(cx: CycleInputs, queue: list[QueuedTask], queues: list[QueueSpec], tenant_weights: dict[str, float]) -> CycleState:
    """Route every task to its queue and order the heads (priority with aging, fair share, age)."""
    snapshot, running, blame, policy, now = cx.snapshot, cx.running, cx.blame, cx.policy, cx.now
    working = snapshot.copy()
    fair = _fair_share(snapshot, running, tenant_weights)
    routed = {}
    for item in queue:
        blame.task_id = item.id
        routed[item.id] = route(item.spec, list(queues))
    blame.task_id = None
    order = QueueOrder(
        queue,
        queue_of=lambda item: routed[item.id],
        rank_of=lambda item: effective_rank(item.spec.priority.rank, item.queued_at, now, policy.aging_per_hour),
        tenant_of=lambda item: item.spec.tenant,
        fair=fair,
    )
    st = CycleState(
        working=working,
        fair=fair,
        order=order,
        tenant_matters=any(p.spec.reserved_for is not None for p in snapshot.pools),
        releasing=[r for r in running if r.being_preempted],
        lowest_preemptible=min((r.priority_rank for r in running if r.preemptible), default=Priority.CRITICAL.rank + 1),
    )
    for r in running:
        _index(st.by_pool, r)
    return st


def _heads(st: CycleState, blame: _Blame):
    """Heads in queue order, then the borrowers deferred behind them."""
    while True:
        blame.task_id = None  # choosing the next head is no one task's evaluation
        if (popped := st.order.pop()) is None:
            break
        yield popped
    st.deferring_done = True
    yield from st.borrowers


def _decide(cx: CycleInputs, st: CycleState, q: QueueSpec, item: QueuedTask) -> None:
    """Decide one head: admit it, defer it (a borrower), or leave it waiting with its reasons."""
    cand = _nominate(cx, st, q, item)
    known = _known_outcome(st, cand)
    if known is not None:
        st.wait(item, known)
        return
    _constrain(st, cand)
    result = _assign_or_wait_for_preferred(cx, st, cand)
    if result is None:
        return
    if result.feasible:
        if _passes_quota(cx, st, cand, result):
            _admit(cx, st, cand, result)
        return
    _leave_waiting(cx, st, cand, result)


def _nominate(cx: CycleInputs, st: CycleState, q: QueueSpec, item: QueuedTask) -> Candidate:
    """The constraints a head is assigned under, and its shape for reusing verdicts."""
    spec = item.spec
    demand = spec.per_worker.devices
    rule = cx.policy.rule(demand.device_class if demand else None)
    kwargs = {"allowed_pools": set(q.pools) or None, "placement": rule.placement}
    # Reservations of every queue's blocked head hold against all tasks: backfill must
    # not delay a reserved start, whichever queue the backfilling task comes from.
    blocking = [r for r in st.reservations.values() if not _may_use(cx, st, spec, r)]
    # The same shape under the same reservation fails the same way: reuse the verdict.
    shape = shape_key(spec, q, st.tenant_matters) + "|" + ",".join(r.task_id for r in blocking)
    return Candidate(q, item, rule, kwargs, blocking, shape)


def _constrain(st: CycleState, cand: Candidate) -> None:
    """Keep the task off the nodes that reservations it must not delay hold."""
    cand.target_kwargs = cand.kwargs
    if cand.blocking:
        masks = [st.reserved_masks[r.task_id] for r in cand.blocking]
        cand.target_kwargs = {**cand.kwargs, "reserved_nodes": np.logical_or.reduce(masks)}


def _may_use(cx: CycleInputs, st: CycleState, spec: TaskSpec, reservation: Reservation) -> bool:
    # Memoised: the answer depends only on the task's shape and runtime estimate.
    key = (spec.placement_shape, spec.runtime_estimate, reservation.task_id)
    if key not in st.may_use:
        st.may_use[key] = may_use_reserved(spec, reservation, cx.now, cx.models)
    return st.may_use[key]


def _known_outcome(st: CycleState, cand: Candidate) -> Decision | None:
    """A wait decided without assigning: the shape already failed, or backfill is off."""
    item, q = cand.item, cand.queue
    cached = st.failed_shapes.get(cand.shape)
    if cached is not None:
        return Decision(item.id, False, cached.assignment, dict(cached.explanation), q.name)
    demand = cand.spec.per_worker.devices
    device_class = demand.device_class.value if demand else None
    held_for_class = [r for r in st.reservations.values() if r.device_class == device_class]
    if held_for_class and not cand.rule.backfill:
        # Backfill is off for this device class: nothing jumps a blocked head of its class.
        info = {
            "summary": f"waiting behind {held_for_class[0].task_id}: backfill is off for {device_class or 'cpu'} pools",
            "fits_when_idle": True,
            "reasons": {},
            "attempts": [],
        }
        return Decision(item.id, False, Assignment(False, [], False, []), info, q.name)
    return None


def _assign_or_wait_for_preferred(cx: CycleInputs, st: CycleState, cand: Candidate) -> Assignment | None:
    """Assign on the working snapshot (a placement stays taken there); None: the task
    chose to wait for its preferred devices instead (recorded)."""
    spec, working = cand.spec, st.working
    result = assign(working, spec, cx.compat_check, commit=True, **cand.target_kwargs)
    if result.feasible and result.fallback_used and cx.policy.wait_for_preferred and spec.ordered and spec.runtime_estimate_s:
        _release(working, spec, result)
        waited = prefer_waiting(working, spec, result, st.by_pool, cx.compat_check, cx.now, cx.models, cand.target_kwargs, st.banked)
        if waited is None:
            _take(working, spec, result)
        else:
            st.wait(cand.item, Decision(cand.item.id, False, result, waited.to_dict(), cand.queue.name))
            return None
    return result


def _passes_quota(cx: CycleInputs, st: CycleState, cand: Candidate, result: Assignment) -> bool:
    """Ask the quota book; when it says no (or "borrow, later"), give the placement back."""
    item, spec, quota = cand.item, cand.spec, cx.quota
    if not quota or item.quota_exempt:
        return True
    verdict = quota.check(spec, held_by(result))
    if not verdict.ok:
        _release(st.working, spec, result)
        info = {"summary": f"over quota: {verdict.reason}", "fits_when_idle": True, "reasons": {REASON_QUOTA: 1}, "attempts": []}
        st.wait(item, Decision(item.id, False, result, info, cand.queue.name))
        return False
    if verdict.borrowing and not st.deferring_done:
        # Work within its quota goes first (as in Kueue): a borrower is placed only
        # after every non-borrowing task of this cycle, so that a lender reclaiming
        # its quota is not overtaken by the very work it preempted.
        _release(st.working, spec, result)
        st.borrowers.append((cand.queue, item))
        return False
    return True


def _admit(cx: CycleInputs, st: CycleState, cand: Candidate, result: Assignment) -> None:
    item, spec = cand.item, cand.spec
    if cx.quota:
        cx.quota.charge(item.id, spec, held_by(result), exempt=item.quota_exempt)
    st.admitted_now.append(_as_running(item.id, spec, result, cx.now, cx.models))
    _index(st.by_pool, st.admitted_now[-1])
    for p in result.placements:
        st.fair.add(spec.tenant, _units(st.working, p.pool, len(p.device_indices) * p.device_fraction), p.cpu, p.memory_gb)
    st.decisions.append(Decision(item.id, True, result, explanation(result, True), cand.queue.name, spec=spec))


def _leave_waiting(cx: CycleInputs, st: CycleState, cand: Candidate, result: Assignment) -> None:
    """A head that does not fit now: wait for devices already being freed, preempt, or
    wait holding a reservation (or blocking its FIFO queue)."""
    item, spec, shape = cand.item, cand.spec, cand.shape
    if shape not in st.idle_fits:
        st.idle_fits[shape] = assign(st.idle(cx.snapshot), spec, cx.compat_check, **cand.kwargs).feasible
    fits_idle = st.idle_fits[shape]
    info = explanation(result, fits_idle, nodes=len(cx.snapshot.node_names))
    decision = Decision(item.id, False, result, info, cand.queue.name)
    if fits_idle and st.releasing and _fits_after_release(st.working, spec, st.releasing, cx.compat_check, cand.target_kwargs):
        # Devices are already being freed by earlier preemptions: wait for them rather
        # than evicting more work.
        info["summary"] = f"waiting for {len(st.releasing)} preempted task(s) to release their devices"
        st.wait(item, decision)
        return
    if not _preempt_for(cx, st, cand, decision, fits_idle):
        _reserve_or_block(cx, st, cand, decision, fits_idle)
    st.wait(item, decision)


def _preempt_for(cx: CycleInputs, st: CycleState, cand: Candidate, decision: Decision, fits_idle: bool) -> bool:
    """Pick victims for a head that fits the idle estate; True: it now waits for them."""
    item, spec, quota, info = cand.item, cand.spec, cx.quota, decision.explanation
    rank = spec.priority.rank
    # A lender within its nominal quota takes back what its cohort's borrowers hold,
    # whatever their priority (reclaim within cohort).
    reclaim = (lambda r, spec=spec: quota.reclaimable_by(spec, r.id)) if quota and not item.quota_exempt else None
    reclaimable = reclaim is not None and any(r.preemptible and r.id not in st.evicting and reclaim(r) for r in cx.running)
    if not (
        fits_idle
        and cand.rule.preemption
        and (reclaimable or rank > st.lowest_preemptible)
        and (reclaimable or any(r.priority_rank < rank and r.preemptible and r.id not in st.evicting for r in cx.running))
    ):
        return False
    reclaim = reclaim if reclaimable else None
    plan = _victims(cx, st, cand, reclaim, only_own_or_borrowing=False)
    quota_block = _quota_blocks_plan(quota, spec, plan) if plan is not None and quota and plan.victims else ""
    if quota_block:
        # Try again without other tenants' guaranteed work (e.g. evict this tenant's own
        # lower-priority task instead).
        retry = _victims(cx, st, cand, reclaim, only_own_or_borrowing=True)
        if retry is not None and retry.victims and not _quota_blocks_plan(quota, spec, retry):
            plan, quota_block = retry, ""
    if quota_block:
        plan = None  # evicting would not make it admissible, or would take others' guaranteed quota
        info["summary"] = f"over quota: {quota_block}"
        info["reasons"] = {**info.get("reasons", {}), REASON_QUOTA: 1}
    if plan is None:
        return False
    st.evicting.update(v.id for v in plan.victims)
    decision.victims = [v.id for v in plan.victims]
    decision.preemption_reason = plan.reason
    what = "borrowing task(s) to reclaim its quota" if plan.reason.startswith("quota reclaimed") else "lower-priority task(s)"
    info["summary"] = f"preempting {len(plan.victims)} {what}; starts when they have released their devices"
    info["preempting"] = decision.victims
    return True


def _victims(cx: CycleInputs, st: CycleState, cand: Candidate, reclaim, *, only_own_or_borrowing: bool):
    """find_victims among the running work not already being evicted (with
    `only_own_or_borrowing`: only the task's own tenant's work and borrowers)."""
    spec, quota, evicting = cand.spec, cx.quota, st.evicting

    def allowed(r: RunningTask) -> bool:
        if r.id in evicting or not _class_allows_preemption(cx.snapshot, cx.policy, r):
            return False
        return not only_own_or_borrowing or r.tenant == spec.tenant or quota.is_borrowing(r.id)

    return find_victims(
        st.working,
        spec,
        spec.priority.rank,
        [r for r in cx.running if r.id not in evicting],
        cx.compat_check,
        allowed=allowed,
        preemptor_id=cand.item.id,
        reclaimable=reclaim,
        **cand.kwargs,
    )


def _reserve_or_block(cx: CycleInputs, st: CycleState, cand: Candidate, decision: Decision, fits_idle: bool) -> None:
    """A head that could run on the idle estate blocks its FIFO queue or holds a
    reservation (one per queue); one that could not remembers its shape as failed."""
    q, item, spec, snapshot = cand.queue, cand.item, cand.spec, cx.snapshot
    if fits_idle and q.ordering == "fifo":
        st.order.block(q.name)
    elif fits_idle and q.name not in st.reservations:
        held = reserve(item.id, st.working, st.idle(snapshot), spec, cx.running + st.admitted_now, cx.compat_check, cx.now, **cand.kwargs)
        if held is not None:
            st.reservations[q.name] = held
            mask = np.zeros(len(snapshot.node_names), dtype=bool)
            mask[[snapshot.node_by_name[n] for n in held.nodes]] = True
            st.reserved_masks[held.task_id] = mask
            decision.explanation["reservation"] = {"nodes": sorted(held.nodes), "start_at": held.start_at.isoformat() if held.start_at else None}
    else:
        st.failed_shapes[cand.shape] = decision


def _wait_behind_fifo_heads(st: CycleState) -> None:
    for q, item in st.order.remaining():
        info = {"summary": f"waiting behind the head of fifo queue {q.name}", "fits_when_idle": True, "reasons": {}, "attempts": []}
        st.wait(item, Decision(item.id, False, Assignment(False, [], False, []), info, q.name))


def held_by(result: Assignment) -> list[Held]:
    return [Held(p.pool, p.model, len(p.device_indices) * p.device_fraction, p.cpu, p.memory_gb) for p in result.placements]


def _quota_blocks_plan(quota, spec: TaskSpec, plan) -> str:
    """Why a preemption plan must not go ahead on quota grounds ("" if it may): the
    preemptor would still be over quota once its victims are gone, or it would only fit by
    borrowing and a victim of another tenant is within its own quota (borrowing never
    evicts guaranteed work; only lenders reclaim from borrowers)."""
    released = [v.id for v in plan.victims]
    saved = {vid: quota.charged.get(vid) for vid in released}
    guaranteed = [v.id for v in plan.victims if saved[v.id] is not None and not saved[v.id].borrowing and saved[v.id].tenant != spec.tenant]
    for vid in released:
        quota.release(vid)
    try:
        verdict = quota.check(spec, held_by(plan.assignment))
    finally:
        for vid, record in saved.items():
            if record is not None:
                quota.charged[vid] = record
                for key, amount in record.amounts.items():
                    quota.used[key] = quota.used.get(key, 0.0) + amount
    if not verdict.ok:
        return verdict.reason
    if verdict.borrowing and guaranteed:
        # A count, not the ids: they are other tenants' tasks, and this reason is shown to the waiting task's readers.
        return f"it would have to borrow, and {len(guaranteed)} task(s) of other tenants run within their own quota"
    return ""


def _as_running(task_id: str, spec: TaskSpec, result: Assignment, now: datetime, models) -> RunningTask:
    seconds = [runtime_on(spec, models.get(p.model)) for p in result.placements]
    end = end_after(now, max(seconds)) if seconds and None not in seconds else None
    allocations = tuple(Allocation(p.node, p.pool, p.device_indices, p.device_fraction, p.cpu, p.memory_gb) for p in result.placements)
    return RunningTask(task_id, spec.tenant, spec.priority.rank, spec.task_type, allocations, now, end, False)


def _take(snap: Snapshot, spec: TaskSpec, result: Assignment) -> None:
    for p in result.placements:
        snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)


def _release(snap: Snapshot, spec: TaskSpec, result: Assignment) -> None:
    for p in result.placements:
        snap.release(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)


def _fits_after_release(working, spec, releasing, compat_check, kwargs) -> bool:

    scratch = working.copy()
    for r in releasing:
        release_running(scratch, r)
    return assign(scratch, spec, compat_check, **kwargs).feasible


def _class_allows_preemption(snapshot: Snapshot, policy: SchedulingPolicySpec, victim: RunningTask) -> bool:
    """A victim may be evicted only where its own devices' class allows preemption."""
    for a in victim.allocations:
        index = snapshot.pool_by_name.get(a.pool)
        if index is not None and not policy.rule(snapshot.pools[index].model.device_class).preemption:
            return False
    return True


def _index(by_pool: dict[str, list[RunningTask]], task: RunningTask) -> None:
    for pool in {a.pool for a in task.allocations}:
        by_pool.setdefault(pool, []).append(task)
