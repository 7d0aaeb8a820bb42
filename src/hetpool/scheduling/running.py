"""What the scheduler knows about work that already holds capacity."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hetpool.core.inventory import TaskType
from hetpool.scheduling.snapshot import Allocation


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
