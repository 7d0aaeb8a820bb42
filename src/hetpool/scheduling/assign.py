"""Placement of one task on a snapshot: candidate groups, ordered fallback, gang, scoring.

A task's acceptable devices form *groups* tried in order: the preferred devices first
(`per_worker.devices.models` or the device class), then each `fallback:` entry in the
user's order. `any_of:` entries form one group and the scorer picks among them. Every
group tried is recorded as an `Attempt` with its outcome and reasons, so a pending task
can always say why. A task with a deadline may have the pools that meet it tried first
(`deadline_first`; which pools, scheduling/deadlines.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from hetpool.core.inventory import TaskType
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.filters import (
    REASON_CLASS,
    REASON_DEVICES,
    REASON_DEVICES_TOTAL,
    REASON_EXCLUDED,
    REASON_FEATURES,
    REASON_GANG,
    REASON_QUEUE_POOLS,
    REASON_RESERVED_NODE,
    REASON_TOPOLOGY,
    CompatCheck,
    class_matches,
    pool_verdict,
    reasons_per_row,
    rows_lacking_features,
    slice_fraction,
    workers_fit,
)
from hetpool.scheduling.snapshot import PoolView, Snapshot

REASON_UNKNOWN_CANDIDATE = "unknown device model or pool"
REASON_NO_POOLS = "no pool offers the requested devices"
REASON_ACROSS_MODELS = "the gang fits only across device models (mix_models is off)"
SPREAD_TYPES = {TaskType.INFERENCE}


@dataclass(frozen=True)
class WorkerPlacement:
    rank: int
    node: str
    pool: str
    model: str
    device_indices: tuple[int, ...]
    device_fraction: float
    cpu: float
    memory_gb: float
    price_per_hour: float  # for this worker's devices

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "node": self.node,
            "pool": self.pool,
            "model": self.model,
            "devices": list(self.device_indices),
            "device_fraction": self.device_fraction,
            "cpu": self.cpu,
            "memory_gb": self.memory_gb,
        }


@dataclass
class Attempt:
    """One candidate group tried for a task, and what happened."""

    label: str
    pools: list[str]
    outcome: str  # "fit" | "no-fit" | "skipped"
    workers_fit: int = 0
    reasons: Counter = field(default_factory=Counter)
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "candidate": self.label,
            "pools": self.pools,
            "outcome": self.outcome,
            "workers_fit": self.workers_fit,
            "reasons": dict(self.reasons),
            "details": self.details[:10],
        }


@dataclass
class Assignment:
    feasible: bool
    placements: list[WorkerPlacement]
    fallback_used: bool
    attempts: list[Attempt]
    chosen: str | None = None
    for_deadline: bool = False  # the deadline step chose it over the usual order (deadline_first)

    @property
    def reasons(self) -> Counter:
        total: Counter = Counter()
        for attempt in self.attempts:
            total.update(attempt.reasons)
        return total


@dataclass
class _Group:
    label: str
    pools: list[int]
    unknown: bool = False
    rank: int = 0  # which of the task's choices it comes from; > 0: a fallback (or any_of after models)
    for_deadline: bool = False  # put ahead of the usual order, or narrowed, by the deadline step


def one_model_gang(task: TaskSpec) -> bool:
    """A gang (several workers) on devices stays on one device model unless the task
    says `mix_models`: workers of one DDP job run at the speed of the slowest device."""
    demand = task.per_worker.devices
    return demand is not None and task.workers > 1 and not demand.mix_models


def candidate_groups(snap: Snapshot, task: TaskSpec) -> list[_Group]:
    """The groups for this task's device choices (memoised per snapshot: many tasks share them)."""
    demand = task.per_worker.devices
    key: tuple = (
        demand.device_class if demand else None,
        tuple(demand.models) if demand else (),
        tuple(task.any_of),
        tuple(task.fallback),
    )
    homogeneous = one_model_gang(task)
    if homogeneous:
        # The per-model order depends on the task type and the task's own speed figures.
        key += (task.task_type, tuple(sorted(task.relative_performance.items())))
    cache = snap.group_cache
    if key not in cache:
        groups = _candidate_groups(snap, task)
        cache[key] = _one_model_each(snap, task, groups) if homogeneous else groups
    return cache[key]


