"""An array view of free capacity, built from the inventory and current allocations.

Rows are (node, pool) memberships: a node with two device models in two pools has two
rows. CPU and memory belong to the node and are shared by its rows, so they live in
per-node arrays; devices live per row as a vector of free fractions per device (1.0 =
idle, 0.0 = fully used), which covers whole-device and fractional requests alike.
"""

from __future__ import annotations

import copy as _copy
from dataclasses import dataclass, field

import numpy as np

from hetpool.catalog.features import FeatureReport, effective_features
from hetpool.core.inventory import ClusterSpec, DeviceModelSpec, NodeSpec, PoolSpec, SoftwareStack, TaskType

# Node labels `hetpool.io/feature.<name>: "true"` add node-level features (InfiniBand, a
# Slurm feature, a local NVMe …) to what the node's devices offer.
NODE_FEATURE_PREFIX = "hetpool.io/feature."


def node_features(node: NodeSpec) -> frozenset[str]:
    return frozenset(k[len(NODE_FEATURE_PREFIX) :].lower() for k, v in node.labels.items() if k.startswith(NODE_FEATURE_PREFIX) and v == "true")


@dataclass(frozen=True)
class Allocation:
    """Capacity held by one worker of an admitted or running task."""

    node: str
    pool: str
    device_indices: tuple[int, ...]
    device_fraction: float  # per listed device: 1.0 for whole devices
    cpu: float
    memory_gb: float


@dataclass
class PoolView:
    index: int
    spec: PoolSpec
    model: DeviceModelSpec
    cluster: ClusterSpec
    stack: SoftwareStack | None
    rows: list[int] = field(default_factory=list)
    node_features: list[frozenset[str]] = field(default_factory=list)  # label features of the nodes with a row here
    _row_array: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    # Computed on first use (after the snapshot is built, when `rows`, `stack` and
    # `node_features` no longer change): see feature_report and label_features.
    _feature_report: FeatureReport | None = field(default=None, init=False, repr=False, compare=False)
    _label_features: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def feature_report(self) -> FeatureReport:
        """The chip's features as enabled (or not) by the pool's software stack."""
        if self._feature_report is None:
            self._feature_report = effective_features(self.model, self.stack)
        return self._feature_report

    @property
    def features(self) -> frozenset[str]:
        return self.feature_report.features

    @property
    def label_features(self) -> frozenset[str]:
        """Features at least one of the pool's nodes adds by label."""
        if self._label_features is None:
            self._label_features = frozenset().union(*self.node_features) if self.node_features else frozenset()
        return self._label_features

    @property
    def row_array(self) -> np.ndarray:
        """`rows` as an array, rebuilt only when a row has been added since."""
        if self._row_array is None or len(self._row_array) != len(self.rows):
            self._row_array = np.array(self.rows, dtype=np.int64)
        return self._row_array


class DeviceMatrix:
    """Free share per device for every row, held in one padded 2-D array.

    `matrix[row]` is a view of that row's devices, so `take` writes straight into the
    array, and copying a snapshot is a single numpy copy instead of one per row.
    Padding is -2 (never free); a broken device is -1.
    """

    def __init__(self, data: np.ndarray, lengths: np.ndarray) -> None:
        self.data = data
        self.lengths = lengths

    @classmethod
    def from_rows(cls, rows: list[np.ndarray]) -> DeviceMatrix:
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        data = np.full((len(rows), int(lengths.max()) if len(rows) else 0), -2.0)
        for i, r in enumerate(rows):
            data[i, : len(r)] = r
        return cls(data, lengths)

    def __getitem__(self, row: int) -> np.ndarray:
        return self.data[row, : self.lengths[row]]

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        return (self[r] for r in range(len(self.lengths)))

    def copy(self) -> DeviceMatrix:
        return DeviceMatrix(self.data.copy(), self.lengths)


# Shapes whose idle-estate placement is kept across cycles (Snapshot.idle_memo).
IDLE_MEMO_LIMIT = 50_000


