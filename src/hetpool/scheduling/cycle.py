"""One scheduling cycle: a pure function from a snapshot and a queue to decisions.

Recipe (after Kueue's `schedule()`), one phase per function:

1. open — route tasks into queues and order the heads (priority with aging, tenant fair
   share, age) over a working copy of the snapshot;
2. nominate — per head, in order: the constraints it is assigned under (its queue's pools,
   its class's placement, the reservations it must not delay) and its shape;
3. gate — outcomes known without placing it: its shape already failed this cycle, backfill
   is off behind a blocked head of its class, or it asks for more than its quota could
   ever give (`exceeds_quota`);
4. fit — assign on the working snapshot (every candidate group tried and recorded; those
   that meet a deadline first, deadlines.py), or wait for preferred devices when that ends
   earlier than a substitute;
5. admit — the quota book is asked with the placement: admit (and charge), defer a
   borrower behind the work within its quota, or leave it `over_quota`;
6. plan preemption — a head that does not fit waits for devices already being freed, is
   blocked by another head's reservation, or evicts lower-priority / borrowing work;
7. reserve or block — otherwise it holds a reservation (backfill never delays it) or
   blocks its FIFO queue;
8. requeue — tasks behind blocked FIFO heads, then position and estimated start for every
   waiting task (forecast.attach_estimates), and deadlines it can no longer meet.

Every decision carries a typed `Explanation` (explain.py). Only the server's workers turn
decisions into writes and calls.
"""

from __future__ import annotations

import copy as _copy
import time
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from hetpool.core.interpreter import collections_deferred
from hetpool.core.inventory import DeviceModelSpec
from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.scheduling.assign import Assignment, assign
from hetpool.scheduling.backfill import PreferredWait, Reservation, by_end, first_endings, prefer_waiting, preferred_only, reserve
from hetpool.scheduling.claims import Claims
from hetpool.scheduling.cycle_heads import heads, note_preemptors
from hetpool.scheduling.cycle_parked import candidate_pools, may_use, settle, still_parked
from hetpool.scheduling.cycle_preempt import OVERRUN_PREFIX, fits_after_release, plan_overrun_eviction, plan_preemption
from hetpool.scheduling.cycle_state import (
    Blame,
    Candidate,
    CycleInputs,
    CycleState,
    as_running,
    fair_share,
    held_by,
    idle_key,
    index_by_pool,
    release,
    shape_key,
    slowest_memo,
    take,
    units,
)
from hetpool.scheduling.deadlines import assign_kwargs, mark_at_risk
from hetpool.scheduling.explain import (
    UNKNOWN_START_TEXT,
    VICTIMS_BORROWING_TEXT,
    VICTIMS_LOWER_PRIORITY_TEXT,
    VICTIMS_OVERRUN_TEXT,
    Explanation,
    Reason,
    from_assignment,
)
from hetpool.scheduling.filters import CompatCheck, memoized
from hetpool.scheduling.forecast import attach_estimates
from hetpool.scheduling.forecast_interval import forecast_due, owe, unestimated
from hetpool.scheduling.parking import close_parking, grown_pools, open_parking
from hetpool.scheduling.queueing import MAX_RANK, QueueOrder, RankMemo, route
from hetpool.scheduling.quota_fit import never_within_quota
from hetpool.scheduling.quota_view import QuotaCeiling, QuotaLedger
from hetpool.scheduling.running import RunningTask, exempt_recent, revise_overruns
from hetpool.scheduling.snapshot import Snapshot

__all__ = ["CycleResult", "Decision", "QueuedTask", "held_by", "run_cycle", "shape_key"]

DEFAULT_POLICY = SchedulingPolicySpec()


@dataclass(frozen=True)
class QueuedTask:
    id: str
    spec: TaskSpec
    queued_at: datetime
    quota_exempt: bool = False  # admitted over quota by approval (counted as borrowing)
    preferred_wait: PreferredWait | None = None  # the promise it was given when it chose to wait for its preferred model


