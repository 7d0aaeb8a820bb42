"""Parked heads within a cycle (the parking itself: parking.py): whether a parked head stays
passed over when its turn comes, and the per-cycle memos that question shares with the
cycle (the pools a candidate could use, whether a task may use a reservation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetpool.core.policy import QueueSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.backfill import Reservation, ends_before, slowest_runtime_s
from hetpool.scheduling.cycle_state import Candidate, CycleInputs, CycleState, idle_key, shape_key
from hetpool.scheduling.parking import fits_on_rows, rows_of_pools, usable_pools, worker_slots

if TYPE_CHECKING:
    from hetpool.scheduling.cycle import QueuedTask

__all__ = ["candidate_pools", "may_use", "settle", "still_parked"]


def candidate_pools(cx: CycleInputs, st: CycleState, cand: Candidate) -> frozenset[int]:
    """The pools a candidate could use at all (kept with the idle-estate results)."""
    key = idle_key(cand, "pools")
    if key not in st.idle_results:
        st.idle_results[key] = usable_pools(cx.snapshot, cand.spec, cx.compat_check, cand.kwargs["allowed_pools"])
    return st.idle_results[key]


def still_parked(cx: CycleInputs, st: CycleState, q: QueueSpec, item: QueuedTask) -> bool:
    """Does a parked head stay passed over when its turn comes? See `_stays_parked`; and a
    head that would be let go still stays when its shape, under the same reservations,
    already failed this cycle: its decision would be a copy of that no-fit (cycle.gate), made
    against more capacity than is left — no placement, no plan, no reservation.

    Both answers are kept per group of heads that read the same (`Parked.key`): once a
    group stays it stays for the rest of the cycle, since everything `_stays_parked` reads
    moves one way only, towards staying (the working estate only loses capacity — what
    `settle` and `_fits` rest on —, reservations are only added and keep heads off more
    nodes, preemption tries are only spent); a shape that failed stays failed while the
    cycle's reservations are the same (they are only added: their number names them). On
    a busy estate hundreds of parked heads of a few groups come up every cycle."""
    parked = st.parked.get(item.id)
    if parked is None:
        return False
    group = (q.name, parked.group or parked.key())  # the queue it is routed to now: _stays_parked reads it
    if group in st.staying_groups or (group, len(st.reservations)) in st.failed_groups:
        return True
    if _stays_parked(cx, st, q, item):
        st.staying_groups.add(group)
        return True
    if _shape_failed(cx, st, q, item.spec):
        st.failed_groups.add((group, len(st.reservations)))
        return True
    return False


def _shape_failed(cx: CycleInputs, st: CycleState, q: QueueSpec, spec: TaskSpec) -> bool:
    if not st.failed_shapes:
        return False
    blocking = _blocking_ids(cx, st, spec)
    return f"{shape_key(spec, q, st.tenant_matters)}|{','.join(blocking)}" in st.failed_shapes


def _blocking_ids(cx: CycleInputs, st: CycleState, spec: TaskSpec) -> tuple[str, ...]:
    """This cycle's reservations `spec` must not delay, in the order cycle.nominate lists
    them: once per shape and estimate while the reservations are the same (they are only
    added within a cycle, so their number names them)."""
    if not st.reservations:
        return ()
    key = (spec.placement_shape, spec.runtime_estimate, len(st.reservations))
    blocking = st.blocking_of.get(key)
    if blocking is None:
        blocking = st.blocking_of[key] = tuple(r.task_id for r in st.reservations.values() if not may_use(cx, st, spec, r))
    return blocking


def _stays_parked(cx: CycleInputs, st: CycleState, q: QueueSpec, item: QueuedTask) -> bool:
    """Does a parked head stay passed over when its turn comes (parking.py)? Not when its
    queue's reservation is still free to take, nor when a node that other heads'
    reservations kept it off is no longer kept from it — unless it could only use that node
    alone (no preemption: it planned and found no work to evict, or has no try left) and no
    worker of it fits there now. Cheap questions first: this runs for every parked head a
    scan passes, thousands per cycle on a full estate."""
    parked = st.parked.get(item.id)
    if parked is None:
        return False
    if parked.never:
        return True  # fits no pool even idle and healthy: no capacity, try or node can change that
    tries_left = st.preemption_tries < cx.policy.max_preemption_tries
    if parked.deferred and (tries_left or (_fits_grown(cx, st, item.spec, parked) and _gang_fits(st, item.spec, parked))):
        return False  # its preemption was deferred: it plans now if a try is left, or may fit alone
    if not parked.deferred:
        if _grown_for(cx, st, item.spec, parked, tries_left):
            return False  # what grew since the previous cycle may place it (or complete a plan)
        if tries_left and st.park_counts.on(parked.pools, parked.rank) > parked.evictable:
            return False  # more work it could evict than when it was parked: it plans again
    if parked.reserves and q.name not in st.reservations:
        return False
    if not parked.excluded:
        return True
    # With work it could evict and a try to plan with, a freed node may complete a plan;
    # otherwise only a worker fitting there helps — and if none fits on any node it was kept
    # off, none fits on those freed.
    plans = parked.evictable and not parked.deferred and tries_left
    if not plans and not _fits_on_nodes(st, parked.excluded, parked):
        return True
    freed = parked.excluded - _kept_off_now(cx, st, item.spec)
    return not (freed and (plans or _fits_on_nodes(st, frozenset(freed), parked)))


def _kept_off_now(cx: CycleInputs, st: CycleState, spec: TaskSpec) -> frozenset[int]:
    """The nodes this cycle's reservations that `spec` must not delay hold: which ones, once
    per shape while the reservations stay the same; their nodes, once per such set (a
    reservation may hold hundreds of nodes, and thousands of parked heads ask)."""
    blocking = _blocking_ids(cx, st, spec)
    nodes = st.excluded_now.get(blocking)
    if nodes is None:
        by_name, ids = cx.snapshot.node_by_name, set(blocking)
        nodes = st.excluded_now[blocking] = frozenset(by_name[n] for r in st.reservations.values() if r.task_id in ids for n in r.nodes)
    return nodes


def settle(cx: CycleInputs, st: CycleState) -> None:
    """Once the cycle has no preemption try left and every queue with a parked head owed its
    reservation holds one, what still lets a parked head go at its turn only gets less
    likely as the cycle places work (still_parked: a worker fitting a grown row, or a node it
    was kept off): every parked head for which neither holds now never will this cycle, and
    is passed over in one step (QueueOrder.skip) rather than one at a time — on a full
    estate, tens of thousands a cycle."""
    if st.settled or st.preemption_tries < cx.policy.max_preemption_tries:
        return
    if any(name not in st.reservations for name in st.reserves_owed):
        return
    st.settled = True
    # Per what the answer depends on (Parked.wake_key), grouped as the parking opened: most
    # parked heads share it, so this asks a few hundred questions, not one per head.
    inert: set[str] = set()
    for sample, task_ids in st.wake_groups.values():
        if task_ids and not _may_wake(st, sample):
            inert |= task_ids
    st.order.skip(inert)


def _may_wake(st: CycleState, parked) -> bool:
    """Could a parked head still be let go this cycle, once no try is left and every owed
    reservation is held? Only by a worker fitting a row that grew, or a node it was kept off
    (upper bounds: capacity only shrinks from here)."""
    if parked.never:
        return False  # fits nowhere even idle: neither helps
    if (st.grown_pools is None or not st.grown_pools.isdisjoint(parked.pools)) and _fits(st, st.grown, parked, ("grown",)):
        return True
    return bool(parked.excluded) and _fits_on_nodes(st, parked.excluded, parked)


def _grown_for(cx: CycleInputs, st: CycleState, spec: TaskSpec, parked, tries_left: bool) -> bool:
    """Can what grew since the previous cycle change a parked head's wait, at its turn? A
    grown row that still holds one worker of it after what this cycle placed before it may
    place it; with work it could evict on its pools, any growth there may complete a plan,
    but only while the cycle has a preemption try to plan with."""
    if st.grown_pools is not None and st.grown_pools.isdisjoint(parked.pools):
        return False  # nothing grew where it could go (the common case: no numpy at all)
    if parked.evictable and tries_left:
        return True
    return _fits_grown(cx, st, spec, parked) and _gang_fits(st, spec, parked)


def _gang_fits(st: CycleState, spec: TaskSpec, parked) -> bool:
    """Could all workers of a gang be placed now, capacity alone? A worker fitting a row
    that grew is not enough for a gang (on the benchmark's estate most heads let go by
    growth were gangs that failed again). An upper bound: on the rows of the pools it could
    use, the workers each row could hold — one device model holds them all unless it may
    mix models (as assign places a gang) — must number at least its workers. A "no" holds
    for the rest of the cycle (capacity only shrinks between heads), as in `_fits`."""
    demand = parked.demand
    if spec.workers <= 1 or demand is None:
        return True
    devices = spec.per_worker.devices
    one_model = devices is not None and not devices.mix_models  # as assign partitions a gang
    key = ("gang", parked.pools, demand, spec.workers, one_model)
    if key in st.no_fit:
        return False
    rows = st.rows_on_pools.get(("all", parked.pools))
    if rows is None:
        rows = st.rows_on_pools[("all", parked.pools)] = rows_of_pools(st.working, np.arange(len(st.working.row_node)), parked.pools)
    if worker_slots(st.working, rows, demand, spec.workers, by_model=one_model) >= spec.workers:
        return True
    st.no_fit.add(key)
    return False


def _fits_grown(cx: CycleInputs, st: CycleState, spec: TaskSpec, parked) -> bool:
    # All grown rows first (a "no" is remembered per pools and demand, so most heads stop
    # here), then without the nodes of the reservations it must not delay.
    if not _fits(st, st.grown, parked, ("grown",)):
        return False
    rows, key = _grown_rows(cx, st, spec)
    return key == ("grown",) or _fits(st, rows, parked, key)


def _grown_rows(cx: CycleInputs, st: CycleState, spec: TaskSpec) -> tuple[np.ndarray | None, tuple]:
    """The rows that grew, less those on nodes held by this cycle's reservations that `spec`
    must not delay (capacity freed there is its reservation's; as cycle.nominate keeps the
    task off them), and the key of that set for `_fits`'s memo. On a full estate, what
    frees is mostly on reserved nodes: it would wake every head, to fail again."""
    if st.grown is None or not st.reservations:
        return st.grown, ("grown",)
    blocking = _blocking_ids(cx, st, spec)
    if not blocking:
        return st.grown, ("grown",)
    rows = st.grown_free_of.get(blocking)
    if rows is None:
        held = np.logical_or.reduce([st.reserved_masks[task_id] for task_id in blocking])
        rows = st.grown_free_of[blocking] = st.grown[~held[st.working.row_node[st.grown]]]
    return rows, ("grown", *blocking)


def _fits_on_nodes(st: CycleState, nodes: frozenset[int], parked) -> bool:
    """Could a worker of a parked head fit, alone, on one of `nodes` now?"""
    if parked.demand is None:
        return True
    if nodes not in st.rows_of_nodes:
        mask = np.zeros(len(st.working.node_names), dtype=bool)
        mask[list(nodes)] = True
        st.rows_of_nodes[nodes] = np.flatnonzero(mask[st.working.row_node])
    return _fits(st, st.rows_of_nodes[nodes], parked, nodes)


def _fits(st: CycleState, rows: np.ndarray | None, parked, rows_key=None) -> bool:
    """parking.fits_grown on the working snapshot, remembering a "no" for the rest of the
    cycle: between two heads the working estate only loses capacity (a head that takes and
    gives back within its own decision leaves it as it was), so what did not fit stays so."""
    key = (rows_key, parked.pools, parked.demand)
    if key in st.no_fit:
        return False
    if rows is None:
        return True  # no reference to compare with: anything may have grown
    on_pools = st.rows_on_pools.get((rows_key, parked.pools))
    if on_pools is None:  # the rows don't change within the cycle: once per set and pools
        on_pools = st.rows_on_pools[(rows_key, parked.pools)] = rows_of_pools(st.working, rows, parked.pools)
    if fits_on_rows(st.working, on_pools, parked.demand):
        return True
    st.no_fit.add(key)
    return False


def may_use(cx: CycleInputs, st: CycleState, spec: TaskSpec, reservation: Reservation) -> bool:
    """backfill.may_use_reserved, memoised: the slowest runtime once per shape and estimate
    (the costly part: a runtime per device model it could get), then one comparison per reservation."""
    key = (spec.placement_shape, spec.runtime_estimate)
    answer = st.may_use.get((key, reservation.task_id))
    if answer is None:
        if key not in st.slowest_runtime:
            st.slowest_runtime[key] = slowest_runtime_s(spec, cx.models)
        answer = st.may_use[(key, reservation.task_id)] = ends_before(st.slowest_runtime[key], reservation, cx.now)
    return answer