@dataclass
class Snapshot:
    pools: list[PoolView]
    node_names: list[str]
    node_specs: list[NodeSpec]
    node_zone: list[str]
    node_healthy: np.ndarray  # bool per node
    free_cpu: np.ndarray  # float per node
    free_mem: np.ndarray  # float per node (GB)
    total_cpu: np.ndarray
    total_mem: np.ndarray
    row_node: np.ndarray  # int per row → node index
    row_pool: np.ndarray  # int per row → pool index
    dev_free: DeviceMatrix  # per row: free fraction per device index
    row_free_whole: np.ndarray  # per row: idle whole devices, kept in step with dev_free by take()
    row_total: np.ndarray  # per row: devices
    row_islands: list[np.ndarray]  # per row: NVLink / HCCS island id per device index
    pool_by_name: dict[str, int] = field(default_factory=dict)
    node_by_name: dict[str, int] = field(default_factory=dict)

    # Derived in __post_init__ from the fields above and never changed afterwards (copies
    # share them), except pool_free_whole, which take() keeps in step and copy() copies.
    node_feature_sets: list[frozenset[str]] = field(init=False, repr=False, compare=False)
    row_price: np.ndarray = field(init=False, repr=False, compare=False)  # per row: the pool's price per device-hour
    row_is_cpu: np.ndarray = field(init=False, repr=False, compare=False)  # per row: a CPU pool
    node_zone_array: np.ndarray = field(init=False, repr=False, compare=False)
    pool_free_whole: np.ndarray = field(init=False, repr=False, compare=False)  # per pool: idle whole devices
    # Per pool: how often take() changed the capacity of one of its rows (a version for memos
    # of what depends on a pool's capacity, e.g. backfill.prefer_waiting). CPU and memory
    # belong to the node, so a take on a node with rows in several pools counts for each.
    pool_changes: list[int] = field(init=False, repr=False, compare=False)
    row_node_pools: list[tuple[int, ...]] = field(init=False, repr=False, compare=False)  # per row: the pools with a row on its node
    one_row_per_node: bool = field(init=False, repr=False, compare=False)
    row_index: dict[tuple[int, int], int] = field(init=False, repr=False, compare=False)  # (node, pool) → row
    # Per pool: one device in reference-device units (an H800 counts for more than a T4; CPU pools 0).
    unit_factors: dict[str, float] = field(init=False, repr=False, compare=False)
    row_model_index: np.ndarray = field(init=False, repr=False, compare=False)  # per row: its device model as a small integer
    node_group_index: np.ndarray = field(init=False, repr=False, compare=False)  # per node: its network group (or itself) as a small integer

    # Memo tables of the scheduling code, created empty and shared by every copy (the copies
    # keep the same pools and stacks, which is what the keys stand for).
    compat_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see filters.memoized
    group_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see assign.candidate_groups
    perf_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see row_perf
    held_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see victim_arrays.held_of
    runtime_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see cycle_state.slowest_memo
    forecast_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see forecast._Pending
    # Where the last cycle's rotating scan of the queue stopped (cycle_heads.heads): kept with the
    # snapshot the server and the simulator keep across cycles, like the caches above.
    scan_cursor: list = field(default_factory=lambda: [0], init=False, repr=False, compare=False)
    # What the idle (and the recovered) estate gives each shape: it does not depend on what
    # runs, so it is kept across cycles, under the health it was computed with (idle_memo).
    idle_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # The parked heads and what they are compared against ("state": parking.Parking).
    parking: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # Tasks whose preemption is under way → cycles left to claim what it frees (cycle_heads.heads).
    preemptors: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # Preemptor's task id → the placement its preemption planned, held for it (claims.py).
    claims: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # Queued task id → its priority rank with aging and until when it holds (queueing.RankMemo).
    rank_memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.node_feature_sets = [node_features(n) for n in self.node_specs]
        # Per-row attributes that never change within a snapshot, as arrays for scoring.
        pools = [self.pools[int(p)] for p in self.row_pool]
        self.row_price = np.array([p.spec.price_per_hour for p in pools], dtype=np.float64)
        self.row_is_cpu = np.array([p.model.device_class == "cpu" for p in pools], dtype=bool)
        self.node_zone_array = np.array(self.node_zone, dtype=object)
        # Idle whole devices per pool, kept in step by take(): lets a full pool be skipped
        # without looking at its rows.
        self.pool_free_whole = np.bincount(self.row_pool, weights=self.row_free_whole, minlength=len(self.pools)).astype(np.int64)
        self.one_row_per_node = len(set(self.row_node.tolist())) == len(self.row_node)
        self.pool_changes = [0] * len(self.pools)
        node_pools: dict[int, set[int]] = {}
        for n, p in zip(self.row_node.tolist(), self.row_pool.tolist(), strict=True):
            node_pools.setdefault(n, set()).add(p)
        self.row_node_pools = [tuple(sorted(node_pools[n])) for n in self.row_node.tolist()]
        self.row_index = {(int(n), int(p)): r for r, (n, p) in enumerate(zip(self.row_node, self.row_pool, strict=True))}
        self.unit_factors = {p.name: 0.0 if p.model.device_class == "cpu" else p.model.perf_for(TaskType.GENERAL) for p in self.pools}
        model_ids = {name: i for i, name in enumerate(sorted({p.model.name for p in self.pools}))}
        self.row_model_index = np.array([model_ids[p.model.name] for p in pools], dtype=np.int64)
        groups = [n.network_group or f"node:{i}" for i, n in enumerate(self.node_specs)]
        group_ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}
        self.node_group_index = np.array([group_ids[g] for g in groups], dtype=np.int64)

    def row_perf(self, task_type) -> np.ndarray:
        """Relative performance of each row's device model for `task_type` (cached)."""
        if task_type not in self.perf_cache:
            self.perf_cache[task_type] = np.array([self.pools[int(p)].model.perf_for(task_type) for p in self.row_pool], dtype=np.float64)
        return self.perf_cache[task_type]

    def row_perf_with(self, task_type, hints: dict[str, float]) -> np.ndarray:
        """Row performance with a task's own per-model hints written over the catalog's."""
        key = (task_type, tuple(sorted(hints.items())))
        if key not in self.perf_cache:
            perf = self.row_perf(task_type).copy()
            for p in range(len(self.pools)):
                if self.pools[p].model.name in hints:
                    perf[self.row_pool == p] = hints[self.pools[p].model.name]
            self.perf_cache[key] = perf
        return self.perf_cache[key]

    def whole_free(self) -> np.ndarray:
        """Idle whole devices per row (read-only view; updated incrementally by take())."""
        return self.row_free_whole

    def fraction_free(self, fraction: float) -> np.ndarray:
        """Devices per row with at least `fraction` of a device free."""
        return (self.dev_free.data >= fraction - 1e-9).sum(axis=1).astype(np.int64)

    def device_totals(self) -> np.ndarray:
        return self.row_total

    def copy(self) -> Snapshot:
        """A copy whose capacity arrays can be changed without touching this one."""
        clone = _copy.copy(self)  # shares the immutable parts (specs, names, per-row constants)
        clone.free_cpu = self.free_cpu.copy()
        clone.free_mem = self.free_mem.copy()
        clone.dev_free = self.dev_free.copy()
        clone.row_free_whole = self.row_free_whole.copy()
        clone.pool_free_whole = self.pool_free_whole.copy()
        clone.pool_changes = list(self.pool_changes)
        return clone

    def with_own_memory(self) -> Snapshot:
        """A copy for a what-if cycle (`hetpool plan`): it shares the derived caches but not
        the scheduler's memory — the scan cursor, the preemptors' claims, the parked heads —
        so that planning never moves, claims or parks anything for the real scheduler."""
        clone = self.copy()
        clone.scan_cursor = list(self.scan_cursor)
        clone.preemptors = dict(self.preemptors)
        clone.claims = dict(self.claims)
        clone.parking = {}
        return clone

    def emptied(self) -> Snapshot:
        """The same inventory with nothing allocated (for "could it ever fit?")."""
        empty = self.copy()
        empty.free_cpu = self.total_cpu.copy()
        empty.free_mem = self.total_mem.copy()
        # Broken devices stay unusable even on an idle estate.
        empty.dev_free = DeviceMatrix(np.where(self.dev_free.data < -0.5, self.dev_free.data, 1.0), self.dev_free.lengths)
        empty.row_free_whole = (empty.dev_free.data >= 1.0 - 1e-9).sum(axis=1).astype(np.int64)
        empty.pool_free_whole = np.bincount(self.row_pool, weights=empty.row_free_whole, minlength=len(self.pools)).astype(np.int64)
        return empty

    def idle_memo(self) -> dict:
        """The cross-cycle memo of idle-estate results for this snapshot's health (a node
        or device that goes down or comes back starts a new one). Holds the idle and the
        recovered estates themselves under "idle" and "recovered"."""
        health = (self.node_healthy.tobytes(), (self.dev_free.data < -0.5).tobytes())
        memo = self.idle_cache.get(health)
        if memo is None:
            if len(self.idle_cache) >= 4:  # health flapping: keep only the latest few
                self.idle_cache.pop(next(iter(self.idle_cache)))
            memo = self.idle_cache[health] = {}
        elif len(memo) > IDLE_MEMO_LIMIT:
            memo.clear()  # a bound on memory, whatever the variety of shapes
        return memo

    def recovered(self) -> Snapshot:
        """The idle estate with every node and device back to health (cordons, which the
        inventory sets, stay): what a task could run on once what is down now is back."""
        back = self.emptied()
        back.node_healthy = np.array([n.schedulable for n in self.node_specs], dtype=bool)
        data = back.dev_free.data
        back.dev_free = DeviceMatrix(np.where((data > -1.5) & (data < -0.5), 1.0, data), back.dev_free.lengths)  # -1 broken, -2 padding
        back.row_free_whole = (back.dev_free.data >= 1.0 - 1e-9).sum(axis=1).astype(np.int64)
        back.pool_free_whole = np.bincount(self.row_pool, weights=back.row_free_whole, minlength=len(self.pools)).astype(np.int64)
        return back

    def row_of(self, node: str, pool: str) -> int | None:
        n, p = self.node_by_name.get(node), self.pool_by_name.get(pool)
        if n is None or p is None:
            return None
        return self.row_index.get((n, p))

    def take(self, row: int, device_indices: tuple[int, ...], fraction: float, cpu: float, memory_gb: float) -> None:
        """Mark capacity as used (an admitted worker). Updates the arrays in place."""
        node = int(self.row_node[row])
        for pool in self.row_node_pools[row]:
            self.pool_changes[pool] += 1
        self.free_cpu[node] -= cpu
        self.free_mem[node] -= memory_gb
        if device_indices:
            devices = self.dev_free[row]
            for i in device_indices:
                if 0 <= i < len(devices):
                    devices[i] -= fraction
            before = self.row_free_whole[row]
            self.row_free_whole[row] = int((devices >= 1.0 - 1e-9).sum())
            self.pool_free_whole[self.row_pool[row]] += self.row_free_whole[row] - before

    def capacity_version(self, pools: list[int]) -> tuple:
        """Changes so far to the capacity of `pools`' rows: equal versions mean take() has
        not touched it in between."""
        return tuple(self.pool_changes[p] for p in pools)

    def release(self, row: int, device_indices: tuple[int, ...], fraction: float, cpu: float, memory_gb: float) -> None:
        self.take(row, device_indices, -fraction, -cpu, -memory_gb)


