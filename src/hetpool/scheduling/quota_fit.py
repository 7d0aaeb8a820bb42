"""Whether a task could ever be admitted within its quotas, whatever else runs.

A task is refused at submit (and never reserves, waits with an ETA or preempts in the
cycle) when *every* placement it could have on the idle estate is above one of its
quotas even with the most borrowing its cohort allows: nominal + min(borrowing limit,
what its siblings could lend were they all idle). Quotas are per device model, pool or
class, so the verdict depends on where the task lands: a task that may use an A100 or an
H800 is only refused when both exceed.

The placements tried are those `assign` would choose on the idle snapshot for each of
the task's candidate groups alone, and for each pool of a multi-pool group alone (a
class or `any_of` group charged to per-model quotas may fit under one model's quota and
not another's). A gang mixing models across pools is only tried as `assign` places it
(a mixed placement `assign` would not choose is not tried).

Pure: the caller passes the quota book (anything with `ceiling`) and an idle snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator

from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import Assignment, assign, candidate_groups
from hetpool.scheduling.filters import CompatCheck
from hetpool.scheduling.quota_view import Held, QuotaCeiling, QuotaLedger
from hetpool.scheduling.snapshot import Snapshot


def never_within_quota(quota: QuotaLedger | None, idle: Snapshot, spec: TaskSpec, compat_check: CompatCheck, **assign_kwargs) -> QuotaCeiling | None:
    """The quota `spec` exceeds even with borrowing on every placement it could have on
    the `idle` estate (that of its most preferred placement), or None: some placement
    fits under its quotas' ceilings, no quota applies, or it fits nowhere at all (a
    different refusal: "cannot run on any pool, even when idle")."""
    if not quota:
        return None
    first: QuotaCeiling | None = None
    for result in _idle_placements(idle, spec, compat_check, assign_kwargs):
        ceiling = quota.ceiling(spec, held_on(result))
        if ceiling is None:
            return None
        first = first or ceiling
    return first


def held_on(result: Assignment) -> list[Held]:
    """What a placement would hold, as the quota book charges it."""
    return [Held(p.pool, p.model, len(p.device_indices) * p.device_fraction, p.cpu, p.memory_gb) for p in result.placements]


def _idle_placements(idle: Snapshot, spec: TaskSpec, compat_check: CompatCheck, assign_kwargs: dict) -> Iterator[Assignment]:
    """Feasible placements on `idle`: each candidate group alone, then each pool of a
    group with several pools alone (preferred groups first)."""
    allowed = assign_kwargs.pop("allowed_pools", None)
    tried: set[frozenset[str]] = set()
    groups = [[idle.pools[i] for i in group.pools] for group in candidate_groups(idle, spec) if not group.unknown]
    subsets = list(groups) + [[pool] for group in groups if len(group) > 1 for pool in group]
    for pools in subsets:
        names = frozenset(p.name for p in pools if allowed is None or p.name in allowed or p.model.name in allowed)
        if not names or names in tried:
            continue
        tried.add(names)
        result = assign(idle, spec, compat_check, allowed_pools=set(names), **assign_kwargs)
        if result.feasible:
            yield result