@dataclass
class Decision:
    task_id: str
    admit: bool
    assignment: Assignment
    explanation: Explanation
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
    carried: int = 0  # queued tasks not decided this cycle (policy.max_heads_per_cycle): they keep their last explanation
    parked: int = 0  # waiting heads passed over because nothing they could use changed (parking.py); they keep theirs too

    @property
    def admitted(self) -> list[Decision]:
        return [d for d in self.decisions if d.admit]


REASON_SET_ASIDE = "set aside"  # kept as a filter count for readers of `reasons`
REASON_QUOTA = "quota exceeded"
# At most this many re-runs per cycle: an error that every task hits (a fault of shared
# data, not of one task) would otherwise cost one full cycle per queued task. Past it, the
# cycle returns only the tasks set aside so far; the next pass goes on from there.
MAX_SET_ASIDE = 16
NO_PLACEMENT = Assignment(False, [], False, [])


def run_cycle(snapshot: Snapshot, queue: list[QueuedTask], compat_check: CompatCheck, now: datetime, **options) -> CycleResult:
    """One scheduling cycle; `options` as for `_run_cycle`.

    One task must not stop scheduling for everyone: when evaluating a task raises, the
    cycle is run again from the same snapshot without it (the quota book restored first),
    and the task gets a decision with `set_aside` set to the error, which the worker turns
    into a failure with that reason. An error that no single task can be blamed for
    propagates. Nothing is paid when no task raises."""
    started = time.perf_counter()
    with collections_deferred():
        result = _run_guarded(snapshot, queue, compat_check, now, options)
    result.duration_s = time.perf_counter() - started
    return result


def _run_guarded(snapshot: Snapshot, queue: list[QueuedTask], compat_check: CompatCheck, now: datetime, options: dict) -> CycleResult:
    """The cycle re-run without each task whose evaluation raised (see run_cycle)."""
    quota: QuotaLedger | None = options.get("quota")
    saved = quota.saved() if quota else None
    aside: dict[str, str] = {}
    result = CycleResult(decisions=[], duration_s=0.0)
    while len(aside) < MAX_SET_ASIDE:
        blame = Blame()
        try:
            result = _run_cycle(snapshot, [q for q in queue if q.id not in aside], compat_check, now, blame=blame, **options)
            break
        except Exception as exc:
            if blame.task_id is None or blame.task_id in aside:
                raise
            aside[blame.task_id] = f"{type(exc).__name__}: {exc}"[:500]
            if quota:
                quota.restore(saved)
    for task_id, error in aside.items():
        info = Explanation(Reason.SET_ASIDE, False, {REASON_SET_ASIDE: 1}, [], {"error": error})
        result.decisions.append(Decision(task_id, False, NO_PLACEMENT, info, set_aside=error))
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
    quota: QuotaLedger | None = None,
    blame: Blame | None = None,
) -> CycleResult:
    """One scheduling cycle. `quota` (already charged with the running work) is asked before
    each admission; None: no quotas. `blame` is kept naming the task under evaluation."""
    started = time.perf_counter()
    blame = blame or Blame()
    policy = policy or DEFAULT_POLICY
    # Kept on the snapshot (shared by its copies): the server and the simulator keep one
    # snapshot across cycles, so verdicts are computed once per pool and request.
    compat_check = memoized(compat_check, snapshot.compat_cache)
    models = models or {p.model.name: p.model for p in snapshot.pools}
    # Running work past its expected end is revised once, here: every phase reads the same ends.
    # ... and work within its preempt_exempt_time is not preemptible in any phase of this cycle.
    running = exempt_recent(revise_overruns(list(running), now), now, policy.preempt_exempt_time_s)
    cx = CycleInputs(snapshot, compat_check, now, policy, models, running, quota, blame)
    st = open_cycle(cx, queue, list(queues), tenant_weights or {})
    claims = Claims(st.working, snapshot.claims, [t for t in snapshot.preemptors if st.order.entry(t) is not None])
    st.claimants, st.claims = claims.kept, claims
    # Growth is judged with the claims held: what a victim released is its preemptor's, not
    # news for the parked heads.
    park, st.park_counts = open_parking(st.working, policy, cx.running, quota, st.order.where, now)
    st.parked, st.grown, st.grown_pools = park.parked, park.grown, grown_pools(snapshot, park.grown)
    st.reserves_owed, st.wake_groups = park.reserves_owed, park.wake_groups
    # The forecast's cycle lets go the parked tasks told "pending" since the last one (forecast_interval.py).
    due = estimate and policy.estimate_horizon > 0 and forecast_due(snapshot.parking, now, policy)
    let_go = unestimated(snapshot.parking, due)
    skip = (lambda q, item: item.id not in let_go and still_parked(cx, st, q, item)) if st.parked else None
    for q, item in heads(st, blame, policy.max_heads_per_cycle, snapshot.scan_cursor, snapshot.preemptors, skip):
        blame.task_id = item.id
        if claims.give_back(item.id):
            st.staying_groups.clear()  # capacity came back: what stayed parked may not now
        decided = len(st.decisions)
        decide(cx, st, q, item)
        admitted = len(st.decisions) > decided and st.decisions[-1].admit
        claims.after(item.id, admitted, st.planned.get(item.id))
        if st.parked and not st.settled:
            settle(cx, st)
    blame.task_id = None
    note_preemptors(snapshot.preemptors, st.decisions)
    kept = claims.keep(snapshot.preemptors)
    snapshot.claims.clear()  # in place: the server hands each cycle a copy sharing this memory
    snapshot.claims.update(kept)
    if policy.park_waiting:
        candidates = {task_id: (cand, candidate_pools(cx, st, cand), st.order.entry(task_id)[1]) for task_id, cand in st.parkable.items()}
        close_parking(park, st.working, st.decisions, candidates, st.park_counts, st.deferred, now)
    pending = requeue(cx, st, estimate, due)
    if estimate:
        owe(snapshot.parking, due, pending, {d.task_id for d in st.decisions}, st.order.where)
    reservations, carried = list(st.reservations.values()), st.carried + st.order.left()
    duration = time.perf_counter() - started
    parked = st.parked_over + st.order.skipped
    return CycleResult(decisions=st.decisions, duration_s=duration, reservations=reservations, carried=carried, parked=parked)


