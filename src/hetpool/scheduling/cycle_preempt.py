"""The cycle's preemption-planning phase: may a waiting head evict running work, and whom.

A head that fits the idle estate may evict lower-priority work (or, as a lender within its
nominal quota, its cohort's borrowers: Kueue's reclaimWithinCohort). A plan is kept only
when it frees something (an empty plan is never a preemption: a task that would already
fit but for another task's reservation is *blocked*, see cycle.py) and when the quota book
agrees that, with the victims gone, the task would be admitted without taking other
tenants' guaranteed quota.

**The backfill bound.** Backfill lets later work run ahead of a waiting head on the
strength of its runtime estimate; an estimate can be wrong. Work that started after the
head began waiting, at no higher priority, and has overrun its own estimate by more than
`overrun_allowance` gives way to the head when that lets the head start
(`plan_overrun_eviction`): so no head waits longer than that allowance (plus the work's
checkpoint grace and a cycle) for work that got ahead of it by its estimate — as Slurm's
backfill relies on time limits it enforces. Work without an estimate never ran ahead on
reserved nodes (backfill.may_use_reserved), so it is not subject to this.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling.assign import assign
from hetpool.scheduling.backfill import release_all
from hetpool.scheduling.claims import claimed_placement
from hetpool.scheduling.cycle_state import Candidate, CycleInputs, CycleState, held_by, idle_key
from hetpool.scheduling.plan_memo import fingerprint, memo_of
from hetpool.scheduling.preempt import PreemptionPlan, find_victims
from hetpool.scheduling.quota_view import QuotaLedger
from hetpool.scheduling.running import BASIS_ESTIMATE, RunningTask
from hetpool.scheduling.snapshot import Snapshot
from hetpool.scheduling.victim_arrays import cycle_arrays

RECLAIM_PREFIX = "quota reclaimed"  # how preempt.find_victims starts the reason of a reclaim


@dataclass(frozen=True)
class PreemptionOutcome:
    """What planning found: victims to evict (with the reason they are told), or the quota
    reason no plan may go ahead; neither when preemption cannot help."""

    victims: list[str]
    reason: str = ""  # told to the victims
    quota_block: str = ""  # why no plan may go ahead on quota grounds ("" if none)
    placement: tuple = ()  # where the head lands once they are gone (claimed for it: claims.py)

    @property
    def reclaims(self) -> bool:
        return self.reason.startswith(RECLAIM_PREFIX)


NO_PREEMPTION = PreemptionOutcome([])
LENDER_WOULD_BORROW = "it would have to borrow: a lender reclaims its quota only for work within its nominal quota"

# How far past its own estimate work that got ahead of a waiting head may run before it
# gives way (the backfill bound): at least the policy's backfill_overrun_allowance, or this
# share of its estimated runtime (ten minutes late on a four-hour job is not yet an overrun).
OVERRUN_ALLOWANCE_SHARE = 0.1
OVERRUN_PREFIX = "overran its runtime estimate"  # how the victims' reason begins


def plan_preemption(cx: CycleInputs, st: CycleState, cand: Candidate, fits_idle: bool) -> PreemptionOutcome:
    """Victims for a head that fits the idle estate, if evicting them lets it start."""
    item, spec, quota = cand.item, cand.spec, cx.quota
    rank = spec.priority.rank
    # A lender within its nominal quota takes back what its cohort's borrowers hold,
    # whatever their priority (reclaim within cohort).
    ids = _reclaimable_ids(cx, st, spec) if quota and not item.quota_exempt else frozenset()
    reclaimable = bool(ids - st.evicting)
    if not (fits_idle and cand.rule.preemption and (reclaimable or st.preemptible_below(rank))):
        return NO_PREEMPTION
    if not reclaimable and _hopeless(cx, st, cand):
        return NO_PREEMPTION  # no plan could help: it costs no try (the tries go to heads that can)
    if st.preemption_tries >= cx.policy.max_preemption_tries:
        # Planning costs a placement per candidate victim: past this many heads in one
        # cycle the rest wait for the next (the heads tried first are the most deserving).
        st.preemption_deferred += 1
        return NO_PREEMPTION
    st.preemption_tries += 1
    reclaim = ids if reclaimable else frozenset()
    # The same head planning on the same world as in an earlier cycle comes to the same
    # nothing: reused (plan_memo.py). It has cost the try above, as the plan would.
    memo = memo_of(cx.snapshot)
    key = fingerprint(cx, st, cand, reclaim, memo) if memo is not None else None
    if key is not None and (kept := memo.lookup(item.id, key)) is not None:
        return kept
    outcome = _plan(cx, st, cand, reclaim)
    if key is not None:
        if outcome.victims:
            memo.forget(item.id)
        else:
            memo.keep(item.id, key, outcome)
    return outcome


def _plan(cx: CycleInputs, st: CycleState, cand: Candidate, reclaim: frozenset[str]) -> PreemptionOutcome:
    """plan_preemption's search once the head may plan: victims, or why not on quota grounds."""
    spec, quota, rank = cand.spec, cx.quota, cand.spec.priority.rank
    plan = _victims(cx, st, cand, reclaim, only_own_or_borrowing=False)
    if plan is None or not plan.victims:
        return NO_PREEMPTION  # nothing to evict: it is not capacity held by running work that stops it
    quota_block = quota_blocks_plan(quota, spec, plan, rank) if quota else ""
    if quota_block:
        # Try again without other tenants' guaranteed work (e.g. evict this tenant's own
        # lower-priority task instead), then, for a lender that would borrow itself, with
        # lower-priority work only.
        retries = [(reclaim, True)]
        if quota_block == LENDER_WOULD_BORROW:  # its reclaims cannot go ahead: lower-priority work only
            retries = [(frozenset(), False), (frozenset(), True)] if st.preemptible_below(rank) else []
        for reclaim_ids, own in retries:
            retry = _victims(cx, st, cand, reclaim_ids, only_own_or_borrowing=own)
            if retry is not None and retry.victims and not quota_blocks_plan(quota, spec, retry, rank):
                plan = retry
                break
        else:
            return PreemptionOutcome([], quota_block=quota_block)
    st.evict(plan.victims)
    return PreemptionOutcome([v.id for v in plan.victims], plan.reason, placement=claimed_placement(plan.assignment.placements))


