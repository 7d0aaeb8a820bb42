"""What the scheduler knows about work that already holds capacity, and how the expected
end of work that has overrun its estimate is revised."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from hetpool.core.inventory import TaskType
from hetpool.scheduling.snapshot import Allocation

# How an expected end was arrived at (RunningTask.estimate_basis, and the `estimate_basis`
# fact of an explanation that counted on it).
BASIS_ESTIMATE = "estimate"  # the task's own runtime estimate (or its template's learned one)
BASIS_HISTORY = "history"  # past its estimate; its template's median runtime says it still runs
BASIS_OVERRUN = "overrun"  # past its estimate: revised by OVERRUN rule below

# Work past its expected end still runs at least this much longer in any estimate: a
# running task is never "free now" (the next cycle sees it again if it has not ended).
OVERRUN_MIN_REMAINING_S = 60.0


@dataclass(frozen=True)
class RunningTask:
    """An admitted, dispatched or running task: its workers' allocations and timing."""

    id: str
    tenant: str
    priority_rank: int
    task_type: TaskType
    allocations: tuple[Allocation, ...]
    started_at: datetime
    expected_end: datetime | None  # None: no runtime estimate
    preemptible: bool = True
    being_preempted: bool = False  # asked to give its devices back; not gone yet
    env: str = "dev"  # the task's environment (quotas are per environment)
    estimate_basis: str = BASIS_ESTIMATE  # how expected_end was arrived at
    revised_from: datetime | None = None  # the end its estimate gave, when expected_end is a revision


def overrun_end(estimated_end: datetime, now: datetime) -> datetime:
    """When work still running at `now`, past its `estimated_end`, is now expected to end.

    The rule: a task that has overrun its estimate by d is expected to overrun by d more,
    and to run at least OVERRUN_MIN_REMAINING_S more — end = now + max(60 s, d). The
    estimate has proved wrong, so the only evidence left is how long the task has run past
    it: the longer it has overrun, the longer it is expected to still run (its expected end
    recedes at twice the clock's pace), so nothing counts on it forever as "free now". The
    rule is deliberately gentle at first (a task a few seconds late is expected a minute
    later, not a whole estimate later): a backfill reservation counting on it moves out
    step by step rather than jumping, which would let backfill delay the reserved head.
    """
    overrun_s = max((now - estimated_end).total_seconds(), 0.0)
    return now + timedelta(seconds=max(OVERRUN_MIN_REMAINING_S, overrun_s))


def _revised(task: RunningTask, end: datetime, revised_from: datetime) -> RunningTask:
    """`task` with its end revised past an overrun. Copied through the instance dict: a long-
    running estate revises every overrun task each cycle (half the running work, in the
    sim), and a frozen dataclass's __init__ or dataclasses.replace costs ~5x more; the
    copy is a new object like replace's, the original is not touched."""
    revised = object.__new__(RunningTask)
    fields = revised.__dict__
    fields.update(task.__dict__)
    fields["expected_end"], fields["estimate_basis"], fields["revised_from"] = end, BASIS_OVERRUN, revised_from
    return revised


def revise_overruns(running: list[RunningTask], now: datetime) -> list[RunningTask]:
    """`running` with every expected end that is not after `now` revised (see overrun_end).

    Idempotent: a revised end lies after `now`. Every reader of running ends in a cycle
    (reservations, wait-for-preferred, the start forecast) reads the revised ones."""
    out = []
    append = out.append
    for task in running:
        end = task.expected_end
        if end is not None and end <= now:
            append(_revised(task, overrun_end(end, now), task.revised_from or end))
        else:
            append(task)
    return out


def exempt_recent(running: list[RunningTask], now: datetime, exempt_s: float) -> list[RunningTask]:
    """`running` with the work that started less than `exempt_s` ago made non-preemptible
    for this cycle (policy.preempt_exempt_time, Slurm's PreemptExemptTime): on an estate
    where many higher-priority heads wait, work started a cycle ago is the first victim of
    the next plan (most recently started goes first), and without a minimum run time it can
    be started and evicted again every few cycles."""
    if exempt_s <= 0:
        return running
    return [replace(r, preemptible=False) if r.preemptible and (now - r.started_at).total_seconds() < exempt_s else r for r in running]