def _candidate_groups(snap: Snapshot, task: TaskSpec) -> list[_Group]:
    demand = task.per_worker.devices
    device_class = demand.device_class if demand is not None else None
    groups: list[_Group] = []

    def pools_for(entry: str) -> list[int]:
        return [p.index for p in snap.pools if p.name == entry or p.model.name == entry]

    if demand is not None and demand.models:
        idx = sorted({i for m in demand.models for i in pools_for(m)})
        groups.append(_Group(",".join(demand.models), idx, unknown=not idx))
    if task.any_of:
        idx = sorted({i for e in task.any_of for i in pools_for(e)})
        groups.append(_Group("any_of: " + ",".join(task.any_of), idx, unknown=not idx, rank=len(groups)))
    elif task.fallback:
        for entry in task.fallback:
            if demand is not None and entry in demand.models:
                continue
            idx = pools_for(entry)
            groups.append(_Group(entry, idx, unknown=not idx, rank=len(groups)))
    if not groups:
        if device_class is None:
            groups.append(_Group("any node", [p.index for p in snap.pools]))
        else:
            groups.append(_Group(f"class {device_class.value}", [p.index for p in snap.pools if p.model.device_class == device_class]))
    return groups


def _one_model_each(snap: Snapshot, task: TaskSpec, groups: list[_Group]) -> list[_Group]:
    """Each group spanning several device models becomes one group per model, tried
    fastest first for the task (its own relative_performance, else the catalog's figure
    for its type; as scheduling/estimate.perf_of), then by name."""
    out: list[_Group] = []
    for group in groups:
        by_model: dict[str, list[int]] = {}
        for index in group.pools:
            by_model.setdefault(snap.pools[index].model.name, []).append(index)
        if len(by_model) < 2:
            out.append(group)
            continue
        models = {name: snap.pools[indices[0]].model for name, indices in by_model.items()}
        speed = {name: task.relative_performance.get(name) or model.perf_for(task.task_type) for name, model in models.items()}
        for name in sorted(by_model, key=lambda n: (-speed[n], n)):
            out.append(_Group(f"{group.label}: {name}", by_model[name], rank=group.rank))
    return out


def deadline_first(groups: list[_Group], meets: frozenset[int]) -> list[_Group]:
    """The deadline step: the pools that meet the task's deadline (`meets`) first, each
    choice in the usual order, then the others in that order. A choice split in two is
    labelled by its part; a part tried ahead of a pool the usual order would try earlier
    (or narrowed within its choice) is `for_deadline`."""
    first: list[_Group] = []
    rest: list[_Group] = []
    for group in groups:
        hit = [i for i in group.pools if i in meets]
        miss = [i for i in group.pools if i not in meets]
        if hit:
            label = f"{group.label} (meets deadline)" if miss else group.label
            first.append(_Group(label, hit, rank=group.rank, for_deadline=bool(miss) or any(g.pools for g in rest)))
        if miss or not hit:
            rest.append(_Group(f"{group.label} (misses deadline)" if hit else group.label, miss, unknown=group.unknown, rank=group.rank))
    return first + rest


def spreads(task: TaskSpec, placement: str) -> bool:
    """Placement rule: a class policy may force pack or spread; auto: inference spreads."""
    if placement == "auto":
        return task.task_type in SPREAD_TYPES
    return placement == "spread"


def _row_scores(snap: Snapshot, rows: np.ndarray, task: TaskSpec, spread: bool, subset: np.ndarray | None = None) -> np.ndarray:
    """Higher is better. Training packs, inference spreads; locality, price, performance.

    With `subset`, only those positions of `rows` are scored (normalised over all rows).
    """
    picked = rows if subset is None else rows[subset]
    free = snap.whole_free()[picked].astype(np.float64)
    total = np.maximum(snap.device_totals()[picked].astype(np.float64), 1.0)
    score = np.zeros(len(picked))
    if task.per_worker.devices is not None:
        if spread:
            score += free / total  # emptiest nodes first: replicas land apart
        else:
            score += 1.0 - free / total  # fullest nodes first: keep whole nodes free
        perf_all = snap.row_perf(task.task_type)
        if task.relative_performance:
            perf_all = snap.row_perf_with(task.task_type, task.relative_performance)
        score += 0.5 * perf_all[picked] / max(perf_all[rows].max(), 1e-9)
    else:
        # Device-less work belongs on CPU pools; accelerators stay free for what needs them.
        score += 2.0 * snap.row_is_cpu[picked]
    if task.data is not None and task.data.zone:
        score += 1.0 * (snap.node_zone_array[snap.row_node[picked]] == task.data.zone)
    price_max = snap.row_price[rows].max()
    if price_max > 0:
        score -= 0.3 * snap.row_price[picked] / price_max
    return score