def overrun_allowance(r: RunningTask, least_s: float) -> float:
    """Seconds `r` may run past the end its own estimate gave before it gives way."""
    estimated = (r.revised_from - r.started_at).total_seconds() if r.revised_from else 0.0
    return max(least_s, OVERRUN_ALLOWANCE_SHARE * max(estimated, 0.0))


def overran(running: list[RunningTask], now: datetime, least_s: float) -> list[RunningTask]:
    """The preemptible work that has run past its own estimate by more than its allowance."""
    return [
        r
        for r in running
        if r.revised_from is not None
        and r.estimate_basis != BASIS_ESTIMATE
        and r.preemptible
        and not r.being_preempted
        and (now - r.revised_from).total_seconds() > overrun_allowance(r, least_s)
    ]


def plan_overrun_eviction(cx: CycleInputs, st: CycleState, cand: Candidate) -> PreemptionOutcome:
    """Evict the work that got ahead of this head by an estimate it overran, when that
    lets the head start (the backfill bound, see the module doc)."""
    if not cx.policy.evict_overrunning_backfill or st.preemption_tries >= cx.policy.max_preemption_tries:
        return NO_PREEMPTION
    item, spec = cand.item, cand.spec
    if st.overran is None:
        st.overran = overran(cx.running, cx.now, cx.policy.backfill_overrun_allowance_s)
        by_start = sorted(st.overran, key=lambda r: r.started_at)
        st.overran_by_start = ([r.started_at for r in by_start], by_start)
    rank = spec.priority.rank
    # Only work that started after this head queued, at no higher priority, got ahead of it:
    # found by bisecting the work by start (most overrunning work started long before a
    # head queued; a scan of all of it per head cost O(heads × running) a cycle).
    starts, by_start = st.overran_by_start
    later = by_start[bisect_right(starts, item.queued_at) :]
    ahead = {r.id for r in later if r.id not in st.evicting and r.priority_rank <= rank}
    if not ahead:
        return NO_PREEMPTION
    st.preemption_tries += 1
    plan = find_victims(
        st.working,
        spec,
        -1,  # no victim for being of lower priority: only those that overran
        [r for r in st.overran if r.id in ahead],
        cx.compat_check,
        preemptor_id=item.id,
        reclaimable=ahead,
        **cand.kwargs,
    )
    if plan is None or not plan.victims:
        return NO_PREEMPTION
    if cx.quota and not item.quota_exempt and quota_blocks_plan(cx.quota, spec, plan):
        return NO_PREEMPTION  # the head would not be admitted anyway, or only by taking guaranteed quota
    st.evict(plan.victims)
    reason = f"{OVERRUN_PREFIX} after starting while {item.id} waited (backfill bound): it gives way to {item.id}"
    # No claim (claims.py): the bound's evictions are few and late, and claiming them changed
    # the Gavel comparison (static_n100: makespan 10.15 → 10.34 h over three seeds) for no gain.
    return PreemptionOutcome([v.id for v in plan.victims], reason)


