"""One scheduling cycle: a pure function from a snapshot and a queue to decisions.

Recipe (after Kueue's `schedule()`): order the queue → for each head, assign on the
working snapshot → admit and subtract its capacity, or record why it waits. Only the
server's workers turn decisions into database writes and backend calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import Assignment, assign
from hetpool.scheduling.explain import explanation
from hetpool.scheduling.filters import CompatCheck
from hetpool.scheduling.snapshot import Snapshot


@dataclass(frozen=True)
class QueuedTask:
    id: str
    spec: TaskSpec
    queued_at: datetime


@dataclass
class Decision:
    task_id: str
    admit: bool
    assignment: Assignment
    explanation: dict = field(default_factory=dict)


@dataclass
class CycleResult:
    decisions: list[Decision]
    duration_s: float

    @property
    def admitted(self) -> list[Decision]:
        return [d for d in self.decisions if d.admit]


def queue_order(queue: list[QueuedTask]) -> list[QueuedTask]:
    """Priority class first, then age (oldest first); ids break ties deterministically."""
    return sorted(queue, key=lambda q: (-q.spec.priority.rank, q.queued_at, q.id))


def memoized(compat_check: CompatCheck) -> CompatCheck:
    """Compatibility verdicts per (model, stack, framework request) for one cycle.

    Many queued tasks ask for the same framework spec; a pool's stack object is shared
    by all its rows, so its id() is a safe key within one snapshot.
    """
    cache: dict = {}

    def check(model, stack, framework, *, has_image: bool = False):
        key = (model.name, id(stack), framework.model_dump_json() if framework else "", has_image)
        if key not in cache:
            cache[key] = compat_check(model, stack, framework, has_image=has_image)
        return cache[key]

    return check


def run_cycle(snapshot: Snapshot, queue: list[QueuedTask], compat_check: CompatCheck, now: datetime) -> CycleResult:
    started = time.perf_counter()
    compat_check = memoized(compat_check)
    working = snapshot.copy()
    idle = snapshot.emptied()
    decisions: list[Decision] = []
    for item in queue_order(queue):
        result = assign(working, item.spec, compat_check)
        if result.feasible:
            for p in result.placements:
                row = working.row_of(p.node, p.pool)
                working.take(row, p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
            decisions.append(Decision(item.id, True, result, explanation(result, True)))
        else:
            fits_when_idle = assign(idle, item.spec, compat_check).feasible
            decisions.append(Decision(item.id, False, result, explanation(result, fits_when_idle)))
    return CycleResult(decisions=decisions, duration_s=time.perf_counter() - started)