def _rescore(base: np.ndarray, snap: Snapshot, rows: np.ndarray, changed: np.ndarray, task: TaskSpec, spread: bool) -> np.ndarray:
    """Scores with only the `changed` rows recomputed (the rest of the estate did not move).

    Normalisations (max performance, max price) are per candidate set, so recomputing a
    subset against the whole set's maxima keeps the scores comparable.
    """
    out = base.copy()
    out[changed] = _row_scores(snap, rows, task, spread, subset=changed)
    return out


def _pick_devices(snap: Snapshot, row: int, count: float, fraction: float | None, island: bool) -> tuple[tuple[int, ...], float]:
    free = snap.dev_free[row]
    if fraction is None:
        idle = np.flatnonzero(free >= 1.0 - 1e-9)
        if island:
            # The island with the fewest idle devices that still fits: keep big islands whole.
            islands = snap.row_islands[row][idle]
            options = [(int((islands == i).sum()), i) for i in np.unique(islands) if (islands == i).sum() >= count]
            _, best = min(options)
            idle = idle[islands == best]
        return tuple(int(i) for i in idle[: int(count)]), 1.0
    # A slice: the fullest device that still has room, to keep other devices whole.
    ok = np.flatnonzero(free >= fraction - 1e-9)
    best = ok[np.argmin(free[ok])]
    return (int(best),), float(fraction)


def _place_group(
    snap: Snapshot, task: TaskSpec, rows: np.ndarray, fractions: np.ndarray | None, spread: bool, fit: np.ndarray, commit: bool = False
) -> list[WorkerPlacement] | None:
    """Place all workers on `rows`, or None (gang: all or nothing).

    Workers are placed one by one on `snap` so that later workers see what earlier ones
    took, then every take is undone — `snap` is unchanged on return (an undo log is far
    cheaper than copying the snapshot for each attempt) — unless `commit` asks to keep a
    successful placement.
    """
    taken: list[tuple[int, tuple[int, ...], float]] = []
    placements = None
    try:
        placements = _place_workers(snap, task, rows, taken, fractions, spread, fit)
        return placements
    finally:
        if not (commit and placements is not None):
            for row, indices, fraction in reversed(taken):
                snap.release(row, indices, fraction, task.per_worker.cpu, task.per_worker.memory_gb)


def _fast_order(snap: Snapshot, task: TaskSpec, rows: np.ndarray, spread: bool, fit: np.ndarray) -> list[int] | None:
    """Rows for each worker in one pass, for the common case (whole devices, one row per
    node, no islands): pack fills the best row before the next; spread puts one worker
    per node in score order, then goes round again. None when the gang does not fit."""
    if int(fit.sum()) < task.workers:
        return None
    score = _row_scores(snap, rows, task, spread)
    candidates = np.flatnonzero(fit > 0)
    if len(candidates) > 4 * task.workers:
        # Only the best few rows can be used: partial selection, then sort just those.
        top = np.argpartition(-score[candidates], 4 * task.workers)[: 4 * task.workers]
        candidates = candidates[top]
    order = candidates[np.argsort(-score[candidates], kind="stable")]
    chosen: list[int] = []
    if spread:
        remaining = fit.copy()
        while len(chosen) < task.workers:
            for i in order:
                if remaining[i] > 0 and len(chosen) < task.workers:
                    chosen.append(int(i))
                    remaining[i] -= 1
    else:
        for i in order:
            chosen.extend([int(i)] * min(int(fit[i]), task.workers - len(chosen)))
            if len(chosen) == task.workers:
                break
    return chosen


