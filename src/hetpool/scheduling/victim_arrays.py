"""Running work as flat arrays, so that choosing victims costs numpy steps, not Python loops.

Planning a preemption (preempt.find_victims) filters every running task (priority, node,
policy), then releases prefixes of the candidates on scratch copies of the snapshot until
the preemptor fits. At estate scale that is tens of thousands of running tasks and
hundreds of candidates per plan, and a cycle plans tens of them: one Python step per task
and one `Snapshot.take` per allocation made planning the largest part of a cycle.

`RunningArrays` holds what each running task holds (its node entries: CPU and memory; its
device entries: row, device index, fraction) in task order, built once per cycle. Its
`candidates` filter is one numpy pass; `Releases` gathers the candidates' entries in
eviction order, and `released(k)` is a snapshot copy with the first k of them given back —
the same arithmetic as releasing them one by one with `Snapshot.take` (numpy's `add.at`
adds in index order, so the sums are those of the loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Snapshot

WHOLE = 1.0 - 1e-9  # a device at least this free counts as idle (as Snapshot.take counts it)


def held_size(r: RunningTask) -> tuple[float, float, float]:
    """Devices, then CPU, then memory held: evicting less disturbs less."""
    return (
        sum(len(a.device_indices) * a.device_fraction for a in r.allocations),
        sum(a.cpu for a in r.allocations),
        sum(a.memory_gb for a in r.allocations),
    )


def _offsets_of(lengths: np.ndarray) -> np.ndarray:
    """CSR offsets from per-task entry counts: entries of task i are [off[i], off[i+1])."""
    off = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    return off


def _gather(off: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry indices of the tasks in `order`, concatenated, and each task's end in them."""
    lengths = off[order + 1] - off[order]
    ends = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ends[1:])
    starts = np.repeat(off[order] - ends[:-1], lengths)
    return starts + np.arange(int(ends[-1]), dtype=np.int64), ends


class Held(NamedTuple):
    """One running task's capacity on a snapshot: node entries (CPU, memory) and device
    entries (row, device index, fraction), in the order of its allocations."""

    node: np.ndarray
    cpu: np.ndarray
    mem: np.ndarray
    dev_row: np.ndarray
    dev_col: np.ndarray
    dev_frac: np.ndarray


HELD_CACHE_LIMIT = 200_000  # tasks whose Held is kept with a snapshot (a bound on memory)


def held_of(snap: Snapshot, r: RunningTask) -> Held:
    """`r`'s capacity as arrays, kept with the snapshot (shared by its copies) across cycles:
    a task's allocations never change while it runs (the tuple's identity is checked)."""
    cached = snap.held_cache.get(r.id)
    if cached is not None and (cached[0] is r.allocations or cached[0] == r.allocations):  # the server rebuilds them each pass
        return cached[1]
    node, cpu, mem, dev_row, dev_col, dev_frac = [], [], [], [], [], []
    lengths = snap.dev_free.lengths
    for a in r.allocations:
        n = snap.node_by_name.get(a.node)
        if n is None:
            continue  # a node gone from the inventory holds nothing here
        node.append(n)
        cpu.append(a.cpu)
        mem.append(a.memory_gb)
        row = snap.row_of(a.node, a.pool)
        if row is None or not a.device_indices:
            continue  # a pool gone from the inventory: only the node's CPU and memory were charged
        for col in a.device_indices:
            if 0 <= col < lengths[row]:
                dev_row.append(row)
                dev_col.append(col)
                dev_frac.append(a.device_fraction)
    as_int, as_float = (lambda v: np.asarray(v, dtype=np.int64)), (lambda v: np.asarray(v, dtype=np.float64))
    held = Held(as_int(node), as_float(cpu), as_float(mem), as_int(dev_row), as_int(dev_col), as_float(dev_frac))
    if len(snap.held_cache) >= HELD_CACHE_LIMIT:
        snap.held_cache.clear()
    snap.held_cache[r.id] = (r.allocations, held)
    return held


def _joined(helds: list[Held]) -> Held:
    if not helds:
        return Held(*(np.zeros(0, dtype=t) for t in (np.int64, np.float64, np.float64, np.int64, np.int64, np.float64)))
    return Held(*(np.concatenate(parts) for parts in zip(*helds, strict=True)))


def give_back(snap: Snapshot, held: Held | list[Held], count: tuple[int, int] | None = None) -> None:
    """Release capacity on `snap` in place: one numpy step for many tasks, the same sums as
    `Snapshot.release` per allocation. `count`: only the first (node, device) entries."""
    h = _joined(held) if isinstance(held, list) else held
    nodes, devs = count if count is not None else (len(h.node), len(h.dev_row))
    for pool in range(len(snap.pools)):
        snap.pool_changes[pool] += 1  # every pool, as a bound: versions for memos (Snapshot.pool_changes)
    np.add.at(snap.free_cpu, h.node[:nodes], h.cpu[:nodes])
    np.add.at(snap.free_mem, h.node[:nodes], h.mem[:nodes])
    if devs:
        rows = h.dev_row[:devs]
        np.add.at(snap.dev_free.data, (rows, h.dev_col[:devs]), h.dev_frac[:devs])
        touched = np.unique(rows)
        whole = (snap.dev_free.data[touched] >= WHOLE).sum(axis=1).astype(snap.row_free_whole.dtype)
        np.add.at(snap.pool_free_whole, snap.row_pool[touched], whole - snap.row_free_whole[touched])
        snap.row_free_whole[touched] = whole


ARRAYS_KEY = "running_arrays"  # the last cycle's RunningArrays, in Snapshot.parking (cycle_arrays)


