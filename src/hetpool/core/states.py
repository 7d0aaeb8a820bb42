"""The task state machine. `next_state` is the only place a transition is decided."""

from __future__ import annotations

from enum import StrEnum

from hetpool.core.errors import InvalidTransitionError


class TaskState(StrEnum):
    PENDING_APPROVAL = "pending_approval"
    QUEUED = "queued"
    ADMITTED = "admitted"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    UNKNOWN = "unknown"  # dispatched, but its backend cannot be reached: neither lost nor failed
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})
# States in which a task's placement occupies capacity.
ACTIVE_STATES = frozenset({TaskState.ADMITTED, TaskState.DISPATCHED, TaskState.RUNNING, TaskState.UNKNOWN})

ALLOWED_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING_APPROVAL: frozenset({TaskState.QUEUED, TaskState.CANCELLED, TaskState.FAILED}),
    TaskState.QUEUED: frozenset({TaskState.ADMITTED, TaskState.CANCELLED, TaskState.FAILED}),
    TaskState.ADMITTED: frozenset({TaskState.DISPATCHED, TaskState.QUEUED, TaskState.CANCELLED, TaskState.FAILED, TaskState.PREEMPTED}),
    TaskState.DISPATCHED: frozenset(
        {TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED, TaskState.PREEMPTED, TaskState.UNKNOWN}
    ),
    TaskState.RUNNING: frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED, TaskState.PREEMPTED, TaskState.UNKNOWN}),
    TaskState.UNKNOWN: frozenset({TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED, TaskState.PREEMPTED}),
    TaskState.PREEMPTED: frozenset({TaskState.QUEUED, TaskState.CANCELLED}),
    TaskState.SUCCEEDED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.CANCELLED: frozenset(),
}


def check_transition(current: TaskState, target: TaskState) -> None:
    if target not in ALLOWED_TRANSITIONS[current]:
        allowed = ", ".join(sorted(s.value for s in ALLOWED_TRANSITIONS[current])) or "none (terminal)"
        raise InvalidTransitionError(f"a task in state '{current.value}' cannot move to '{target.value}' (allowed: {allowed})")