def decide(cx: CycleInputs, st: CycleState, q: QueueSpec, item: QueuedTask) -> None:
    """One head through the phases: nominate → gate → fit → admit, or wait (preempt / reserve)."""
    cand = nominate(cx, st, q, item)
    known = gate(cx, st, cand)
    if known is not None:
        st.wait(item, known)
        return
    result = fit(cx, st, cand)
    if result is None:
        return  # waits for its preferred devices (recorded)
    if result.feasible:
        admit_within_quota(cx, st, cand, result)
    else:
        leave_waiting(cx, st, cand, result)


# ----------------------------------------------------------------- 1. open


def open_cycle(cx: CycleInputs, queue: list[QueuedTask], queues: list[QueueSpec], tenant_weights: dict[str, float]) -> CycleState:
    """Route every task to its queue and order the heads (priority with aging, fair share, age)."""
    snapshot, running, blame, policy, now = cx.snapshot, cx.running, cx.blame, cx.policy, cx.now
    fair = fair_share(snapshot, running, tenant_weights)
    # One pass over the whole queue, the only per-cycle work proportional to it: keep it lean.
    routes: dict[tuple, QueueSpec] = {}  # the queue depends on these three fields alone (queueing.route)
    aging, rows = policy.aging_per_hour, []
    ranks = RankMemo(snapshot.rank_memo, now, aging)
    base_rank = {p: p.rank for p in Priority}  # a dict lookup, not the enum's property, per task
    append = rows.append
    for item in queue:
        spec = item.spec
        key = (spec.queue, spec.task_type, spec.template)
        q = routes.get(key)
        if q is None:
            blame.task_id = item.id
            q = routes[key] = route(spec, queues)
        base = base_rank[spec.priority]
        rank = ranks.rank(item.id, base, item.queued_at) if aging and base < MAX_RANK else base
        append((q, item.queued_at, item.id, rank, spec.tenant, item))
    blame.task_id = None
    ranks.prune(len(queue))
    order = QueueOrder.of(rows, fair, now)
    st = CycleState(
        working=snapshot.copy(),
        fair=fair,
        order=order,
        tenant_matters=any(p.spec.reserved_for is not None for p in snapshot.pools),
        releasing=[r for r in running if r.being_preempted],
        idle_results=snapshot.idle_memo(),
        slowest_runtime=slowest_memo(snapshot, cx.models),
    )
    ranks_left, by_pool = st.preemptible_ranks, st.by_pool
    for r in running:
        if r.preemptible:
            ranks_left[r.priority_rank] = ranks_left.get(r.priority_rank, 0) + 1
        index_by_pool(by_pool, r)
    return st