def cycle_arrays(snap: Snapshot, running: list[RunningTask]) -> RunningArrays:
    """`running` as arrays for a cycle, built from the previous cycle's where a task still
    runs with the same placement (kept with the snapshot the server and the simulator keep
    across cycles; a new snapshot starts afresh). Between two cycles a few tasks start and
    end among tens of thousands: joining every task's arrays again cost ~75 ms a cycle at
    5,000 nodes, a few ms this way. The result is the same as a fresh build."""
    arrays = RunningArrays(snap, running, previous=snap.parking.get(ARRAYS_KEY))
    snap.parking[ARRAYS_KEY] = arrays
    return arrays


class RunningArrays:
    """What each running task holds on `snap`'s nodes and rows, and how it ranks as a victim.

    `previous`: arrays built on the same snapshot for other (earlier) running work: the
    entries of tasks in both with the same placement are taken from it (see cycle_arrays)."""

    def __init__(
        self,
        snap: Snapshot,
        running: list[RunningTask],
        eligible: Callable[[RunningTask], bool] = lambda r: True,
        previous: RunningArrays | None = None,
    ) -> None:
        self.tasks = list(running)
        count = len(self.tasks)
        self.position = {r.id: i for i, r in enumerate(self.tasks)}
        self.rank = np.fromiter((r.priority_rank for r in self.tasks), dtype=np.int64, count=count)
        # Preemptible, and evictable where its devices are (`eligible`: the class policy, once per cycle).
        self.eligible = np.fromiter((r.preemptible and eligible(r) for r in self.tasks), dtype=bool, count=count)
        self._keys: list[tuple | None] = [None] * count
        if previous is None:
            helds = [held_of(snap, r) for r in self.tasks]
            self.node_off = _offsets_of(np.array([len(h.node) for h in helds], dtype=np.int64))
            self.dev_off = _offsets_of(np.array([len(h.dev_row) for h in helds], dtype=np.int64))
            joined = _joined(helds)
            self.node, self.cpu, self.mem = joined.node, joined.cpu, joined.mem
            self.dev_row, self.dev_col, self.dev_frac = joined.dev_row, joined.dev_col, joined.dev_frac
        else:
            self._follow(snap, previous)
        self.node_owner = np.repeat(np.arange(count, dtype=np.int64), np.diff(self.node_off))

    def _follow(self, snap: Snapshot, previous: RunningArrays) -> None:
        """The entries of each task in running order: from `previous` where it holds the same
        placement, else from its own arrays — gathered in one step from both."""
        old_position, old_tasks, fresh, source = previous.position, previous.tasks, [], []
        for r in self.tasks:
            j = old_position.get(r.id)
            if j is not None:
                held = old_tasks[j].allocations
                if held is r.allocations or held == r.allocations:
                    source.append(j)
                    continue
            source.append(len(old_tasks) + len(fresh))
            fresh.append(held_of(snap, r))
        new = _joined(fresh)
        node_off = np.concatenate(
            [previous.node_off[:-1], previous.node_off[-1] + _offsets_of(np.array([len(h.node) for h in fresh], dtype=np.int64))]
        )
        dev_off = np.concatenate(
            [previous.dev_off[:-1], previous.dev_off[-1] + _offsets_of(np.array([len(h.dev_row) for h in fresh], dtype=np.int64))]
        )
        order = np.asarray(source, dtype=np.int64)
        nodes, self.node_off = _gather(node_off, order)
        devs, self.dev_off = _gather(dev_off, order)
        self.node, self.cpu, self.mem = (
            np.concatenate([a, b])[nodes] for a, b in ((previous.node, new.node), (previous.cpu, new.cpu), (previous.mem, new.mem))
        )
        pairs = ((previous.dev_row, new.dev_row), (previous.dev_col, new.dev_col), (previous.dev_frac, new.dev_frac))
        self.dev_row, self.dev_col, self.dev_frac = (np.concatenate([a, b])[devs] for a, b in pairs)

    def candidates(self, usable_node: np.ndarray, below_rank: int, also: set[str] | frozenset[str] = frozenset()) -> np.ndarray:
        """Positions of the eligible tasks of a rank below `below_rank` (or in `also`) that
        hold something on a node where `usable_node` is set, in running order."""
        on_usable = np.zeros(len(self.tasks), dtype=bool)
        if len(self.node):
            on_usable = np.bincount(self.node_owner, weights=usable_node[self.node], minlength=len(self.tasks)) > 0
        wanted = self.rank < below_rank
        for task_id in also:
            if (i := self.position.get(task_id)) is not None:
                wanted[i] = True
        return np.flatnonzero(self.eligible & on_usable & wanted)

    def order_key(self, i: int) -> tuple:
        """Lowest priority first, then most recently started (least work lost), then smallest, then id."""
        key = self._keys[i]
        if key is None:
            r = self.tasks[i]
            key = self._keys[i] = (r.priority_rank, -r.started_at.timestamp(), held_size(r), r.id)
        return key

    def releases(self, order: list[int]) -> Releases:
        return Releases(self, np.asarray(order, dtype=np.int64))


class Releases:
    """The capacity of some running tasks in a given order; `released(snap, k)` gives the first k back."""

    def __init__(self, arrays: RunningArrays, order: np.ndarray) -> None:
        nodes, self.node_end = _gather(arrays.node_off, order)
        devs, self.dev_end = _gather(arrays.dev_off, order)
        self.held = Held(arrays.node[nodes], arrays.cpu[nodes], arrays.mem[nodes], arrays.dev_row[devs], arrays.dev_col[devs], arrays.dev_frac[devs])

    def released(self, snap: Snapshot, k: int) -> Snapshot:
        """A copy of `snap` with the first `k` tasks' capacity given back."""
        out = snap.copy()
        give_back(out, self.held, (int(self.node_end[k]), int(self.dev_end[k])))
        return out
