"""The control plane's own task history → a replayable trace.

Every finished task becomes a TraceTask: it arrives when it was submitted (relative to
the first exported task), asks for what it asked for (its stored spec), and takes what
it really took: the measured runtime on the device model it ran on (`work_s`), scaled to
the reference device by that model's relative performance (`reference_s`).

The import rule keeps `sim` free of the server and of SQLAlchemy: the server reads its
tables into `TaskRecord`s (hetpool.server.services.history) and this module converts
them, needing no database.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core import clock
from hetpool.core.specs import parse_spec
from hetpool.core.tasks import TaskSpec
from hetpool.sim.trace import TraceTask

FINISHED = "succeeded"
FAILED = "failed"


@dataclass(frozen=True)
class TaskRecord:
    """What the history needs of one task row (and its final attempt's rank-0 model)."""

    id: str
    state: str
    spec: dict
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    model: str | None = None  # device model of rank 0 in the final attempt


def as_utc(value: Any) -> datetime | None:
    """A datetime (naive means UTC) from a datetime or the ISO text SQLite stores."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.strip())
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    return clock.as_utc(value)


def relative_performance(spec: TaskSpec, model: str | None, catalog: DeviceCatalog) -> float:
    """How fast `spec` ran on `model` relative to the reference device: the task's own
    hint, else the catalog's figure for its type; 1.0 device-less or for unknown models."""
    if model is None or spec.per_worker.devices is None:
        return 1.0
    if spec.relative_performance.get(model):
        return spec.relative_performance[model]
    if model not in catalog:
        return 1.0
    return catalog.get(model).perf_for(spec.task_type)


def _task_spec(document: dict) -> TaskSpec:
    fields = {k: v for k, v in document.items() if k != "kind"}
    spec = parse_spec({"kind": "Task", **fields})
    assert isinstance(spec, TaskSpec)
    return spec


def history_from_records(
    records: Iterable[TaskRecord],
    catalog: DeviceCatalog,
    *,
    since: datetime | None = None,
    include_failed: bool = False,
    include_unstarted: bool = False,
) -> list[TraceTask]:
    """TraceTasks for the records that qualify, ordered by submission time."""
    since = as_utc(since)
    states = {FINISHED, FAILED} if include_failed else {FINISHED}
    chosen: list[tuple[TaskRecord, TaskSpec, float, dict[str, float]]] = []
    for record in sorted(records, key=lambda r: (as_utc(r.created_at), r.id)):
        if since is not None and as_utc(record.created_at) < since:
            continue
        spec = _task_spec(record.spec)
        started, finished = as_utc(record.started_at), as_utc(record.finished_at)
        if started is None:
            if not include_unstarted or spec.runtime_estimate_s is None:
                continue
            chosen.append((record, spec, spec.runtime_estimate_s, {}))
            continue
        if record.state not in states or finished is None:
            continue
        measured = max(0.0, (finished - started).total_seconds())
        perf = relative_performance(spec, record.model, catalog)
        # A device-less task runs the same everywhere: TraceTask reads its time from "*".
        key = record.model if record.model and spec.per_worker.devices is not None else "*"
        chosen.append((record, spec, measured * perf, {key: measured}))
    if not chosen:
        return []
    start = as_utc(chosen[0][0].created_at)
    return [
        TraceTask(id=record.id, arrival_s=(as_utc(record.created_at) - start).total_seconds(), spec=spec, reference_s=reference_s, work_s=work_s)
        for record, spec, reference_s, work_s in chosen
    ]