def _place_workers(
    snap: Snapshot, task: TaskSpec, rows: np.ndarray, taken: list, fractions: np.ndarray | None, spread: bool, fit: np.ndarray
) -> list[WorkerPlacement] | None:
    island = bool(task.topology and task.topology.device_island)
    simple = fractions is None and not island and (snap.one_row_per_node or len(np.unique(snap.row_node[rows])) == len(rows))
    if simple:
        order = _fast_order(snap, task, rows, spread, fit)
        if order is None:
            return None
        return [_place_one(snap, task, rank, int(rows[i]), None, taken) for rank, i in enumerate(order)]
    return _place_one_by_one(snap, task, rows, taken, fractions, spread)


def _place_one(snap: Snapshot, task: TaskSpec, rank: int, row: int, row_fraction: float | None, taken: list) -> WorkerPlacement:
    demand = task.per_worker.devices
    island = bool(task.topology and task.topology.device_island)
    pool = snap.pools[int(snap.row_pool[row])]
    if demand is not None:
        indices, fraction = _pick_devices(snap, row, demand.count, row_fraction, island)
    else:
        indices, fraction = (), 0.0
    snap.take(row, indices, fraction, task.per_worker.cpu, task.per_worker.memory_gb)
    taken.append((row, indices, fraction))
    return WorkerPlacement(
        rank=rank,
        node=snap.node_names[int(snap.row_node[row])],
        pool=pool.name,
        model=pool.model.name,
        device_indices=indices,
        device_fraction=fraction,
        cpu=task.per_worker.cpu,
        memory_gb=task.per_worker.memory_gb,
        price_per_hour=len(indices) * fraction * pool.spec.price_per_hour,
    )


def _place_one_by_one(
    snap: Snapshot, task: TaskSpec, rows: np.ndarray, taken: list, fractions: np.ndarray | None, spread: bool
) -> list[WorkerPlacement] | None:
    """General case (slices, islands, several pools on a node): re-check after each worker."""
    placements: list[WorkerPlacement] = []
    used_nodes = np.zeros(len(snap.node_names), dtype=np.float64)
    nodes = snap.row_node[rows]
    fit = workers_fit(snap, rows, task, fractions)
    base = _row_scores(snap, rows, task, spread)
    for rank in range(task.workers):
        ok = fit > 0
        if not ok.any():
            return None
        score = base
        usage = used_nodes[nodes]
        # Spread: penalise nodes this task already uses; pack: reward them (keep workers close).
        score = score - 10.0 * usage if spread else score + 0.2 * np.minimum(usage, 1)
        score = np.where(ok, score, -np.inf)
        i = int(np.argmax(score))
        row = int(rows[i])
        placements.append(_place_one(snap, task, rank, row, None if fractions is None else float(fractions[i]), taken))
        used_nodes[snap.row_node[row]] += 1
        # Only rows on the node just used changed (CPU and memory are per node).
        same_node = np.flatnonzero(nodes == snap.row_node[row])
        fit[same_node] = workers_fit(snap, rows[same_node], task, None if fractions is None else fractions[same_node])
        base = _row_scores(snap, rows, task, spread) if len(same_node) == len(rows) else _rescore(base, snap, rows, same_node, task, spread)
    return placements


def _partitions(snap: Snapshot, rows: np.ndarray, same: str) -> list[np.ndarray]:
    """Rows split by the topology key all workers must share ('none': one partition)."""
    if same == "none":
        return [rows]
    nodes = snap.row_node[rows]
    if same == "node":
        keys = nodes
    elif same == "zone":
        keys = snap.node_zone_array[nodes]
    else:
        keys = snap.node_group_index[nodes]  # its network group, or the node alone
    parts = [rows[keys == key] for key in dict.fromkeys(keys.tolist())]
    # Most free devices first: the likeliest to hold the whole gang.
    return sorted(parts, key=lambda part: -int(snap.whole_free()[part].sum()))


@dataclass
class _Limits:
    """What the task's request and the caller rule out, worked out once per assign()."""

    use_class: bool  # no named candidates: any pool of the device class
    allowed_pools: set[str] | None
    excluded: np.ndarray  # per node: excluded by the task
    held: np.ndarray  # per node: reserved for a blocked queue head
    any_excluded: bool
    whole_demand: bool  # whole devices only: a pool's idle count can rule it out


