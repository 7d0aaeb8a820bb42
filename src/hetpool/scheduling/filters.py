"""Hard filters. Each returns, per pool or per row, whether it passes and why not.

Pool-level filters (compatibility, features, memory, reservation) are decided once per
pool and broadcast to the pool's rows; row-level filters (health, free capacity) are
boolean masks over the snapshot's arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hetpool.catalog.task_types import task_type_verdict
from hetpool.core.inventory import DeviceClass
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.core.tenancy import tenant_ancestors
from hetpool.scheduling.snapshot import PoolView, Snapshot

# The compatibility check is injected (the catalog's CompatibilityKB.check), keeping the
# core free of data loading.
CompatCheck = Callable[..., object]

REASON_COMPAT = "incompatible software stack"
REASON_COMPAT_UNKNOWN = "software compatibility unknown"  # the tables do not cover it; the KB's policy blocks
REASON_FEATURES = "missing required device features"
REASON_MEMORY = "device memory below min_memory_gb"
REASON_RESERVED = "pool reserved for other tenants"
REASON_FRACTION = "pool does not allow fractional devices"
REASON_UNHEALTHY = "node unhealthy or not schedulable"
REASON_DEVICES = "not enough free devices"
REASON_DEVICES_TOTAL = "fewer devices per node than requested"
REASON_CPU = "not enough free CPU"
REASON_MEMORY_HOST = "not enough free host memory"
REASON_CPU_TOTAL = "node has fewer CPU cores than requested"
REASON_MEMORY_HOST_TOTAL = "node has less host memory than requested"
REASON_GANG = "not enough nodes for all workers at once (gang)"
REASON_CLASS = "device class does not match"
REASON_TASK_TYPE = "device class does not take this task type"
REASON_SLICE_TOO_BIG = "slice larger than one device"
REASON_EXCLUDED = "node excluded by the task"
REASON_RESERVED_NODE = "node held for a blocked queue head"
REASON_QUEUE_POOLS = "pool not available to the task's queue"
REASON_TOPOLOGY = "no single node / network group / zone holds all workers"
REASON_ISLAND = "no NVLink/HCCS island with enough free devices"


def slice_fraction(pool: PoolView, task: TaskSpec) -> float:
    """Share of one device each worker takes: 1.0 for whole devices, else the larger of
    its memory share and compute share, so neither is ever oversubscribed."""
    demand = task.per_worker.devices
    if demand is None:
        return 0.0
    parts = []
    if demand.count < 1:
        parts.append(demand.count)
    if demand.memory_gb:
        parts.append(demand.memory_gb / pool.model.memory_gb if pool.model.memory_gb else float("inf"))
    if demand.cores_percent:
        parts.append(demand.cores_percent / 100.0)
    return max(parts) if parts else 1.0


@dataclass(frozen=True)
class PoolVerdict:
    ok: bool
    reason: str = ""
    detail: str = ""


def pool_verdict(pool: PoolView, task: TaskSpec, compat_check: CompatCheck) -> PoolVerdict:
    """Can this pool run this task at all (ignoring free capacity)?"""
    demand = task.per_worker.devices
    model = pool.model
    if demand is not None:
        # Checked for named models, any_of and fallback entries too: naming a pool does
        # not make a GPU take offload work.
        takes = task_type_verdict(model, task.task_type, task.relative_performance.get(model.name))
        if not takes.ok:
            return PoolVerdict(False, REASON_TASK_TYPE, takes.why)
        fraction = slice_fraction(pool, task)
        if demand.min_memory_gb and model.memory_gb * min(fraction, 1.0) < demand.min_memory_gb:
            return PoolVerdict(False, REASON_MEMORY, f"{model.name} has {model.memory_gb:g} GB, the task needs {demand.min_memory_gb:g} GB")
        if fraction < 1 and not pool.spec.shareable:
            return PoolVerdict(False, REASON_FRACTION, f"pool {pool.name} is not shareable; the task asks for a slice of a device")
        if fraction > 1 and (demand.memory_gb or demand.cores_percent):
            return PoolVerdict(False, REASON_SLICE_TOO_BIG, f"{model.name} has {model.memory_gb:g} GB; the slice asks for {demand.memory_gb:g} GB")
    missing = set(task.features) - pool.features
    if missing and not missing <= pool_node_features(pool):
        report = pool.feature_report
        why = [f"{f} ({report.missing[f]})" if f in report.missing else f for f in sorted(missing)]
        return PoolVerdict(False, REASON_FEATURES, f"{model.name} lacks {', '.join(why)}")
    reservation = pool.spec.reserved_for
    if reservation is not None and not reservation_allows(reservation, task):
        return PoolVerdict(False, REASON_RESERVED, f"pool {pool.name} is reserved for {', '.join(reservation.tenants) or 'higher priorities'}")
    verdict = compat_check(model, pool.stack, task.framework, has_image=bool(task.image))
    if not verdict.ok:
        head = REASON_COMPAT_UNKNOWN if getattr(verdict, "unknown", False) else REASON_COMPAT
        return PoolVerdict(False, head + ": " + verdict.reason, verdict.detail)
    return PoolVerdict(True)


def pool_node_features(pool: PoolView) -> frozenset[str]:
    """Features at least one of the pool's nodes adds by label (rows are then checked one by one)."""
    return pool.label_features


