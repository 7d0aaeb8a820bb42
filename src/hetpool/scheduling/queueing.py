"""Queues and queue order: routing to named queues, priority with aging, weighted
dominant-resource fair share between tenants, then age.

Each queue keeps its own line. `QueueOrder` hands out heads one at a time: the head
with the highest effective priority across queues; ties go to the tenant with the
smallest weighted dominant share (devices normalised by relative performance, so an
H800-hour counts for more than a T4-hour), then to the oldest task. Shares are updated
as tasks are admitted within the cycle, so one tenant cannot take a whole cycle.
Aging raises a waiting task's priority a little per hour, so nothing starves.

A `shortest-first` queue orders each tenant's own line by estimated remaining work
(runtime × devices, smallest first) instead of age. Only a tenant's own tasks are reordered: tenants still
take turns by fair share, so a tenant that understates its estimates jumps only its own
queue, never another tenant's.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from operator import itemgetter

from hetpool.core.policy import QueueSpec
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.core.tenancy import tenant_ancestors

DEFAULT_QUEUE = QueueSpec(name="default")
MAX_RANK = Priority.CRITICAL.rank
_FIFO_LEVEL = -1  # the single level holding a fifo queue's line


def route(task: TaskSpec, queues: list[QueueSpec]) -> QueueSpec:
    """The queue a task joins: its explicit `queue:`, else the first queue (by `order`)
    whose task types and templates accept it, else the built-in default queue."""
    by_name = {q.name: q for q in queues}
    if task.queue:
        return by_name.get(task.queue, DEFAULT_QUEUE)
    for queue in sorted(queues, key=lambda q: (q.order, q.name)):
        if queue.task_types and task.task_type not in queue.task_types:
            continue
        if queue.templates and task.template not in queue.templates:
            continue
        return queue
    return DEFAULT_QUEUE


def effective_rank(base_rank: int, queued_at: datetime, now: datetime, aging_per_hour: float) -> int:
    """Priority rank raised by waiting time, never above critical."""
    hours = max(0.0, (now - queued_at).total_seconds() / 3600)
    return min(MAX_RANK, base_rank + int(hours * aging_per_hour)) if base_rank < MAX_RANK else base_rank


class RankMemo:
    """Effective ranks kept across cycles: a rank with aging changes a few times in a task's
    wait (once per 1/aging hours, until critical), yet a cycle asked for it for every queued
    task — 40,000 datetime computations a cycle on a full estate. Each task's rank is kept
    with the interval of the cycle clock it holds for; `memo` is a dict kept by the caller
    (Snapshot.rank_memo) across cycles."""

    def __init__(self, memo: dict, now: datetime, aging_per_hour: float) -> None:
        self.memo, self.now, self.aging = memo, now, aging_per_hour

    def rank(self, task_id: str, base_rank: int, queued_at: datetime) -> int:
        found = self.memo.get(task_id)
        # (base rank, queued at, aging, rank, from, until): compared field by field, as
        # building a key tuple for each of 40,000 tasks a cycle costs more than the compare.
        if found is not None and found[0] == base_rank and found[1] == queued_at and found[2] == self.aging and found[4] <= self.now < found[5]:
            return found[3]
        rank, until = self._rank_until(base_rank, queued_at)
        self.memo[task_id] = (base_rank, queued_at, self.aging, rank, self.now, until)
        return rank

    def _rank_until(self, base_rank: int, queued_at: datetime) -> tuple[int, datetime]:
        rank = effective_rank(base_rank, queued_at, self.now, self.aging)
        if rank >= MAX_RANK or not self.aging:
            return rank, datetime.max.replace(tzinfo=self.now.tzinfo)
        steps = rank - base_rank
        # The next step, a millisecond early: float rounding may not make it later than it is.
        return rank, queued_at + timedelta(hours=(steps + 1) / self.aging) - timedelta(milliseconds=1)

    def prune(self, live: int) -> None:
        """Forget the ranks of tasks long gone (called with the queue's length)."""
        if len(self.memo) > 2 * live + 1024:
            self.memo.clear()


class FairShare:
    """Weighted dominant-resource shares per tenant (accelerator units, CPU, memory)."""

    def __init__(self, totals: tuple[float, float, float], weight_of: Callable[[str], float]) -> None:
        self.totals = tuple(max(t, 1e-9) for t in totals)
        self.weight_of = weight_of
        self.used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        self._shares: dict[str, float] = {}  # cached until the tenant's usage changes
        self._versions: dict[str, int] = defaultdict(int)
        self.epoch = 0  # changes whenever any tenant's usage does

    def version(self, tenant: str) -> int:
        """Changes whenever the tenant's usage does (for callers that cache shares)."""
        return self._versions[tenant]

    def add(self, tenant: str, accel_units: float, cpu: float, memory_gb: float) -> None:
        self._shares.pop(tenant, None)
        self._versions[tenant] += 1
        self.epoch += 1
        used = self.used[tenant]
        used[0] += accel_units
        used[1] += cpu
        used[2] += memory_gb

    def set_used(self, tenant: str, used: list[float]) -> None:
        """The tenant's usage summed elsewhere (cycle_state.fair_share): replaces, not adds."""
        self._shares.pop(tenant, None)
        self._versions[tenant] += 1
        self.epoch += 1
        self.used[tenant] = list(used)

    def share(self, tenant: str) -> float:
        cached = self._shares.get(tenant)
        if cached is not None:
            return cached
        used = self.used.get(tenant)
        value = 0.0 if used is None else max(u / t for u, t in zip(used, self.totals, strict=True)) / self.weight_of(tenant)
        self._shares[tenant] = value
        return value


def tenant_weight(weights: dict[str, float]) -> Callable[[str], float]:
    """Weight of a tenant path: the product of the weights along its path."""

    cache: dict[str, float] = {}

    def weight(path: str) -> float:
        if path in cache:
            return cache[path]
        product = 1.0
        for ancestor in tenant_ancestors(path):
            product *= weights.get(ancestor, 1.0)
        cache[path] = product
        return product

    return weight


class _Entry:
    """A queued task in a line (a plain class: 40,000 are made every cycle)."""

    __slots__ = ("queued_at", "id", "rank", "tenant", "item", "line")

    def __init__(self, queued_at: datetime, task_id: str, rank: int, tenant: str, item: object) -> None:
        self.queued_at, self.id, self.rank, self.tenant, self.item = queued_at, task_id, rank, tenant, item
        self.line: tuple[str, int, str] = ("", 0, "")  # (queue, level, tenant) of its line, set by QueueOrder


_AGE_THEN_ID = itemgetter(1, 2)


def _shortest_first(entry: _Entry, now: datetime | None) -> tuple:
    """A shortest-first line's order: the smallest estimated remaining work first, tasks
    without an estimate last (oldest first).

    Work is the runtime estimate on the reference device (progress of earlier attempts
    taken off) × the devices held (gang workers × devices each), as Smith's rule orders
    jobs of unequal width. It counts less the longer the task has waited, relative to its
    own runtime: after waiting k runtimes, 1/(k+1)² of it (the response ratio of HRRN,
    squared). So a long, wide task is never starved by a stream of short ones: it leads its
    line once it has waited E·(√(W/w) − 1) for its estimate E, its work W and the smallest
    work w arriving — aging alone would not do, since every waiter reaches the top class
    and then the size decides again.
    """
    spec = getattr(entry.item, "spec", None)
    estimate = None if spec is None else spec.runtime_estimate_s
    if estimate is None:
        return (True, 0.0, entry.queued_at, entry.id)
    devices = spec.per_worker.devices
    work = estimate * spec.workers * (devices.count if devices is not None else 1)
    waited = max((now - entry.queued_at).total_seconds(), 0.0) if now is not None else 0.0
    return (False, work / (1.0 + waited / max(estimate, 1.0)) ** 2, entry.queued_at, entry.id)


class QueueOrder:
    """Hands out the next task to try. `block(queue)` stops a FIFO queue for the cycle.

    Per queue and priority level, the tenants' line heads sit in a heap ordered by (fair
    share, age). Shares only grow within a cycle, so a heap entry can only be stale on
    the low side: when the top's tenant has changed since it was pushed, it is re-pushed
    with the current share and the heap looked at again (lazy invalidation).
    """

    def __init__(self, items: Iterable, queue_of: Callable, rank_of: Callable, tenant_of: Callable, fair: FairShare) -> None:
        self._fill([(queue_of(item), item.queued_at, item.id, rank_of(item), tenant_of(item), item) for item in items], fair)

    @classmethod
    def of(cls, rows: list[tuple], fair: FairShare, now: datetime | None = None) -> QueueOrder:
        """From (queue, queued_at, id, rank, tenant, item) rows, as open_cycle builds them in one pass."""
        order = cls.__new__(cls)
        order._fill(rows, fair, now)
        return order

    def _fill(self, rows: list[tuple], fair: FairShare, now: datetime | None = None) -> None:
        self.fair = fair
        self.queues: dict[str, QueueSpec] = {}
        # queue name → level → tenant → tasks in age order
        self.lines: dict[str, dict[int, dict[str, deque]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(deque)))
        self.heaps: dict[tuple[str, int], list] = defaultdict(list)
        self.blocked: set[str] = set()
        self.paused: set[str] = set()  # at their share of a bounded cycle's front (cycle_heads.heads): resumed later
        self.where: dict[str, _Entry] = {}  # task id → its entry (.line: (queue, level, tenant)): see take(), entry()
        # Per queue: its best head and the fair-share epoch it was found at. A pop changes
        # only the popped queue's head, and an admission (which changes shares) is rare next
        # to the heads passed over, so most pops look at one queue's heaps, not every queue's.
        self._heads: dict[str, tuple] = {}
        self.skipped_ids: frozenset[str] | set[str] = frozenset()
        self.skipped = 0  # entries passed over by skip()
        rows.sort(key=_AGE_THEN_ID)  # a total order
        # Grouped first by (queue, level, tenant) in one flat dict: one lookup per row, not
        # three nested ones (the only part of a cycle's set-up that is per queued task).
        groups: dict[tuple, list[_Entry]] = {}
        where = self.where
        for queue, queued_at, task_id, rank, tenant, item in rows:
            entry = _Entry(queued_at, task_id, rank, tenant, item)
            if queue.ordering == "fifo":
                # One line in arrival order; the head still competes with other queues at
                # its own priority (see _head).
                key = (queue.name, _FIFO_LEVEL, "")
            else:
                key = (queue.name, rank, tenant)
            group = groups.get(key)
            if group is None:
                group = groups[key] = []
                self.queues.setdefault(queue.name, queue)
            group.append(entry)
            entry.line = key
            where[task_id] = entry
        for (name, level, tenant), entries in groups.items():
            self.lines[name][level][tenant] = deque(entries)
        for name, levels in self.lines.items():
            shortest_first = self.queues[name].ordering == "shortest-first"
            for level, tenants in levels.items():
                for tenant, line in tenants.items():
                    if shortest_first:
                        tenants[tenant] = deque(sorted(line, key=lambda e: _shortest_first(e, now)))
                    self._push(name, level, tenant)
        self.levels = {name: sorted(levels, reverse=True) for name, levels in self.lines.items()}

    def _push(self, name: str, level: int, tenant: str) -> None:
        line = self.lines[name][level][tenant]
        if self.skipped_ids and level != _FIFO_LEVEL:
            while line and line[0].id in self.skipped_ids:
                line.popleft()  # passed over without a turn (see skip)
                self.skipped += 1
        if line:
            head = line[0]
            entry = (self.fair.share(head.tenant), head.queued_at, head.id, tenant, self.fair.version(head.tenant))
            heapq.heappush(self.heaps[(name, level)], entry)

    def skip(self, task_ids: set[str]) -> None:
        """Pass over these tasks wherever they come up from now on, without handing them out
        (they are counted in `skipped`): one set lookup each instead of a turn. FIFO lines
        are left alone (nothing overtakes their head)."""
        self.skipped_ids = task_ids
        self._heads.clear()
        for name, levels in self.lines.items():
            for level, tenants in levels.items():
                if level == _FIFO_LEVEL:
                    continue
                self.heaps[(name, level)] = []
                for tenant in tenants:
                    self._push(name, level, tenant)

    def block(self, queue_name: str) -> None:
        self.blocked.add(queue_name)

    def pause(self, queue_name: str) -> None:
        """Hand out nothing more from this queue until `resume()` (unlike block(), for now)."""
        self.paused.add(queue_name)

    def resume(self) -> None:
        self.paused.clear()

    def open_queues(self) -> int:
        """Queues with a task not handed out, not blocked."""
        lines = ((name, line) for name, levels in self.lines.items() for tenants in levels.values() for line in tenants.values())
        return len({name for name, line in lines if line and name not in self.blocked})

    def _head(self, queue_name: str):
        for level in self.levels[queue_name]:
            heap = self.heaps[(queue_name, level)]
            while heap:
                share, queued_at, task_id, tenant, version = heap[0]
                line = self.lines[queue_name][level][tenant]
                if not line or version != self.fair.version(line[0].tenant) or task_id != line[0].id:
                    # A stale share (re-file under the current one), or the line's head was
                    # taken out of turn (take()): the entry no longer describes the line.
                    heapq.heappop(heap)
                    self._push(queue_name, level, tenant)
                    continue
                head = line[0]
                rank = head.rank if level == _FIFO_LEVEL else level
                return (-rank, share, queued_at, task_id), level, tenant
        return None

    def pop(self):
        """(queue, item) with the best head over all queues, or None when all are empty."""
        best, epoch = None, self.fair.epoch
        for name in self.lines:
            if name in self.blocked or name in self.paused:
                continue
            cached = self._heads.get(name)
            if cached is not None and cached[1] == epoch:
                head = cached[0]
            else:
                head = self._head(name)
                self._heads[name] = (head, epoch)
            if head is not None and (best is None or head[0] < best[0]):
                best = (*head, name)
        if best is None:
            return None
        _, level, tenant, name = best
        del self._heads[name]
        heapq.heappop(self.heaps[(name, level)])
        entry = self.lines[name][level][tenant].popleft()
        self._push(name, level, tenant)
        return self.queues[name], entry.item

    def take(self, task_id: str):
        """(queue, item) for one task, out of turn (a preemptor claiming what it freed); None
        when it is not here, already handed out, or not the head of its FIFO queue."""
        found = self.where.get(task_id)
        if found is None or found.line[0] in self.blocked:
            return None
        name, level, tenant = found.line
        line = self.lines[name][level][tenant]
        entry = next((e for e in line if e.id == task_id), None)
        if entry is None or (level == _FIFO_LEVEL and line[0] is not entry):
            return None  # a FIFO queue never lets a task overtake its head
        line.remove(entry)  # its heap entry, if it led the line, goes stale (see _head)
        self._heads.pop(name, None)
        return self.queues[name], entry.item

    def entry(self, task_id: str):
        """(item, priority rank now) of a queued task, handed out or not; None: not queued."""
        found = self.where.get(task_id)
        return None if found is None else (found.item, found.rank)

    def left(self) -> int:
        """Items not handed out (in no blocked queue)."""
        open_lines = (levels for name, levels in self.lines.items() if name not in self.blocked)
        return sum(len(line) for levels in open_lines for tenants in levels.values() for line in tenants.values())

    def remaining(self, blocked_only: bool = False):
        """Items not handed out (a blocked FIFO queue's tail), in queue order."""
        for name, levels in self.lines.items():
            if blocked_only and name not in self.blocked:
                continue
            for rank in sorted(levels, reverse=True):
                for line in levels[rank].values():
                    for entry in line:
                        yield self.queues[name], entry.item
