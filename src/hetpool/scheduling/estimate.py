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


# A resumed task's remaining estimate never falls below this share of its estimate: its
# progress is the time it ran, which says nothing of how much a checkpoint lost, and an
# estimate that was too short must not read as "done" (server: services/checkpoints.py).
MIN_REMAINING_SHARE = 0.1
MIN_REMAINING_S = 60.0


def with_progress(spec: TaskSpec, progress_s: float | None) -> TaskSpec:
    """The spec with its runtime estimate reduced by `progress_s`, the seconds (on the
    reference device) earlier attempts ran before they checkpointed."""
    if not progress_s or spec.runtime_estimate_s is None:
        return spec
    total = spec.runtime_estimate_s
    left = max(total - progress_s, total * MIN_REMAINING_SHARE, min(MIN_REMAINING_S, total))
    return spec.with_runtime_estimate(f"{left:.0f}s")