# ----------------------------------------------------------------- 2. nominate


def nominate(cx: CycleInputs, st: CycleState, q: QueueSpec, item: QueuedTask) -> Candidate:
    """The constraints a head is assigned under, and its shape for reusing verdicts."""
    spec = item.spec
    demand = spec.per_worker.devices
    rule = cx.policy.rule(demand.device_class if demand else None)
    kwargs = {"allowed_pools": set(q.pools) or None, "placement": rule.placement}
    # Reservations of every queue's blocked head hold against all tasks: backfill must
    # not delay a reserved start, whichever queue the backfilling task comes from.
    blocking = [r for r in st.reservations.values() if not may_use(cx, st, spec, r)]
    # The same shape under the same reservation fails the same way: reuse the verdict.
    base_shape = shape_key(spec, q, st.tenant_matters)
    shape = base_shape + "|" + ",".join(r.task_id for r in blocking)
    cand = Candidate(q, item, rule, kwargs, blocking, shape, target_kwargs=kwargs, base_shape=base_shape)
    if blocking:
        # Keep the task off the nodes that reservations it must not delay hold.
        masks = [st.reserved_masks[r.task_id] for r in blocking]
        cand.target_kwargs = {**kwargs, "reserved_nodes": np.logical_or.reduce(masks)}
    return cand


# ----------------------------------------------------------------- 3. gate


def gate(cx: CycleInputs, st: CycleState, cand: Candidate) -> Decision | None:
    """A wait decided without placing the task: its shape already failed, backfill is off
    behind a blocked head of its class, or its quota could never admit it."""
    item, q = cand.item, cand.queue
    ceiling = _quota_ceiling(cx, st, cand)  # first: a verdict cached for the shape may be another tenant's
    if ceiling is not None:
        # Never admitted as it stands, whatever finishes: no reservation, no preemption, no ETA.
        info = Explanation(Reason.EXCEEDS_QUOTA, True, {REASON_QUOTA: 1}, facts=ceiling.to_dict())
        return Decision(item.id, False, NO_PLACEMENT, info, q.name)
    cached = st.failed_shapes.get(cand.shape)
    if cached is not None:
        st.parkable[item.id] = cand
        if cached.task_id in st.deferred:
            st.deferred.add(item.id)  # decided as that head was: its preemption was not planned either
        copied = _copy.copy(cached.explanation)  # its own facts and counts (a shallow copy: replace() costs 10×)
        copied.facts, copied.filter_counts = dict(copied.facts), dict(copied.filter_counts)
        return Decision(item.id, False, cached.assignment, copied, q.name)
    demand = cand.spec.per_worker.devices
    device_class = demand.device_class.value if demand else None
    held_for_class = [r for r in st.reservations.values() if r.device_class == device_class]
    if held_for_class and not cand.rule.backfill:
        # Backfill is off for this device class: nothing jumps a blocked head of its class.
        facts = {"blocking_task": held_for_class[0].task_id, "device_class": device_class or "cpu"}
        return Decision(item.id, False, NO_PLACEMENT, Explanation(Reason.BACKFILL_OFF, True, facts=facts), q.name)
    return None


def _idle_result(cx: CycleInputs, st: CycleState, cand: Candidate) -> Assignment:
    """Where the task would go were everything idle (per shape, once per cycle)."""
    key = idle_key(cand)
    if key not in st.idle_results:
        st.idle_results[key] = assign(st.idle(cx.snapshot), cand.spec, cx.compat_check, **cand.kwargs)
    return st.idle_results[key]