def effective_stack(node: NodeSpec, pool: PoolSpec) -> SoftwareStack | None:
    return node.stack or pool.stack


def build_snapshot(
    clusters: list[ClusterSpec],
    nodes: list[NodeSpec],
    pools: list[PoolSpec],
    models: dict[str, DeviceModelSpec],
    allocations: list[Allocation] = (),
    unhealthy_nodes: set[str] = frozenset(),
    unhealthy_devices: dict[str, set[int]] | None = None,
    external_busy: dict[str, dict[str, int]] | None = None,
) -> Snapshot:
    """Arrays over the inventory with `allocations` subtracted.

    `external_busy` (node -> model -> count) are devices an engine such as Slurm reports in
    use by work hetpool did not place: that many of the node's free devices are held.

    Pools whose model is not in `models` or whose cluster is unknown are skipped: the
    inventory service refuses such references, so this only guards stale data.
    """
    cluster_by_name = {c.name: c for c in clusters}
    node_by_name = {n.name: i for i, n in enumerate(nodes)}
    node_zone = [n.zone or (cluster_by_name[n.cluster].zone if n.cluster in cluster_by_name else "default") for n in nodes]
    healthy = np.array([n.schedulable and n.name not in unhealthy_nodes for n in nodes], dtype=bool)
    total_cpu = np.array([float(n.cpu_cores) for n in nodes], dtype=np.float64)
    total_mem = np.array([float(n.memory_gb) for n in nodes], dtype=np.float64)
    rows = _Rows()
    for spec in sorted(pools, key=lambda p: p.name):
        model = models.get(spec.model)
        cluster = cluster_by_name.get(spec.cluster)
        if model is None or cluster is None:
            continue
        rows.add_pool(spec, model, cluster, nodes, node_by_name, unhealthy_devices or {})
    dev_free = rows.dev_free
    snap = Snapshot(
        pools=rows.views,
        node_names=[n.name for n in nodes],
        node_specs=list(nodes),
        node_zone=node_zone,
        node_healthy=healthy,
        free_cpu=total_cpu.copy(),
        free_mem=total_mem.copy(),
        total_cpu=total_cpu,
        total_mem=total_mem,
        row_node=np.array(rows.row_node, dtype=np.int64),
        row_pool=np.array(rows.row_pool, dtype=np.int64),
        dev_free=DeviceMatrix.from_rows(dev_free),
        row_free_whole=np.array([int((d >= 1.0).sum()) for d in dev_free], dtype=np.int64),
        row_total=np.array([len(d) for d in dev_free], dtype=np.int64),
        row_islands=rows.row_islands,
        pool_by_name={v.name: v.index for v in rows.views},
        node_by_name=node_by_name,
    )
    _subtract(snap, allocations)
    _hold_external(snap, external_busy or {})
    return snap


