"""The task state machine, by what it must do: the documented life of a task passes, the
shortcuts that would skip a gate (approval, admission, requeue) are refused with a message
that names the way out, and an ended task stays ended. The table itself is not restated
here; tests/server/test_task_transitions_api.py checks that the API refuses the same."""

from __future__ import annotations

import pytest

from hetpool.core.errors import InvalidTransitionError
from hetpool.core.states import ALLOWED_TRANSITIONS, TERMINAL_STATES, TaskState, check_transition

S = TaskState

# DESIGN.md: pending_approval → queued → admitted → dispatched → running → succeeded | failed | cancelled | preempted (→ queued)
LIVES = {
    "approved and ran": [S.PENDING_APPROVAL, S.QUEUED, S.ADMITTED, S.DISPATCHED, S.RUNNING, S.SUCCEEDED],
    "failed while running": [S.QUEUED, S.ADMITTED, S.DISPATCHED, S.RUNNING, S.FAILED],
    "finished before the first poll": [S.QUEUED, S.ADMITTED, S.DISPATCHED, S.SUCCEEDED],
    "preempted and requeued": [S.QUEUED, S.ADMITTED, S.DISPATCHED, S.RUNNING, S.PREEMPTED, S.QUEUED, S.ADMITTED],
    "preempted before dispatch": [S.QUEUED, S.ADMITTED, S.PREEMPTED, S.CANCELLED],
    "engine unreachable, then back": [S.QUEUED, S.ADMITTED, S.DISPATCHED, S.RUNNING, S.UNKNOWN, S.RUNNING, S.SUCCEEDED],
    "rejected approval": [S.PENDING_APPROVAL, S.CANCELLED],
    "admission undone (dispatch lost its placement)": [S.QUEUED, S.ADMITTED, S.QUEUED],
}


@pytest.mark.parametrize("life", LIVES.values(), ids=list(LIVES))
def test_the_documented_lives_of_a_task_pass(life: list[TaskState]) -> None:
    for current, target in zip(life, life[1:], strict=False):
        check_transition(current, target)


# Each of these would skip a gate; the reason is why the machine must refuse it.
SHORTCUTS = {
    (S.PENDING_APPROVAL, S.ADMITTED): "an approval is not an admission: it still waits its turn and the quota",
    (S.PENDING_APPROVAL, S.RUNNING): "nothing runs before it is approved",
    (S.QUEUED, S.DISPATCHED): "nothing is dispatched without a placement",
    (S.QUEUED, S.RUNNING): "nothing runs without a placement",
    (S.QUEUED, S.PREEMPTED): "a task that holds nothing cannot be evicted",
    (S.PREEMPTED, S.RUNNING): "an evicted task goes back to the queue, never straight to a device",
    (S.PREEMPTED, S.ADMITTED): "an evicted task is admitted again only from the queue",
    (S.UNKNOWN, S.QUEUED): "a task whose job may still run is never queued again (it would run twice)",
    (S.RUNNING, S.QUEUED): "a running task leaves its devices only through preemption",
}


@pytest.mark.parametrize(("current", "target"), list(SHORTCUTS), ids=[f"{a.value}->{b.value}" for a, b in SHORTCUTS])
def test_shortcuts_past_a_gate_are_refused(current: TaskState, target: TaskState) -> None:
    with pytest.raises(InvalidTransitionError) as info:
        check_transition(current, target)
    assert info.value.code == "invalid_transition", SHORTCUTS[current, target]
    assert f"'{current.value}' cannot move to '{target.value}'" in info.value.message


@pytest.mark.parametrize(("terminal", "target"), [(t, s) for t in sorted(TERMINAL_STATES) for s in TaskState])
def test_an_ended_task_stays_ended(terminal: TaskState, target: TaskState) -> None:
    with pytest.raises(InvalidTransitionError, match=r"allowed: none \(terminal\)"):
        check_transition(terminal, target)


def test_the_refusal_names_where_the_task_may_go() -> None:
    with pytest.raises(InvalidTransitionError) as info:
        check_transition(S.QUEUED, S.RUNNING)
    assert info.value.message == "a task in state 'queued' cannot move to 'running' (allowed: admitted, cancelled, failed)"
    with pytest.raises(InvalidTransitionError, match=r"\(allowed: cancelled, queued\)"):
        check_transition(S.PREEMPTED, S.RUNNING)


@pytest.mark.parametrize("state", sorted(set(TaskState) - TERMINAL_STATES))
def test_every_live_task_can_be_cancelled_or_failed(state: TaskState) -> None:
    """No state traps a task: an operator can always cancel it, or the engine can fail it."""
    ends = [target for target in (S.CANCELLED, S.FAILED) if _allowed(state, target)]
    assert ends, f"a task in {state.value} could never end"


def test_every_state_is_reachable_from_pending_approval() -> None:
    seen, frontier = {S.PENDING_APPROVAL}, [S.PENDING_APPROVAL]
    while frontier:
        for nxt in ALLOWED_TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(TaskState)


def _allowed(current: TaskState, target: TaskState) -> bool:
    try:
        check_transition(current, target)
    except InvalidTransitionError:
        return False
    return True