def _quota_ceiling(cx: CycleInputs, st: CycleState, cand: Candidate) -> QuotaCeiling | None:
    """The quota the task could never be admitted under, on any placement it could have on
    the idle estate (None: it could be, no quotas, or approved over quota). Once per shape
    and tenant in a cycle: the answer does not depend on what runs."""
    if not cx.quota or cand.item.quota_exempt:
        return None
    spec = cand.spec
    if cx.quota.never_exceeds(spec):  # the common case, without a placement per candidate group
        return None
    key = (cand.shape, spec.tenant, spec.env, spec.task_type)
    if key not in st.ceilings:
        st.ceilings[key] = never_within_quota(cx.quota, st.idle(cx.snapshot), spec, cx.compat_check, **cand.kwargs)
    return st.ceilings[key]


# ----------------------------------------------------------------- 4. fit


def fit(cx: CycleInputs, st: CycleState, cand: Candidate) -> Assignment | None:
    """Assign on the working snapshot (a placement stays taken there); None: the task
    chose to wait for its preferred devices instead (recorded)."""
    spec, working = cand.spec, st.working
    # The deadline step (deadlines.py) orders the pools that meet the task's deadline first.
    result = assign(working, spec, cx.compat_check, commit=True, **assign_kwargs(working, cand.item, cx.now, cand.target_kwargs))
    # A preemptor does not turn down the placement it evicted work for to wait for its
    # preferred devices: the victims would have been evicted for nothing (claims.py).
    waits = cx.policy.wait_for_preferred and spec.ordered and spec.runtime_estimate_s and cand.item.id not in st.claimants
    if result.feasible and result.fallback_used and waits:
        release(working, result)
        promise = cand.item.preferred_wait
        waited = prefer_waiting(
            working,
            spec,
            result,
            st.by_pool,
            cx.compat_check,
            cx.now,
            cx.models,
            cand.target_kwargs,
            st.banked,
            promise,
            st.ending_memo,
            # data locality is scored, not part of the shape: it may pick among preferred models
            (st.wait_fits, (cand.shape, repr(cand.kwargs["placement"]), spec.data.zone if spec.data else None)),
        )
        if waited is None:
            take(working, result)
        else:
            # Its estimated start is the preferred model's: that is what it waits for.
            st.wait(replace(cand.item, spec=preferred_only(spec)), Decision(cand.item.id, False, result, waited, cand.queue.name))
            return None
    return result


# ----------------------------------------------------------------- 5. admit (quota with the placement)


def admit_within_quota(cx: CycleInputs, st: CycleState, cand: Candidate, result: Assignment) -> None:
    """Admit a placed task its quota allows now; defer a borrower; else it waits over quota."""
    item, spec, quota = cand.item, cand.spec, cx.quota
    verdict = quota.check(spec, held_by(result)) if quota and not item.quota_exempt else None
    if verdict is not None and not verdict.ok:
        release(st.working, result)
        info = Explanation(Reason.OVER_QUOTA, True, {REASON_QUOTA: 1}, facts={"quota_reason": verdict.reason})
        st.wait(item, Decision(item.id, False, result, info, cand.queue.name))
        return
    if verdict is not None and verdict.borrowing and not st.deferring_done:
        # Work within its quota goes first (as in Kueue): a borrower is placed only
        # after every non-borrowing task of this cycle, so that a lender reclaiming
        # its quota is not overtaken by the very work it preempted.
        release(st.working, result)
        st.borrowers.append((cand.queue, item))
        return
    if quota:
        quota.charge(item.id, spec, held_by(result), exempt=item.quota_exempt)
    st.admitted_now.append(as_running(item.id, spec, result, cx.now, cx.models))
    index_by_pool(st.by_pool, st.admitted_now[-1])
    for p in result.placements:
        st.fair.add(spec.tenant, units(st.working, p.pool, len(p.device_indices) * p.device_fraction), p.cpu, p.memory_gb)
    st.decisions.append(Decision(item.id, True, result, from_assignment(result, True), cand.queue.name, spec=spec))


# ----------------------------------------------------------------- 6. plan preemption


