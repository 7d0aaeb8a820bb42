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
from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.scheduling.assign import Assignment, assign
from hetpool.scheduling.backfill import Reservation, earliest_fit, may_use_reserved, reserve
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.explain import explanation
from hetpool.scheduling.filters import CompatCheck
from hetpool.scheduling.forecast import end_after, forecast_starts
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


def memoized(compat_check: CompatCheck, cache: dict | None = None) -> CompatCheck:
    """Compatibility verdicts per (model, stack, framework request).

    Many queued tasks ask for the same framework spec; a pool's stack object is shared
    by all its rows and by every copy of the snapshot, so its id() is a safe key for as
    long as the snapshot lives — which is where the cache is kept (see run_cycle).
    """
    cache = {} if cache is None else cache

    def check(model, stack, framework, *, has_image: bool = False):
        key = (model.name, id(stack), framework.cache_key if framework else "", has_image)
        if key not in cache:
            cache[key] = compat_check(model, stack, framework, has_image=has_image)
        return cache[key]

    return check


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
    factors = snapshot.__dict__.get("_unit_factors")
    if factors is None:
        factors = snapshot.__dict__["_unit_factors"] = {
            p.name: 0.0 if p.model.device_class == "cpu" else p.model.perf_for(TaskType.GENERAL) for p in snapshot.pools
        }
    return devices * factors.get(pool, 0.0)


@dataclass
class _Blame:
    """The task being evaluated, so that an error can be pinned on it (None: on no task)."""

    task_id: str | None = None


