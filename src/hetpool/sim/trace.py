"""Traces: tasks with an arrival time and the work they really take.

A trace line is JSON: {"id", "arrival_s", "task": <Task spec document>, "reference_s",
"work_s"}. What the scheduler may know stays in the task spec (its runtime_estimate,
its relative_performance hints); what actually happens is `work_s` (seconds on each
device model it may run on) or, for models not listed, `reference_s` scaled by the
model's relative performance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceModelSpec
from hetpool.core.specs import parse_spec
from hetpool.core.tasks import TaskSpec
from hetpool.core.text import decode_utf8


@dataclass(frozen=True)
class TraceTask:
    id: str
    arrival_s: float
    spec: TaskSpec
    reference_s: float  # actual runtime on the reference device (relative performance 1.0)
    work_s: dict[str, float] = field(default_factory=dict)  # actual runtime per device model

    def actual_seconds(self, model: DeviceModelSpec | None) -> float:
        """How long this task really runs on `model` (None: device-less)."""
        if model is None or self.spec.per_worker.devices is None:
            return self.work_s.get("*", self.reference_s)
        if model.name in self.work_s:
            return self.work_s[model.name]
        return self.reference_s / model.perf_for(self.spec.task_type)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "arrival_s": self.arrival_s,
            "task": self.spec.model_dump(mode="json", by_alias=True, exclude_defaults=True),
            "reference_s": self.reference_s,
            "work_s": self.work_s,
        }


def parse_trace_line(record: dict, where: str = "") -> TraceTask:
    try:
        task = dict(record["task"])
        task.setdefault("kind", "Task")
        spec = parse_spec(task, where)
        return TraceTask(
            id=str(record["id"]),
            arrival_s=float(record["arrival_s"]),
            spec=spec,
            reference_s=float(record["reference_s"]),
            work_s={str(k): float(v) for k, v in (record.get("work_s") or {}).items()},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"{where}: trace line needs id, arrival_s, task, reference_s (and optional work_s): {exc}") from None


def read_trace(path: Path) -> list[TraceTask]:
    """The trace's tasks by arrival; a file that cannot be read, is not UTF-8 or holds a
    line that is not a JSON object is a SpecError naming the file (and line), not a traceback."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    tasks = []
    for number, line in enumerate(decode_utf8(data, str(path)).splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as exc:
                raise SpecError(f"{path}:{number}: not a JSON line: {exc}") from None
            if not isinstance(record, dict):
                raise SpecError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            tasks.append(parse_trace_line(record, f"{path}:{number}"))
    return sorted(tasks, key=lambda t: (t.arrival_s, t.id))


def write_trace(tasks: Iterable[TraceTask], path: Path) -> int:
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.to_json(), ensure_ascii=False) + "\n")
            count += 1
    return count
