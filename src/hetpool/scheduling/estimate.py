"""Estimates: runtime on the placed devices (scaled by relative performance) and cost."""

from __future__ import annotations

from hetpool.core.inventory import DeviceModelSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.assign import WorkerPlacement


def runtime_on(task: TaskSpec, model: DeviceModelSpec | None) -> float | None:
    """Seconds the task should take on `model`, from its estimate on the reference device."""
    base = task.runtime_estimate_s
    if base is None:
        return None
    if model is None or task.per_worker.devices is None:
        return base
    return base / perf_of(task, model)


def perf_of(task: TaskSpec, model: DeviceModelSpec) -> float:
    """The task's own hint for this model if it gave one, else the catalog's figure."""
    return task.relative_performance.get(model.name) or model.perf_for(task.task_type)


def cost_per_hour(placements: list[WorkerPlacement]) -> float:
    return round(sum(p.price_per_hour for p in placements), 4)
