"""Choosing running tasks to evict so that a higher-priority task fits (after Kueue).

A pure function over a snapshot: nothing is evicted here. The caller gets a plan (the
victims, in eviction order, and where the preemptor lands once they are gone) and acts
on it. Candidates are released one at a time on a scratch copy until the task fits,
then each chosen victim is tried back in reverse order and dropped from the plan when
the task still fits without evicting it, so the set returned is minimal: evicting any
one fewer victim would not make room. Both passes call `assign` at most once per
candidate, so a few hundred running tasks cost a few hundred placements, not n².
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hetpool.core.tasks import Priority, TaskSpec
from hetpool.scheduling.assign import Assignment, assign, candidate_groups
from hetpool.scheduling.filters import CompatCheck, class_matches, pool_verdict
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, Snapshot
from hetpool.scheduling.victim_arrays import Releases, RunningArrays


@dataclass
class PreemptionPlan:
    victims: list[RunningTask]  # the smallest set found, in eviction order
    assignment: Assignment  # where the preemptor lands once they are gone
    reason: str  # e.g. "preempted by t-123 (priority high) to free 8 nvidia-a100-80g on gpu-a01"


def find_victims(
    snap: Snapshot,
    task: TaskSpec,
    task_priority_rank: int,
    running: list[RunningTask],
    compat_check: CompatCheck,
    *,
    allowed: Callable[[RunningTask], bool] = lambda r: True,
    preemptor_id: str = "",
    reclaimable: set[str] | frozenset[str] = frozenset(),
    arrays: RunningArrays | None = None,
    **assign_kwargs,
) -> PreemptionPlan | None:
    """The fewest running tasks to evict so that `task` fits, or None if no set helps.

    Candidates are preemptible, of strictly lower priority (or in `reclaimable`: evicted
    first), accepted by `allowed` (the caller's policy) and hold capacity on a node the
    task could use. They are evicted lowest priority first, then most recently started
    (least work lost), then smallest. `snap` is not changed. If the task already fits,
    the plan has no victims (the caller can simply admit it). `arrays`: `running` as
    victim_arrays.RunningArrays, when the caller keeps them for many plans (a cycle does).
    """
    usable = _usable_node_mask(snap, task, compat_check, assign_kwargs.get("allowed_pools"))
    # `reclaimable`: ids of work borrowing the preemptor's quota, evictable whatever its
    # priority and evicted first.
    arrays = arrays if arrays is not None else RunningArrays(snap, running)
    positions = [int(i) for i in arrays.candidates(usable, task_priority_rank, reclaimable) if allowed(arrays.tasks[i])]
    positions.sort(key=lambda i: (arrays.tasks[i].id not in reclaimable, arrays.order_key(i)))
    candidates = [arrays.tasks[i] for i in positions]
    releases = arrays.releases(positions)

    result = assign(snap, task, compat_check, explain=False, **assign_kwargs)
    if result.feasible:
        return PreemptionPlan(victims=[], assignment=result, reason=f"{_who(task, preemptor_id)} fits without preemption")

    # One placement with every candidate gone rejects hopeless cases (an incompatible
    # framework, a gang larger than the pools) before paying for the incremental pass.
    if not candidates or not assign(releases.released(snap, len(candidates)), task, compat_check, explain=False, **assign_kwargs).feasible:
        return None

    chosen = candidates[: _shortest_prefix(snap, task, releases, len(candidates), compat_check, assign_kwargs)]
    scratch = releases.released(snap, len(chosen))

    # Minimise. The last victim is always needed: without it the task did not fit a
    # moment ago. Every earlier one is put back in turn and stays back if the task
    # still fits, so a cheap early victim that the later, bigger ones made redundant
    # (e.g. one on another node) is spared.
    # `fit` is a placement valid on `scratch` as it stands: a victim that holds nothing on its
    # nodes is put back without asking for a placement (it still fits there) — on a busy
    # estate most chosen victims are small ones elsewhere, and each placement costs ~1 ms.
    needed, fit = [chosen[-1]], assign(scratch, task, compat_check, explain=False, **assign_kwargs)
    for victim in reversed(chosen[:-1]):
        _take(scratch, victim)
        if fit.feasible and not _on_nodes_of(victim, fit):
            continue
        placed = assign(scratch, task, compat_check, explain=False, **assign_kwargs)
        if placed.feasible:
            fit = placed
        else:
            _release(scratch, victim)
            needed.append(victim)
    kept = {id(v) for v in needed}
    victims = [v for v in chosen if id(v) in kept]  # keep eviction order

    # `scratch` now holds exactly the final victims released; place on it for the plan
    # (`fit` still holds there, should the search not find it again).
    final = assign(scratch, task, compat_check, explain=False, **assign_kwargs)
    final = final if final.feasible or not fit.feasible else fit
    reason = _reason(snap, task, task_priority_rank, victims, preemptor_id)
    if any(v.id in reclaimable for v in victims):
        reason = f"quota reclaimed by {task.tenant}: " + reason
    return PreemptionPlan(victims=victims, assignment=final, reason=reason)


def _shortest_prefix(snap: Snapshot, task: TaskSpec, releases: Releases, count: int, compat_check: CompatCheck, assign_kwargs: dict) -> int:
    """The length of the shortest prefix of the candidates (in eviction order) whose release
    lets `task` fit, given that all `count` do. Binary search: releasing more only frees
    more, so fitting is monotone in the prefix length — log2(n) placements instead of n (a
    busy estate offers hundreds of candidates)."""
    lo, hi = 1, count  # hi: known to fit
    while lo < hi:
        mid = (lo + hi) // 2
        if assign(releases.released(snap, mid), task, compat_check, explain=False, **assign_kwargs).feasible:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _usable_node_mask(snap: Snapshot, task: TaskSpec, compat_check: CompatCheck, allowed_pools: set[str] | None = None) -> np.ndarray:
    """Per node: has it a row in a pool the task could run on at all (capacity aside)?

    Mirrors assign's pool-level filtering. Nodes rather than pools: CPU and host memory
    belong to the node, so a victim on another pool of the same node can still free
    what the task lacks; the minimisation pass drops such victims when they do not help.
    """
    demand = task.per_worker.devices
    device_class = demand.device_class if demand is not None else None
    use_class = not (task.fallback or task.any_of or (demand is not None and demand.models))
    usable = np.zeros(len(snap.node_names), dtype=np.float64)  # 0/1, as bincount weights
    for group in candidate_groups(snap, task):
        for index in group.pools:
            pool = snap.pools[index]
            if use_class and not class_matches(pool, device_class):
                continue
            if allowed_pools is not None and pool.name not in allowed_pools and pool.model.name not in allowed_pools:
                continue  # outside the task's queue: evicting there can never help
            if not pool_verdict(pool, task, compat_check).ok:
                continue
            usable[snap.row_node[np.asarray(pool.rows, dtype=np.int64)]] = 1.0
    return usable


def _devices(a: Allocation) -> float:
    return len(a.device_indices) * a.device_fraction


def _apply(snap: Snapshot, victim: RunningTask, sign: float) -> None:
    """Take (sign 1) or release (sign -1) a victim's allocations on `snap`."""
    for a in victim.allocations:
        row = snap.row_of(a.node, a.pool)
        if row is None:
            # Pool gone from the inventory: build_snapshot still charged the node's CPU
            # and memory, so do the same here to stay consistent with it.
            n = snap.node_by_name.get(a.node)
            if n is not None:
                snap.free_cpu[n] -= sign * a.cpu
                snap.free_mem[n] -= sign * a.memory_gb
            continue
        snap.take(row, a.device_indices, sign * a.device_fraction, sign * a.cpu, sign * a.memory_gb)


def _on_nodes_of(victim: RunningTask, placed: Assignment) -> bool:
    nodes = {p.node for p in placed.placements}
    return any(a.node in nodes for a in victim.allocations)


def _release(snap: Snapshot, victim: RunningTask) -> None:
    _apply(snap, victim, -1.0)


def _take(snap: Snapshot, victim: RunningTask) -> None:
    _apply(snap, victim, 1.0)


def _who(task: TaskSpec, preemptor_id: str) -> str:
    return preemptor_id or task.name


def _priority_label(rank: int) -> str:
    return next((p.value for p in Priority if p.rank == rank), f"rank {rank}")


def _reason(snap: Snapshot, task: TaskSpec, rank: int, victims: list[RunningTask], preemptor_id: str) -> str:
    """'preempted by t-1 (priority high) to free 8 nvidia-a100-80g on gpu-a01, ...'."""
    freed: dict[tuple[str, str], float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    for victim in victims:
        for a in victim.allocations:
            pool_index = snap.pool_by_name.get(a.pool)
            if a.device_indices and pool_index is not None:
                freed[(snap.pools[pool_index].model.name, a.node)] += _devices(a)
            else:
                cpu[a.node] += a.cpu
    parts = [f"{count:g} {model} on {node}" for (model, node), count in freed.items()]
    parts += [f"{cores:g} CPU on {node}" for node, cores in cpu.items() if not any(n == node for _, n in freed)]
    what = ", ".join(parts) or "capacity"
    return f"preempted by {_who(task, preemptor_id)} (priority {_priority_label(rank)}) to free {what}"