def leave_waiting(cx: CycleInputs, st: CycleState, cand: Candidate, result: Assignment) -> None:
    """A head that does not fit now: wait for devices already being freed, stay blocked by
    another head's reservation, preempt, or else reserve / block (phase 7)."""
    item, spec = cand.item, cand.spec
    fits_idle = _idle_result(cx, st, cand).feasible
    decision = Decision(item.id, False, result, from_assignment(result, fits_idle, nodes=len(cx.snapshot.node_names)), cand.queue.name)
    st.wait(item, decision)
    if fits_idle and st.releasing and fits_after_release(st.working, spec, st.releasing, cx.compat_check, cand.target_kwargs):
        # Devices are already being freed by earlier preemptions: wait for them rather
        # than evicting more work.
        decision.explanation = _retold(decision.explanation, Reason.WAITING_FOR_RELEASE, releasing=len(st.releasing))
        return
    blocker = _blocking_reservation(cx, st, cand) if fits_idle else None
    if blocker is not None:
        # It would start now but for a reservation it must not delay: no preemption helps.
        start_at = blocker.start_at.isoformat() if blocker.start_at else None
        facts = {"blocking_task": blocker.task_id, "start_at": start_at or UNKNOWN_START_TEXT, "blocking_start_at": start_at}
        decision.explanation = _retold(decision.explanation, Reason.BLOCKED_BY_RESERVATION, **facts)
    elif fits_idle:
        deferred = st.preemption_deferred
        outcome = plan_preemption(cx, st, cand, fits_idle)
        if st.preemption_deferred > deferred:
            st.deferred.add(item.id)  # not planned: parked until a cycle has a try left at its turn
        if not outcome.victims and not outcome.quota_block:
            outcome = plan_overrun_eviction(cx, st, cand)
        if outcome.victims:
            decision.victims, decision.preemption_reason = outcome.victims, outcome.reason
            if outcome.placement:
                st.planned[item.id] = outcome.placement
            kind = VICTIMS_BORROWING_TEXT if outcome.reclaims else VICTIMS_LOWER_PRIORITY_TEXT
            kind = VICTIMS_OVERRUN_TEXT if outcome.reason.startswith(OVERRUN_PREFIX) else kind
            facts = {"victim_count": len(outcome.victims), "victim_kind": kind, "preempting": list(outcome.victims)}
            decision.explanation = _retold(decision.explanation, Reason.PREEMPTING, **facts)
            return
        if outcome.quota_block:
            decision.explanation = _retold(decision.explanation, Reason.OVER_QUOTA, quota_reason=outcome.quota_block)
            decision.explanation.filter_counts[REASON_QUOTA] = 1
    elif _recovered_result(cx, st, cand).feasible:
        # Only capacity that is unhealthy now could run it: it waits for that, not forever.
        decision.explanation = _retold(decision.explanation, Reason.WAITING_FOR_RECOVERY)
    reserve_or_block(cx, st, cand, decision, fits_idle)
    if decision.explanation.reason in (Reason.WAITING_FOR_CAPACITY, Reason.HOLDS_RESERVATION) and (held := _held_for_preemptors(cx, st, cand)):
        decision.explanation.facts["held_for_preemptors"] = held


# Waits per cycle asked whether only the preemptors' claims keep them out: each costs a
# snapshot copy and a placement, and claims are held for a cycle or two after a preemption.
MAX_CLAIM_CHECKS = 32


def _held_for_preemptors(cx: CycleInputs, st: CycleState, cand: Candidate) -> int:
    """How many preemptors hold capacity that alone keeps this head out now (0: none, or
    not asked: past MAX_CLAIM_CHECKS this cycle). A "no" is kept per shape for the cycle:
    capacity only shrinks between heads."""
    claims = st.claims
    if claims is None or not any(claims.held.values()) or st.claim_checks >= MAX_CLAIM_CHECKS:
        return 0
    key = idle_key(cand, "unclaimed")
    if key in st.no_fit_unclaimed:
        return 0
    st.claim_checks += 1
    if assign(claims.without_held(), cand.spec, cx.compat_check, explain=False, **cand.kwargs).feasible:
        return sum(1 for pieces in claims.held.values() if pieces)
    st.no_fit_unclaimed.add(key)
    return 0


def _recovered_result(cx: CycleInputs, st: CycleState, cand: Candidate) -> Assignment:
    """Where the task would go were everything idle and healthy (per shape, once per cycle)."""
    key = idle_key(cand, "recovered")
    if key not in st.idle_results:
        st.idle_results[key] = assign(st.recovered(cx.snapshot), cand.spec, cx.compat_check, **cand.kwargs)
    return st.idle_results[key]