def _limits(snap: Snapshot, task: TaskSpec, allowed_pools: set[str] | None, reserved_nodes: np.ndarray | None) -> _Limits:
    demand = task.per_worker.devices
    excluded = np.zeros(len(snap.node_names), dtype=bool)
    for name in task.exclude_nodes:
        if name in snap.node_by_name:
            excluded[snap.node_by_name[name]] = True
    held = reserved_nodes if reserved_nodes is not None else np.zeros(len(snap.node_names), dtype=bool)
    return _Limits(
        use_class=not (task.fallback or task.any_of or (demand is not None and demand.models)),
        allowed_pools=allowed_pools,
        excluded=excluded,
        held=held,
        any_excluded=bool(excluded.any()) or bool(held.any()),
        whole_demand=demand is not None and demand.count >= 1 and not (demand.memory_gb or demand.cores_percent),
    )


def _usable_rows(snap: Snapshot, pool: PoolView, task: TaskSpec, compat_check: CompatCheck, limits: _Limits, attempt: Attempt) -> np.ndarray | None:
    """The pool's rows the task may use, counting why the others may not; None: none of them."""
    demand = task.per_worker.devices
    if limits.use_class and not class_matches(pool, demand.device_class if demand is not None else None):
        attempt.reasons[REASON_CLASS] += len(pool.rows)
        return None
    allowed_pools = limits.allowed_pools
    if allowed_pools is not None and pool.name not in allowed_pools and pool.model.name not in allowed_pools:
        attempt.reasons[REASON_QUEUE_POOLS] += len(pool.rows)
        return None
    verdict = pool_verdict(pool, task, compat_check)
    if not verdict.ok:
        attempt.reasons[verdict.reason] += max(len(pool.rows), 1)
        attempt.details.append(f"{pool.name}: {verdict.detail}")
        return None
    pool_rows = pool.row_array
    if task.features:
        lacking = rows_lacking_features(snap, pool, pool_rows, task)
        if lacking.any():
            attempt.reasons[REASON_FEATURES] += int(lacking.sum())
            pool_rows = pool_rows[~lacking]
    if limits.whole_demand and snap.pool_free_whole[pool.index] < demand.count:
        # A full pool: skip its rows without looking (the common case on a busy estate).
        too_small = int((snap.device_totals()[pool_rows] < demand.count).sum())
        for reason, count in ((REASON_DEVICES_TOTAL, too_small), (REASON_DEVICES, len(pool_rows) - too_small)):
            if count:
                attempt.reasons[reason] += count
        return None
    if limits.any_excluded:
        excluded, held = limits.excluded, limits.held
        row_nodes = snap.row_node[pool_rows]
        for mask, reason in ((excluded, REASON_EXCLUDED), (held & ~excluded, REASON_RESERVED_NODE)):
            hits = int(mask[row_nodes].sum())
            if hits:
                attempt.reasons[reason] += hits
        pool_rows = pool_rows[~(excluded | held)[row_nodes]]
    return pool_rows