def _hopeless(cx: CycleInputs, st: CycleState, cand: Candidate) -> bool:
    """Could no plan let the head fit? Asked of an upper bound of what any plan of this
    cycle frees: the estate as the cycle opened with every preemptible task of a lower
    priority gone (capacity only shrinks between heads, and the work a plan may evict only
    thins). Once per shape and rank in a cycle. Without it, on a full estate most of a
    cycle's `max_preemption_tries` went to heads whose plan then found nothing — the same
    heads every cycle — and the heads that could preempt waited for a try."""
    rank = cand.spec.priority.rank
    key = (idle_key(cand, "freeable"), rank)
    verdict = st.hopeless.get(key)
    if verdict is None:
        freeable = st.freeable.get(rank)
        if freeable is None:
            if st.running_arrays is None:
                st.running_arrays = cycle_arrays(cx.snapshot, cx.running)  # once per cycle
            below = st.running_arrays.candidates(np.ones(len(cx.snapshot.node_names)), rank)
            freeable = st.freeable[rank] = st.running_arrays.releases(below.tolist()).released(cx.snapshot, len(below))
        verdict = st.hopeless[key] = not assign(freeable, cand.spec, cx.compat_check, explain=False, **cand.kwargs).feasible
    return verdict


def _reclaimable_ids(cx: CycleInputs, st: CycleState, spec) -> frozenset[str]:
    """Running work `spec`'s tenant may reclaim as a lender (once per tenant, environment
    and type in a cycle: the answer depends on nothing else of the task)."""
    key = (spec.tenant, spec.env, spec.task_type)
    if key not in st.reclaimable:
        quota = cx.quota
        if None not in st.reclaimable:  # the borrowers, once per cycle, grouped by what a lender asks of them
            st.reclaimable[None] = quota.reclaim_groups(r.id for r in cx.running if r.preemptible)
        groups = st.reclaimable[None].items()
        st.reclaimable[key] = frozenset(task_id for (tenant, cohorts), ids in groups if quota.may_reclaim(spec, tenant, cohorts) for task_id in ids)
    return st.reclaimable[key]


def _victims(cx: CycleInputs, st: CycleState, cand: Candidate, reclaim: frozenset[str], *, only_own_or_borrowing: bool) -> PreemptionPlan | None:
    """find_victims among the running work not already being evicted (with
    `only_own_or_borrowing`: only the task's own tenant's work and borrowers)."""
    spec, quota, evicting = cand.spec, cx.quota, st.evicting

    def allowed(r: RunningTask) -> bool:
        if r.id in evicting or not class_allows_preemption(cx.snapshot, cx.policy, r):
            return False
        return not only_own_or_borrowing or r.tenant == spec.tenant or quota.is_borrowing(r.id)

    if st.running_arrays is None:
        st.running_arrays = cycle_arrays(cx.snapshot, cx.running)  # once per cycle
    return find_victims(
        st.working,
        spec,
        spec.priority.rank,
        cx.running,
        cx.compat_check,
        allowed=allowed,
        preemptor_id=cand.item.id,
        reclaimable=reclaim,
        arrays=st.running_arrays,
        **cand.kwargs,
    )


def quota_blocks_plan(quota: QuotaLedger, spec, plan: PreemptionPlan, rank: int | None = None) -> str:
    """Why a preemption plan must not go ahead on quota grounds ("" if it may): the
    preemptor would still be over quota once its victims are gone, or it would only fit by
    borrowing and a victim of another tenant is within its own quota (borrowing never
    evicts guaranteed work; only lenders reclaim from borrowers), or — given the
    preemptor's priority `rank` — it would borrow itself and a victim is not of a lower
    priority, so taken only as a lender's reclaim. A lender reclaims its quota for work
    that then runs within its nominal quota (Kueue's reclaimWithinCohort): two tenants each
    borrowing from the other would otherwise take the same devices back and forth, one
    eviction every other cycle (found at 5,000 nodes by the honest benchmark)."""
    released = [v.id for v in plan.victims]
    guaranteed = [v for v in released if quota.charged_tenant(v) not in (None, spec.tenant) and not quota.is_borrowing(v)]
    with quota.without(released) as book:
        verdict = book.check(spec, held_by(plan.assignment))
    if not verdict.ok:
        return verdict.reason
    if verdict.borrowing and guaranteed:
        # A count, not the ids: they are other tenants' tasks, and this reason is shown to the waiting task's readers.
        return f"it would have to borrow, and {len(guaranteed)} task(s) of other tenants run within their own quota"
    if verdict.borrowing and rank is not None and any(v.priority_rank >= rank for v in plan.victims):
        return LENDER_WOULD_BORROW
    return ""


def fits_after_release(working: Snapshot, spec, releasing: list[RunningTask], compat_check, kwargs: dict) -> bool:
    """Would the task fit once the work already being preempted has given its devices back?"""
    scratch = working.copy()
    release_all(scratch, releasing)
    return assign(scratch, spec, compat_check, explain=False, **kwargs).feasible


def class_allows_preemption(snapshot: Snapshot, policy: SchedulingPolicySpec, victim: RunningTask) -> bool:
    """A victim may be evicted only where its own devices' class allows preemption."""
    for a in victim.allocations:
        index = snapshot.pool_by_name.get(a.pool)
        if index is not None and not policy.rule(snapshot.pools[index].model.device_class).preemption:
            return False
    return True