REASON_SET_ASIDE = "set aside"
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
    the task under evaluation (see run_cycle)."""
    started = time.perf_counter()
    blame = blame or _Blame()
    policy = policy or DEFAULT_POLICY
    # Kept on the snapshot (shared by its copies): the server and the simulator keep one
    # snapshot across cycles, so verdicts are computed once per pool and request.
    compat_check = memoized(compat_check, snapshot.__dict__.setdefault("_compat_cache", {}))
    models = models or {p.model.name: p.model for p in snapshot.pools}
    running = list(running)
    working = snapshot.copy()
    idle_cache: list[Snapshot] = []

    def idle() -> Snapshot:
        if not idle_cache:
            idle_cache.append(snapshot.emptied())
        return idle_cache[0]

    fair = _fair_share(snapshot, running, tenant_weights or {})
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
    tenant_matters = any(p.spec.reserved_for is not None for p in snapshot.pools)
    failed_shapes: dict[str, Decision] = {}
    idle_fits: dict[str, bool] = {}
    reservations: dict[str, Reservation] = {}  # per queue: its blocked head's reservation
    reserved_masks: dict[str, np.ndarray] = {}
    evicting: set[str] = set()
    releasing = [r for r in running if r.being_preempted]
    # Cheap guard before scanning running work for victims on every waiting task.
    lowest_preemptible = min((r.priority_rank for r in running if r.preemptible), default=Priority.CRITICAL.rank + 1)
    decisions: list[Decision] = []
    waiting: list[QueuedTask] = []

    # Work admitted earlier in this cycle, as running work with its expected end, so that
    # reservation start times and wait-for-preferred count on it ending (the latter also
    # counts the work already waiting for the same devices: see _prefer_waiting).
    admitted_now: list[RunningTask] = []
    may_use: dict[tuple, bool] = {}
    banked: dict[str, float] = {}  # device-seconds waiting for each preferred model (see _prefer_waiting)
    by_pool: dict[str, list[RunningTask]] = {}  # running work (and this cycle's admissions) per pool
    for r in running:
        _index(by_pool, r)

    def _may_use(spec: TaskSpec, reservation: Reservation) -> bool:
        # Memoised: the answer depends only on the task's shape and runtime estimate.
        key = (spec.placement_shape, spec.runtime_estimate, reservation.task_id)
        if key not in may_use:
            may_use[key] = may_use_reserved(spec, reservation, now, models)
        return may_use[key]

    borrowers: list[tuple[QueueSpec, QueuedTask]] = []
    deferring_done = False

    def next_item():
        nonlocal deferring_done
        while True:
            blame.task_id = None  # choosing the next head is no one task's evaluation
            if (popped := order.pop()) is None:
                break
            yield popped
        deferring_done = True
        yield from borrowers

    for q, item in next_item():
        blame.task_id = item.id
        spec = item.spec
        demand = spec.per_worker.devices
        rule = policy.rule(demand.device_class if demand else None)
        kwargs = {"allowed_pools": set(q.pools) or None, "placement": rule.placement}
        # Reservations of every queue's blocked head hold against all tasks: backfill must
        # not delay a reserved start, whichever queue the backfilling task comes from.
        blocking = [r for r in reservations.values() if not _may_use(spec, r)]
        constrained = bool(blocking)
        # The same shape under the same reservation fails the same way: reuse the verdict.
        shape = shape_key(spec, q, tenant_matters) + "|" + ",".join(r.task_id for r in blocking)
        cached = failed_shapes.get(shape)
        if cached is not None:
            decisions.append(Decision(item.id, False, cached.assignment, dict(cached.explanation), q.name))
            waiting.append(item)
            continue
        device_class = demand.device_class.value if demand else None
        held_for_class = [r for r in reservations.values() if r.device_class == device_class]
        if held_for_class and not rule.backfill:
            # Backfill is off for this device class: nothing jumps a blocked head of its class.
            info = {
                "summary": f"waiting behind {held_for_class[0].task_id}: backfill is off for {device_class or 'cpu'} pools",
                "fits_when_idle": True,
                "reasons": {},
                "attempts": [],
            }
            decisions.append(Decision(item.id, False, Assignment(False, [], False, []), info, q.name))
            waiting.append(item)
            continue
        target_kwargs = kwargs
        if constrained:
            target_kwargs = {**kwargs, "reserved_nodes": np.logical_or.reduce([reserved_masks[r.task_id] for r in blocking])}
        # commit: a successful placement stays taken on `working`; undone below if the task
        # decides to wait for its preferred devices instead.
        result = assign(working, spec, compat_check, commit=True, **target_kwargs)

        if result.feasible and result.fallback_used and policy.wait_for_preferred and spec.ordered and spec.runtime_estimate_s:
            _release(working, spec, result)
            waited = _prefer_waiting(working, spec, result, by_pool, compat_check, now, models, target_kwargs, banked)
            if waited is None:
                _take(working, spec, result)
            else:
                decisions.append(Decision(item.id, False, result, waited, q.name))
                waiting.append(item)
                continue

        if result.feasible and quota and not item.quota_exempt:
            verdict = quota.check(spec, held_by(result))
            if not verdict.ok:
                _release(working, spec, result)
                info = {"summary": f"over quota: {verdict.reason}", "fits_when_idle": True, "reasons": {REASON_QUOTA: 1}, "attempts": []}
                decisions.append(Decision(item.id, False, result, info, q.name))
                waiting.append(item)
                continue
            if verdict.borrowing and not deferring_done:
                # Work within its quota goes first (as in Kueue): a borrower is placed only
                # after every non-borrowing task of this cycle, so that a lender reclaiming
                # its quota is not overtaken by the very work it preempted.
                _release(working, spec, result)
                borrowers.append((q, item))
                continue

        if result.feasible:
            if quota:
                quota.charge(item.id, spec, held_by(result), exempt=item.quota_exempt)
            admitted_now.append(_as_running(item.id, spec, result, now, models))
            _index(by_pool, admitted_now[-1])
            for p in result.placements:
                fair.add(spec.tenant, _units(working, p.pool, len(p.device_indices) * p.device_fraction), p.cpu, p.memory_gb)
            decisions.append(Decision(item.id, True, result, explanation(result, True), q.name, spec=spec))
            continue

        if shape not in idle_fits:
            idle_fits[shape] = assign(idle(), spec, compat_check, **kwargs).feasible
        info = explanation(result, idle_fits[shape], nodes=len(snapshot.node_names))
        decision = Decision(item.id, False, result, info, q.name)
        rank = spec.priority.rank
        if idle_fits[shape] and releasing and _fits_after_release(working, spec, releasing, compat_check, target_kwargs):
            # Devices are already being freed by earlier preemptions: wait for them rather
            # than evicting more work.
            info["summary"] = f"waiting for {len(releasing)} preempted task(s) to release their devices"
            decisions.append(decision)
            waiting.append(item)
            continue
        # A lender within its nominal quota takes back what its cohort's borrowers hold,
        # whatever their priority (reclaim within cohort).
        reclaim = (lambda r, spec=spec: quota.reclaimable_by(spec, r.id)) if quota and not item.quota_exempt else None
        reclaimable = reclaim is not None and any(r.preemptible and r.id not in evicting and reclaim(r) for r in running)
        if (
            idle_fits[shape]
            and rule.preemption
            and (reclaimable or rank > lowest_preemptible)
            and (reclaimable or any(r.priority_rank < rank and r.preemptible and r.id not in evicting for r in running))
        ):
            plan = find_victims(
                working,
                spec,
                rank,
                [r for r in running if r.id not in evicting],
                compat_check,
                allowed=lambda r: r.id not in evicting and _class_allows_preemption(snapshot, policy, r),
                preemptor_id=item.id,
                reclaimable=reclaim if reclaimable else None,
                **kwargs,
            )
            quota_block = _quota_blocks_plan(quota, spec, plan) if plan is not None and quota and plan.victims else ""
            if quota_block:
                # Try again without other tenants' guaranteed work (e.g. evict this tenant's own
                # lower-priority task instead).
                retry = find_victims(
                    working,
                    spec,
                    rank,
                    [r for r in running if r.id not in evicting],
                    compat_check,
                    allowed=lambda r: (
                        r.id not in evicting
                        and _class_allows_preemption(snapshot, policy, r)
                        and (r.tenant == spec.tenant or quota.is_borrowing(r.id))  # noqa: B023 (called right here)
                    ),
                    preemptor_id=item.id,
                    reclaimable=reclaim if reclaimable else None,
                    **kwargs,
                )
                if retry is not None and retry.victims and not _quota_blocks_plan(quota, spec, retry):
                    plan, quota_block = retry, ""
            if quota_block:
                plan = None  # evicting would not make it admissible, or would take others' guaranteed quota
                info["summary"] = f"over quota: {quota_block}"
                info["reasons"] = {**info.get("reasons", {}), REASON_QUOTA: 1}
            if plan is not None:
                evicting.update(v.id for v in plan.victims)
                decision.victims = [v.id for v in plan.victims]
                decision.preemption_reason = plan.reason
                what = "borrowing task(s) to reclaim its quota" if plan.reason.startswith("quota reclaimed") else "lower-priority task(s)"
                info["summary"] = f"preempting {len(plan.victims)} {what}; starts when they have released their devices"
                info["preempting"] = decision.victims
                decisions.append(decision)
                waiting.append(item)
                continue
        if idle_fits[shape] and q.ordering == "fifo":
            order.block(q.name)
        elif idle_fits[shape] and q.name not in reservations:
            held = reserve(item.id, working, idle(), spec, running + admitted_now, compat_check, now, **kwargs)
            if held is not None:
                reservations[q.name] = held
                mask = np.zeros(len(snapshot.node_names), dtype=bool)
                mask[[snapshot.node_by_name[n] for n in held.nodes]] = True
                reserved_masks[held.task_id] = mask
                info["reservation"] = {"nodes": sorted(held.nodes), "start_at": held.start_at.isoformat() if held.start_at else None}
        else:
            failed_shapes[shape] = decision
        decisions.append(decision)
        waiting.append(item)

    blame.task_id = None
    for q, item in order.remaining():  # behind a blocked FIFO head
        info = {"summary": f"waiting behind the head of fifo queue {q.name}", "fits_when_idle": True, "reasons": {}, "attempts": []}
        decisions.append(Decision(item.id, False, Assignment(False, [], False, []), info, q.name))
        waiting.append(item)

    if estimate and waiting and policy.estimate_horizon:
        _attach_estimates(snapshot, working, waiting, running, decisions, compat_check, now, models, policy.estimate_horizon, blame)
    return CycleResult(decisions=decisions, duration_s=time.perf_counter() - started, reservations=list(reservations.values()))


REASON_QUOTA = "quota exceeded"


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
    from hetpool.scheduling.backfill import release_running

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


def _prefer_waiting(working, spec, result, by_pool, compat_check, now, models, kwargs, banked: dict[str, float]) -> dict | None:
    """Wait for the preferred (first) candidate when it would finish before the substitute.

    `banked` holds, per device model, the device-seconds of work that already chose to
    wait for it in this cycle: the preferred devices are then expected to be free only
    after that work too (spread over the model's devices), so that not every waiting
    task counts on the same soon-free device.
    """
    substitute = models.get(result.placements[0].model)
    sub_end = now.timestamp() + (runtime_on(spec, substitute) or 0.0)
    preferred = spec.model_copy(update={"fallback": spec.fallback[:1], "any_of": []})
    # Only work on the preferred devices' pools can free them (host CPU and memory aside).
    wanted = set(spec.fallback[:1]) | set(spec.per_worker.devices.models if spec.per_worker.devices else [])
    pools = [p.name for p in working.pools if p.name in wanted or p.model.name in wanted]
    relevant = list({id(r): r for pool in pools for r in by_pool.get(pool, ())}.values())
    start, pref = earliest_fit(working, preferred, relevant, compat_check, now, **kwargs)
    if pref is None:
        return None
    model_name = pref.placements[0].model
    pref_model = models.get(model_name)
    pref_seconds = runtime_on(spec, pref_model) or 0.0
    queue_delay = banked.get(model_name, 0.0) / max(_devices_of(working, model_name), 1)
    pref_end = start.timestamp() + queue_delay + pref_seconds
    if pref_end >= sub_end:
        return None
    devices = sum(len(p.device_indices) * p.device_fraction for p in pref.placements)
    banked[model_name] = banked.get(model_name, 0.0) + devices * pref_seconds
    info = explanation(result, True)
    info["summary"] = (
        f"waiting for preferred {pref.placements[0].model} (free at {start.isoformat(timespec='minutes')}): "
        f"finishes earlier than starting now on {result.placements[0].model}"
    )
    info["substitute_rejected"] = {"model": result.placements[0].model, "finish_at": datetime.fromtimestamp(sub_end, now.tzinfo).isoformat()}
    return info


def _devices_of(snap: Snapshot, model: str) -> int:
    return int(sum(snap.device_totals()[p.rows].sum() for p in snap.pools if p.model.name == model))


def _attach_estimates(snapshot, working, waiting, running, decisions, compat_check, now, models, horizon, blame: _Blame) -> None:
    by_id = {d.task_id: d for d in decisions}
    # Work admitted this cycle already holds capacity in `working`; it runs from now on
    # and gives its devices back after its own estimated runtime.
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
    # The forecast answers for each task on its own: a task it cannot estimate says why,
    # and is still scheduled (an estimate is information, not a decision).
    errors: dict[str, str] = {}
    estimates = forecast_starts(working, waiting, running + admitted, compat_check, now, models, horizon=horizon, errors=errors)
    for item in waiting:
        if item.id in errors:
            by_id[item.id].explanation["estimate_error"] = errors[item.id]
        est = estimates.get(item.id)
        if est is None:
            continue
        by_id[item.id].explanation["position"] = est.position
        by_id[item.id].explanation["estimated_start"] = est.start_at.isoformat() if est.start_at else None
        by_id[item.id].explanation["estimated_wait_s"] = est.wait_s


def _as_allocations(decision: Decision):
    from hetpool.scheduling.snapshot import Allocation

    for p in decision.assignment.placements:
        yield Allocation(p.node, p.pool, p.device_indices, p.device_fraction, p.cpu, p.memory_gb)


