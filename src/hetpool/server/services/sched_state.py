"""The scheduler's view of the database: running work, learned runtimes and measured
performance (the snapshot itself is kept by cluster_state)."""

from __future__ import annotations

import statistics
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.inventory import TaskType
from hetpool.core.states import TaskState
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.scheduling.estimate import runtime_on, with_progress
from hetpool.scheduling.forecast import end_after
from hetpool.scheduling.running import BASIS_ESTIMATE, BASIS_HISTORY, RunningTask, revise_overruns
from hetpool.scheduling.snapshot import Allocation
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.server.services.active_work import ActiveTask, read_uncached
from hetpool.server.services.inventory import Inventory

HISTORY_SAMPLES = 20


def _successful_runs(session: Session, limit: int) -> list[tuple[str, str, float, str]]:
    """(template, task type, seconds run, rank-0 device model) of recent successful runs."""
    rows = session.execute(
        select(TaskRow.template, TaskRow.task_type, TaskRow.started_at, TaskRow.finished_at, PlacementRow.model)
        .join(PlacementRow, (PlacementRow.task_id == TaskRow.id) & (PlacementRow.attempt == TaskRow.attempt) & (PlacementRow.rank == 0))
        .where(TaskRow.state == TaskState.SUCCEEDED.value, TaskRow.template.is_not(None), TaskRow.started_at.is_not(None))
        .order_by(TaskRow.finished_at.desc())
        .limit(limit)
    ).all()
    return [
        (template, task_type, max((finished - started).total_seconds(), 0.0), model)
        for template, task_type, started, finished, model in rows
        if finished is not None
    ]


def learned_runtimes(session: Session, inv: Inventory) -> dict[str, float]:
    """Per template: median runtime of its recent successful runs, on the reference device.

    A run on a device with relative performance p that took t seconds counts as t·p.
    """
    samples: dict[str, list[float]] = {}
    for template, task_type, seconds, model in _successful_runs(session, limit=2000):
        if len(samples.get(template, ())) >= HISTORY_SAMPLES:
            continue
        perf = inv.catalog.get(model).perf_for(TaskType(task_type)) if model in inv.catalog else 1.0
        samples.setdefault(template, []).append(seconds * perf)
    return {template: statistics.median(values) for template, values in samples.items() if values}


def with_runtime(spec: TaskSpec, learned: dict[str, float]) -> TaskSpec:
    """The spec with a learned runtime estimate when the user gave none."""
    if spec.runtime_estimate is None and spec.template in learned:
        return spec.with_runtime_estimate(f"{max(learned[spec.template], 1.0):.0f}s")
    return spec


def running_tasks(
    session: Session, inv: Inventory, learned: dict[str, float], now: datetime, active: list[ActiveTask] | None = None
) -> list[RunningTask]:
    """Admitted, dispatched and running work with its allocations and expected end; an
    end that has passed while the task still runs is revised (see _expected_end).
    `active`: the active tasks as the caller read them (active_work's cache); else read here."""
    max_preemptions = inv.policy.max_preemptions
    out = []
    for task in read_uncached(session) if active is None else active:
        held = task.fixed.held
        started = task.started_at or task.admitted_at or now
        allocations = tuple(h.allocation for h in held)
        if task.fixed.spec is None:  # its spec no longer parses: it still holds its devices
            out.append(_holding_only(task, allocations, started))
            continue
        try:
            spec = with_progress(with_runtime(task.fixed.spec, learned), task.progress_s)
        except Exception:  # a learned runtime or progress the spec cannot take: it still holds its devices
            out.append(_holding_only(task, allocations, started))
            continue
        expected_end, basis, revised_from = _expected_end(inv, spec, task.template, [h.model for h in held], started, learned, now)
        out.append(
            RunningTask(
                id=task.id,
                tenant=task.tenant,
                priority_rank=Priority(task.priority).rank,
                task_type=spec.task_type,
                allocations=allocations,
                started_at=started,
                expected_end=expected_end,
                preemptible=spec.preemptible and task.preempt_reason is None and task.preemptions < max_preemptions,
                being_preempted=task.preempt_reason is not None,
                env=spec.env.value,
                estimate_basis=basis,
                revised_from=revised_from,
            )
        )
    # In start order, then id: the database returns rows in whatever order it stores them
    # (PostgreSQL moves a row each time it is updated), and ties the cycle breaks by list
    # order (forecast, victims) must not depend on that.
    out.sort(key=lambda r: (r.started_at, r.id))
    return revise_overruns(out, now)