def assign(
    snap: Snapshot,
    task: TaskSpec,
    compat_check: CompatCheck,
    *,
    allowed_pools: set[str] | None = None,
    placement: str = "auto",
    reserved_nodes: np.ndarray | None = None,
    commit: bool = False,
    deadline_pools: frozenset[int] | None = None,
    explain: bool = True,
) -> Assignment:
    """Try each candidate group in order on `snap`; the first that fits wins.

    `allowed_pools` limits the pools (by pool or model name) to those of the task's
    queue; `placement` is the device class's rule (auto / pack / spread). `snap` is
    not changed; the caller applies the placements it accepts. `reserved_nodes` (a
    boolean mask over nodes) keeps the task off nodes held for a blocked queue head.
    With `commit`, a successful placement stays taken on `snap` (the cycle's working
    snapshot), saving the caller from taking it again. `deadline_pools`: the pools that
    meet the task's deadline, tried first (`deadline_first`). Without `explain`, a no-fit
    carries its attempts but not why each failed (per-row reasons cost more than the
    placement itself; callers that only ask whether, or where, a task fits skip them).
    """
    demand = task.per_worker.devices
    spread = spreads(task, placement)
    same = task.topology.same if task.topology else "none"
    limits = _limits(snap, task, allowed_pools, reserved_nodes)
    attempts: list[Attempt] = []
    groups = candidate_groups(snap, task)
    if deadline_pools:
        groups = deadline_first(groups, deadline_pools)
    for group in groups:
        pools = [snap.pools[i] for i in group.pools]
        attempt = Attempt(label=group.label, pools=[p.name for p in pools], outcome="no-fit")
        attempts.append(attempt)
        if group.unknown or not pools:
            reason = REASON_UNKNOWN_CANDIDATE if group.unknown else REASON_NO_POOLS
            attempt.reasons[reason] += 1
            attempt.details.append(f"{group.label}: {reason}")
            continue
        row_parts: list[np.ndarray] = []
        fraction_parts: list[np.ndarray] = []
        for pool in pools:
            pool_rows = _usable_rows(snap, pool, task, compat_check, limits, attempt)
            if pool_rows is not None:
                row_parts.append(pool_rows)
                fraction_parts.append((len(pool_rows), slice_fraction(pool, task)))
        row_arr = np.concatenate(row_parts) if len(row_parts) > 1 else (row_parts[0] if row_parts else np.zeros(0, dtype=np.int64))
        if not len(row_arr):
            continue
        sliced = demand is not None and any(f < 1 for _, f in fraction_parts)
        fractions = np.concatenate([np.full(n, f) for n, f in fraction_parts]) if sliced else None
        fit = workers_fit(snap, row_arr, task, fractions)
        attempt.workers_fit = int(fit.sum())
        if attempt.workers_fit >= task.workers:
            placements = _place_in_a_part(snap, task, row_arr, fractions, fit, same, spread, commit)
            if placements is not None:
                attempt.outcome = "fit"
                return Assignment(True, placements, group.rank > 0, attempts, chosen=group.label, for_deadline=group.for_deadline)
        if explain:
            _explain_no_fit(snap, task, row_arr, fractions, same, attempt)
    if explain and one_model_gang(task):
        _note_fit_across_models(task, groups, attempts)
    return Assignment(feasible=False, placements=[], fallback_used=False, attempts=attempts)


def _note_fit_across_models(task: TaskSpec, groups: list[_Group], attempts: list[Attempt]) -> None:
    """A gang that would fit if its workers could mix device models says so, on the last
    model tried of that choice: the user then knows `mix_models` is the way out."""
    fit: Counter = Counter()
    models: Counter = Counter()
    last: dict[int, Attempt] = {}
    for group, attempt in zip(groups, attempts, strict=False):  # one attempt per group tried
        fit[group.rank] += attempt.workers_fit
        models[group.rank] += 1
        last[group.rank] = attempt
    for rank, attempt in last.items():
        if models[rank] > 1 and fit[rank] >= task.workers:
            attempt.reasons[REASON_ACROSS_MODELS] += 1
            attempt.details.append(f"{fit[rank]} of {task.workers} workers fit across device models; set devices.mix_models: true to allow that")


def _place_in_a_part(snap, task, row_arr, fractions, fit, same: str, spread: bool, commit: bool) -> list[WorkerPlacement] | None:
    """Place the gang within one node / zone / network group (`same`), trying the parts in turn."""
    for part in _partitions(snap, row_arr, same):
        if same == "none":
            part_fractions, part_fit = fractions, fit
        else:
            selected = np.isin(row_arr, part)
            part_fractions = None if fractions is None else fractions[selected]
            part_fit = fit[selected]
        placements = _place_group(snap, task, part, part_fractions, spread, part_fit, commit)
        if placements is not None:
            return placements
    return None


def _explain_no_fit(snap: Snapshot, task: TaskSpec, row_arr: np.ndarray, fractions, same: str, attempt: Attempt) -> None:
    attempt.reasons.update(reasons_per_row(snap, row_arr, task, fractions))  # only now: the explaining pass
    if attempt.workers_fit >= task.workers and same != "none":
        attempt.reasons[REASON_TOPOLOGY] += 1
        attempt.details.append(f"{attempt.workers_fit} workers fit across the estate, but not within one {same.replace('_', ' ')}")
    elif attempt.workers_fit > 0:
        attempt.reasons[REASON_GANG] += 1
        attempt.details.append(f"{attempt.workers_fit} of {task.workers} workers fit now")
