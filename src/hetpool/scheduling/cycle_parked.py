"""Parked heads within a cycle (the parking itself: parking.py): whether a parked head stays
passed over when its turn comes, and the per-cycle memos that question shares with the
cycle (the pools a candidate could use, whether a task may use a reservation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetpool.core.policy import QueueSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.backfill import Reservation, ends_before, slowest_runtime_s
from hetpool.scheduling.cycle_state import Candidate, CycleInputs, CycleState, idle_key
from hetpool.scheduling.parking import fits_grown, usable_pools

if TYPE_CHECKING:
    from hetpool.scheduling.cycle import QueuedTask

__all__ = ["candidate_pools", "may_use", "still_parked"]


def candidate_pools(cx: CycleInputs, st: CycleState, cand: Candidate) -> frozenset[int]:
    """The pools a candidate could use at all (kept with the idle-estate results)."""
    key = idle_key(cand, "pools")
    if key not in st.idle_results:
        st.idle_results[key] = usable_pools(cx.snapshot, cand.spec, cx.compat_check, cand.kwargs["allowed_pools"])
    return st.idle_results[key]


def still_parked(cx: CycleInputs, st: CycleState, q: QueueSpec, item: QueuedTask) -> bool:
    """Does a parked head stay passed over when its turn comes (parking.py)? Not when its
    queue's reservation is still free to take, nor when a node that other heads'
    reservations kept it off is no longer kept from it — unless it could only use that node
    alone (no preemption: it planned and found no work to evict, or has no try left) and no
    worker of it fits there now. Cheap questions first: this runs for every parked head a
    scan passes, thousands per cycle on a full estate."""
    parked = st.parked.get(item.id)
    if parked is None:
        return False
    if parked.deferred and (st.preemption_tries < cx.policy.max_preemption_tries or _fits(st, st.grown, parked)):
        return False  # its preemption was deferred: it plans now if a try is left, or may fit alone
    if parked.reserves and q.name not in st.reservations:
        return False
    if not parked.excluded:
        return True
    # With work it could evict, a freed node may complete a plan; without, only a worker
    # fitting there helps — and if none fits on any node it was kept off, none fits on those freed.
    if not (parked.evictable and not parked.deferred) and not _fits_on_nodes(st, parked.excluded, parked):
        return True
    spec = item.spec
    key = (spec.placement_shape, spec.runtime_estimate, tuple(st.reservations))
    if key not in st.excluded_now:  # once per shape while the cycle's reservations stay the same
        nodes = cx.snapshot.node_by_name
        st.excluded_now[key] = {nodes[n] for r in st.reservations.values() if not may_use(cx, st, spec, r) for n in r.nodes}
    freed = parked.excluded - st.excluded_now[key]
    return not (freed and ((parked.evictable and not parked.deferred) or _fits_on_nodes(st, frozenset(freed), parked)))


def _fits_on_nodes(st: CycleState, nodes: frozenset[int], parked) -> bool:
    """Could a worker of a parked head fit, alone, on one of `nodes` now?"""
    if parked.demand is None:
        return True
    if nodes not in st.rows_of_nodes:
        st.rows_of_nodes[nodes] = np.flatnonzero(np.isin(st.working.row_node, list(nodes)))
    return _fits(st, st.rows_of_nodes[nodes], parked, nodes)


def _fits(st: CycleState, rows: np.ndarray | None, parked, rows_key=None) -> bool:
    """parking.fits_grown on the working snapshot, remembering a "no" for the rest of the
    cycle: between two heads the working estate only loses capacity (a head that takes and
    gives back within its own decision leaves it as it was), so what did not fit stays so."""
    key = (rows_key, parked.pools, parked.demand)
    if key in st.no_fit:
        return False
    if fits_grown(st.working, rows, parked.pools, parked.demand):
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