def _expected_end(inv: Inventory, spec: TaskSpec, template, models: list[str], started: datetime, learned: dict[str, float], now: datetime):
    """(expected end, how it was arrived at, the estimate's end if that was revised).

    The task's runtime estimate on its slowest device gives the end. Once that end has
    passed, its template's history (the median of recent successful runs, `learned`) is
    the better guess if it says the task runs longer; once that has passed too, the core's
    overrun rule applies from there (running.revise_overruns, in running_tasks)."""
    if spec.runtime_estimate_s is None or not models:
        return None, BASIS_ESTIMATE, None
    # The slowest worker's device decides when a gang ends; as the cycle reckons it (runtime_on).
    seconds = max(runtime_on(spec, inv.catalog.get(m) if m in inv.catalog else None) for m in set(models))
    estimated = end_after(started, seconds)  # None: past any date
    if estimated is not None and estimated <= now and template in learned and spec.runtime_estimate_s > 0:
        from_history = end_after(started, learned[template] * seconds / spec.runtime_estimate_s)
        if from_history is not None and from_history > estimated:  # past too: the overrun counts from there
            return from_history, BASIS_HISTORY, estimated
    return estimated, BASIS_ESTIMATE, None


def _holding_only(task: ActiveTask, allocations: tuple[Allocation, ...], started: datetime) -> RunningTask:
    """Work whose spec cannot be read: it holds its placement, with no known end, and is
    not evicted on the strength of a spec nobody can read."""
    rank = Priority(task.priority).rank if task.priority in Priority.__members__.values() else Priority.NORMAL.rank
    task_type = TaskType(task.task_type) if task.task_type in TaskType.__members__.values() else TaskType.GENERAL
    return RunningTask(task.id, task.tenant, rank, task_type, allocations, started, None, False, task.preempt_reason is not None, task.env)


MIN_MODEL_SAMPLES = 3


def measured_performance(session: Session, inv: Inventory) -> dict[str, dict[TaskType, float]]:
    """Relative performance measured from history, where it can be.

    For a template that ran successfully on several device models (at least
    MIN_MODEL_SAMPLES runs each), the median runtimes compare the models directly: the
    model with most runs is the anchor and keeps its catalog figure; another model m gets
    perf(anchor) × runtime(anchor) / runtime(m). Per (model, task type) the median over
    templates is taken. These figures override the catalog's table.
    """
    runs: dict[tuple[str, str], dict[str, list[float]]] = {}
    for template, task_type, seconds, model in _successful_runs(session, limit=5000):
        if model in inv.catalog and seconds > 0:
            runs.setdefault((template, task_type), {}).setdefault(model, []).append(seconds)
    found: dict[tuple[str, TaskType], list[float]] = {}
    for (_template, task_type), by_model in runs.items():
        usable = {m: statistics.median(v) for m, v in by_model.items() if len(v) >= MIN_MODEL_SAMPLES}
        if len(usable) < 2:
            continue
        anchor = max(usable, key=lambda m: (len(by_model[m]), m))
        kind = TaskType(task_type)
        anchor_perf = inv.catalog.get(anchor).perf_for(kind)
        for model, median in usable.items():
            found.setdefault((model, kind), []).append(anchor_perf * usable[anchor] / median)
    out: dict[str, dict[TaskType, float]] = {}
    for (model, kind), values in found.items():
        out.setdefault(model, {})[kind] = round(statistics.median(values), 4)
    return out


def apply_measured(inv: Inventory, measured: dict[str, dict[TaskType, float]]) -> Inventory:
    """The inventory with measured relative performance written over the catalog's."""
    if not measured:
        return inv
    updated = []
    for name, factors in measured.items():
        model = inv.catalog.get(name)
        updated.append(model.model_copy(update={"relative_performance": {**model.relative_performance, **factors}}))
    inv.catalog = inv.catalog.with_models(updated)
    return inv