@dataclass
class _Rows:
    """The (node, pool) rows of a snapshot being built, pool by pool."""

    views: list[PoolView] = field(default_factory=list)
    row_node: list[int] = field(default_factory=list)
    row_pool: list[int] = field(default_factory=list)
    dev_free: list[np.ndarray] = field(default_factory=list)
    row_islands: list[np.ndarray] = field(default_factory=list)

    def add_pool(self, spec: PoolSpec, model, cluster, nodes: list[NodeSpec], node_by_name: dict[str, int], broken: dict[str, set[int]]) -> None:
        view = PoolView(index=len(self.views), spec=spec, model=model, cluster=cluster, stack=None)
        for node_name in spec.nodes:
            n = node_by_name.get(node_name)
            if n is None:
                continue
            node = nodes[n]
            group = next((g for g in node.devices if g.model == spec.model), None)
            count = group.count if group else 0
            if count == 0 and model.device_class != "cpu":
                continue
            # A CPU pool row exposes the node's sockets as "devices" (usually 1 or 2).
            view.rows.append(len(self.row_node))
            extra_features = node_features(node)
            if extra_features:
                view.node_features.append(extra_features)
            # A node's own stack wins over the pool's default; the inventory service
            # guarantees every node of a pool ends up with the same effective stack.
            if view.stack is None:
                view.stack = effective_stack(node, spec)
            self.row_node.append(n)
            self.row_pool.append(view.index)
            devices = np.ones(max(count, 1 if model.device_class == "cpu" else 0), dtype=np.float64)
            for i in broken.get(node.name, ()):
                if 0 <= i < len(devices):
                    devices[i] = -1.0  # an abnormal device is never free
            self.dev_free.append(devices)
            islands = np.zeros(len(devices), dtype=np.int64)
            if group and len(group.islands) == len(devices):
                islands[:] = group.islands
            self.row_islands.append(islands)
        self.views.append(view)


def _subtract(snap: Snapshot, allocations: list[Allocation]) -> None:
    for alloc in allocations:
        row = snap.row_of(alloc.node, alloc.pool)
        if row is None:
            n = snap.node_by_name.get(alloc.node)
            if n is not None:  # pool gone: still hold the node's CPU and memory
                snap.free_cpu[n] -= alloc.cpu
                snap.free_mem[n] -= alloc.memory_gb
            continue
        snap.take(row, alloc.device_indices, alloc.device_fraction, alloc.cpu, alloc.memory_gb)


def _hold_external(snap: Snapshot, external_busy: dict[str, dict[str, int]]) -> None:
    for node_name, per_model in external_busy.items():
        for view in snap.pools:
            count = per_model.get(view.spec.model, 0)
            row = snap.row_of(node_name, view.name) if count > 0 else None
            if row is None:
                continue
            free = np.flatnonzero(snap.dev_free[row] >= 1.0 - 1e-9)[:count]
            if len(free):
                snap.take(row, tuple(int(i) for i in free), 1.0, 0.0, 0.0)