def _retold(expl: Explanation, reason: Reason, **facts) -> Explanation:
    """The same placement attempt, explained by another reason."""
    return Explanation(reason, expl.fits_when_idle, expl.filter_counts, expl.attempts, {**expl.facts, **facts})


def _blocking_reservation(cx: CycleInputs, st: CycleState, cand: Candidate) -> Reservation | None:
    """The reservation that alone keeps the task from starting now (None: not one)."""
    if not cand.blocking or cand.base_shape in st.no_fit_unreserved:
        return None
    free = assign(st.working, cand.spec, cx.compat_check, explain=False, **cand.kwargs)
    if not free.feasible:
        # Capacity only shrinks between two heads: the shape stays unplaceable this cycle.
        st.no_fit_unreserved.add(cand.base_shape)
        return None
    nodes = {p.node for p in free.placements}
    return next((r for r in cand.blocking if r.nodes & nodes), cand.blocking[0])


# ----------------------------------------------------------------- 7. reserve or block


def reserve_or_block(cx: CycleInputs, st: CycleState, cand: Candidate, decision: Decision, fits_idle: bool) -> None:
    """A head that could run on the idle estate blocks its FIFO queue or holds a
    reservation (one per queue); one that could not remembers its shape as failed."""
    q, item, spec, snapshot = cand.queue, cand.item, cand.spec, cx.snapshot
    if fits_idle and q.ordering == "fifo":
        st.order.block(q.name)
        return
    held = None
    if fits_idle and q.name not in st.reservations:
        if st.running_by_end is None:
            st.running_by_end = by_end(cx.running)  # the same all cycle
        ending = first_endings(st.running_by_end, st.admitted_now)
        held = reserve(item.id, st.working, st.idle(snapshot), spec, ending, cx.compat_check, cx.now, ordered=True, **cand.kwargs)
    if held is None:
        st.failed_shapes[cand.shape] = decision
        st.parkable[item.id] = cand
        return
    st.reservations[q.name] = held
    mask = np.zeros(len(snapshot.node_names), dtype=bool)
    mask[[snapshot.node_by_name[n] for n in held.nodes]] = True
    st.reserved_masks[held.task_id] = mask
    start_at = held.start_at.isoformat() if held.start_at else None
    reservation = {"nodes": sorted(held.nodes), "start_at": start_at}
    if decision.explanation.reason in (Reason.BLOCKED_BY_RESERVATION, Reason.OVER_QUOTA):
        # Still held back by another head's reservation (or its quota): it says so, and shows its own.
        decision.explanation.with_facts(reservation=reservation)
        return
    facts = {"reservation": reservation, "node_count": len(held.nodes), "start_at": start_at or UNKNOWN_START_TEXT}
    decision.explanation = _retold(decision.explanation, Reason.HOLDS_RESERVATION, **facts)


# ----------------------------------------------------------------- 8. requeue


def requeue(cx: CycleInputs, st: CycleState, estimate: bool, due: bool = True) -> set[str]:
    """The tasks behind blocked FIFO heads wait with that reason; then every waiting task
    gets its position and estimated start (see forecast.attach_estimates) and, if it has a
    deadline, whether that is at risk (deadlines.mark_at_risk). Returns the tasks whose
    estimate waits for the next forecast (`due`: this cycle forecasts; forecast_interval.py)."""
    for q, item in st.order.remaining(blocked_only=True):
        info = Explanation(Reason.BEHIND_FIFO_HEAD, True, facts={"queue": q.name})
        st.wait(item, Decision(item.id, False, NO_PLACEMENT, info, q.name))
    horizon, pending = cx.policy.estimate_horizon, set()
    if estimate and st.waiting and horizon:
        pending = attach_estimates(
            cx.snapshot, st.working, st.waiting, cx.running, st.decisions, cx.compat_check, cx.now, cx.models, horizon, cx.blame, cx.policy, due
        )
    mark_at_risk(cx.snapshot, st.waiting, st.decisions, cx.now, cx.models)
    return pending
