"""Deadlines in the cycle: prefer what meets one, and say when one can no longer be met.

A task may carry a deadline (`goal.deadline`, core/goal.py; the server stores it as an ISO
time, pinned at submit; a duration counts from the time the task entered the queue).
The core does two things with it, and nothing for a task without one:

1. The deadline step (`assign_kwargs`, before the fit phase places a head): when some of
   the task's candidate pools would finish it by its deadline if it started now
   (now + `runtime_on` their device model) and others would not, `assign` tries the ones
   that meet it first, each choice in the task's usual order, then the others in that
   order (`assign.deadline_first`). When all or none of them meet it, or the task has no
   runtime estimate, the order is the usual one. Waiting for the preferred model
   (backfill.prefer_waiting) needs no rule of its own: it waits only when the preferred
   model is expected to finish earlier than the substitute, so it never trades a met
   deadline for a missed one.
2. At risk (`mark_at_risk`, after the waiting tasks' start estimates): a waiting task whose
   estimated start (or now, when there is none) plus its runtime is after its deadline has
   the facts `deadline`, `deadline_at_risk: true` and `deadline_late_s` (the expected
   lateness) in its explanation, which then says so.

The work is per head that has a deadline, and per pool (not per node): a task without a
deadline costs two attribute reads.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hetpool.core.inventory import DeviceModelSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import candidate_groups
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.snapshot import Snapshot

if TYPE_CHECKING:  # cycle imports this module
    from hetpool.scheduling.cycle import Decision, QueuedTask

# Expected finishes are taken up to the minute (and lateness with them): an explanation
# whose finish is now + runtime is rewritten once a minute, not every cycle.


def deadline_of(spec: TaskSpec, queued_at: datetime) -> datetime | None:
    """The task's deadline as a time (None: it has none, or it cannot be read)."""
    goal = spec.goal
    if goal is None or goal.deadline is None:
        return None
    try:
        return goal.deadline_at(queued_at)
    except (ValueError, OverflowError):  # validated on input; stored by an older version
        return None


def meeting_pools(snap: Snapshot, spec: TaskSpec, seconds_left: float) -> frozenset[int] | None:
    """The candidate pools (indices) whose model finishes the task within `seconds_left`,
    when that tells them apart: None when the task has no runtime estimate, or when all of
    its candidate pools or none of them meet the deadline (the usual order then stands)."""
    if spec.runtime_estimate_s is None:
        return None
    pools = {i for group in candidate_groups(snap, spec) for i in group.pools}
    runtimes: dict[str, float | None] = {}
    meets = set()
    for index in pools:
        model = snap.pools[index].model
        if model.name not in runtimes:
            runtimes[model.name] = runtime_on(spec, model)
        runtime = runtimes[model.name]
        if runtime is not None and runtime <= seconds_left:
            meets.add(index)
    if not meets or len(meets) == len(pools):
        return None
    return frozenset(meets)


def assign_kwargs(snap: Snapshot, item: QueuedTask, now: datetime, kwargs: dict) -> dict:
    """`kwargs` for placing `item` now, with the deadline step where it applies."""
    goal = item.spec.goal
    if goal is None or goal.deadline is None:  # the hot path: most heads have no deadline
        return kwargs
    deadline = deadline_of(item.spec, item.queued_at)
    if deadline is None:
        return kwargs
    meets = meeting_pools(snap, item.spec, (deadline - now).total_seconds())
    return kwargs if meets is None else {**kwargs, "deadline_pools": meets}


def _fastest_runtime(snap: Snapshot, spec: TaskSpec) -> float | None:
    """The runtime on the fastest of the task's candidate models (its best case)."""
    runtimes = [runtime_on(spec, snap.pools[i].model) for group in candidate_groups(snap, spec) for i in group.pools]
    known = [r for r in runtimes if r is not None]
    return min(known) if known else runtime_on(spec, None)


def _runtime_at(snap: Snapshot, spec: TaskSpec, pool: object, models: dict[str, DeviceModelSpec]) -> float | None:
    """The runtime on the pool the forecast expects the task to start in, else its best case."""
    index = snap.pool_by_name.get(pool) if isinstance(pool, str) else None
    if index is not None:
        model = snap.pools[index].model
        return runtime_on(spec, models.get(model.name, model))
    return _fastest_runtime(snap, spec)


def deadline_facts(deadline: datetime, start: datetime, runtime_s: float | None, now: datetime) -> dict:
    """The explanation's deadline facts for a task expected to start at `start` (no
    earlier than now) and to run `runtime_s` (None: unknown; it is late only once the
    deadline has passed). The finish is taken up to the minute."""
    facts: dict = {"deadline": deadline.isoformat()}
    finish = now
    if runtime_s is not None:
        try:
            finish = max(start, now) + timedelta(seconds=runtime_s)
        except OverflowError:  # past the calendar: certainly late
            finish = datetime.max.replace(tzinfo=deadline.tzinfo)
    finish = _up_to_minute(finish)
    if runtime_s is not None:
        facts["expected_finish"] = finish.isoformat()
        facts["expected_runtime_s"] = round(runtime_s)
    late = (finish - deadline).total_seconds()
    facts["deadline_at_risk"] = late > 0
    if late > 0:
        facts["deadline_late_s"] = round(late)
    return facts


def _up_to_minute(when: datetime) -> datetime:
    if not (when.second or when.microsecond):
        return when
    try:
        return when.replace(second=0, microsecond=0) + timedelta(minutes=1)
    except OverflowError:
        return when


def mark_at_risk(snap: Snapshot, waiting: list[QueuedTask], decisions: list[Decision], now: datetime, models: dict[str, DeviceModelSpec]) -> None:
    """Write the deadline facts into each waiting task's explanation (the tasks that have a
    deadline), from its estimated start and pool (forecast.attach_estimates) if it has them."""
    by_id: dict[str, Decision] | None = None
    for item in waiting:
        deadline = deadline_of(item.spec, item.queued_at)
        if deadline is None:
            continue
        if by_id is None:  # only once some waiting task has a deadline
            by_id = {d.task_id: d for d in decisions}
        expl = by_id[item.id].explanation
        estimated = expl.facts.get("estimated_start")
        try:
            start = datetime.fromisoformat(estimated) if isinstance(estimated, str) else now
        except ValueError:
            start = now
        runtime = _runtime_at(snap, item.spec, expl.facts.get("estimated_pool"), models)
        expl.with_facts(**deadline_facts(deadline, start, runtime, now))