def rows_lacking_features(snap: Snapshot, pool: PoolView, rows: np.ndarray, task: TaskSpec) -> np.ndarray:
    """Mask over `rows`: nodes that lack a required feature the pool's devices do not give."""
    missing = set(task.features) - pool.features
    if not missing:
        return np.zeros(len(rows), dtype=bool)
    return np.array([not missing <= snap.node_feature_sets[int(n)] for n in snap.row_node[rows]], dtype=bool)


def reservation_allows(reservation, task: TaskSpec) -> bool:
    ancestors = set(tenant_ancestors(task.tenant))
    if any(t in ancestors for t in reservation.tenants):
        return True
    if reservation.min_priority:
        try:
            return task.priority.rank >= Priority(reservation.min_priority).rank
        except ValueError:
            return False
    return False


def _island_fit(snap: Snapshot, row: int, count: int) -> int:
    """Workers of `count` whole devices that fit when each must stay within one island."""
    islands = snap.row_islands[row]
    free = snap.dev_free[row] >= 1.0 - 1e-9
    return int(sum((free & (islands == i)).sum() // count for i in np.unique(islands)))


def workers_fit(snap: Snapshot, rows: np.ndarray, task: TaskSpec, fractions: np.ndarray | None = None) -> np.ndarray:
    """How many workers of `task` each row can take now (the hot path: no reasons)."""
    return _fit_parts(snap, rows, task, fractions)[0]


def _fit_parts(snap: Snapshot, rows: np.ndarray, task: TaskSpec, fractions: np.ndarray | None):
    demand = task.per_worker.devices
    nodes = snap.row_node[rows]
    by_cpu = np.floor(snap.free_cpu[nodes] / task.per_worker.cpu + 1e-9)
    by_mem = np.floor(snap.free_mem[nodes] / task.per_worker.memory_gb + 1e-9)
    fit = np.minimum(by_cpu, by_mem)
    if demand is not None:
        if fractions is None:
            if task.topology and task.topology.device_island:
                by_dev = np.array([_island_fit(snap, int(r), int(demand.count)) for r in rows], dtype=np.float64)
            else:
                by_dev = np.floor(snap.whole_free()[rows] / demand.count + 1e-9)
        else:
            # Slices: several workers may share one device while enough of it remains.
            free = np.clip(snap.dev_free.data[rows], 0, None)
            by_dev = np.floor(free / fractions[:, None] + 1e-9).sum(axis=1)
        fit = np.minimum(fit, by_dev)
    healthy = snap.node_healthy[nodes]
    fit = np.where(healthy, fit, 0).astype(np.int64)
    return fit, nodes, by_cpu, by_mem, healthy


def reasons_per_row(snap: Snapshot, rows: np.ndarray, task: TaskSpec, fractions: np.ndarray | None = None) -> dict[str, int]:
    """How many of `rows` fail for each reason: the first failing check of a row names it
    (rows where at least one worker of `task` fits count for none).

    `fractions` holds, per row, the share of one device a worker takes when the task asks
    for slices (see `slice_fraction`); None for whole devices. Counted with one bincount
    over reason codes: this runs for every head that does not fit, on every row it could use.
    """
    demand = task.per_worker.devices
    cpu, mem = task.per_worker.cpu, task.per_worker.memory_gb
    fit, nodes, by_cpu, by_mem, healthy = _fit_parts(snap, rows, task, fractions)
    island = bool(task.topology and task.topology.device_island)
    whole = demand is not None and fractions is None
    no_rows = np.zeros(len(rows), dtype=bool)
    checks = [
        ~healthy,
        snap.total_cpu[nodes] < cpu,
        snap.total_mem[nodes] < mem,
        (snap.device_totals()[rows] < demand.count) if whole else no_rows,
        fit > 0,
        by_cpu < 1,
        by_mem < 1,
    ]
    names = [REASON_UNHEALTHY, REASON_CPU_TOTAL, REASON_MEMORY_HOST_TOTAL, REASON_DEVICES_TOTAL, "", REASON_CPU, REASON_MEMORY_HOST]
    names.append(REASON_ISLAND if island else REASON_DEVICES)  # the default: devices are what is short
    codes = np.select(checks, list(range(len(checks))), default=len(checks))
    counts = np.bincount(codes, minlength=len(names))
    return {name: int(n) for name, n in zip(names, counts.tolist(), strict=True) if name and n}


def class_matches(pool: PoolView, device_class: DeviceClass | None) -> bool:
    return device_class is None or pool.model.device_class == device_class


def memoized(compat_check: CompatCheck, cache: dict | None = None) -> CompatCheck:
    """Compatibility verdicts per (model, stack, framework request).

    Many queued tasks ask for the same framework spec; a pool's stack object is shared
    by all its rows and by every copy of the snapshot, so its id() is a safe key for as
    long as the snapshot lives — which is where the cache is kept (see run_cycle).
    """
    cache = {} if cache is None else cache

    def check(model, stack, framework, *, has_image: bool = False):
        key = (model.name, id(stack), framework.cache_key if framework else "", has_image, id(getattr(compat_check, "__self__", None)))
        if key not in cache:
            cache[key] = compat_check(model, stack, framework, has_image=has_image)
        return cache[key]

    return check
