"""The task state machine: every allowed transition passes, everything else is refused."""

from __future__ import annotations

import itertools

import pytest

from hetpool.core.errors import InvalidTransitionError
from hetpool.core.states import ACTIVE_STATES, ALLOWED_TRANSITIONS, TERMINAL_STATES, TaskState, check_transition

ALLOWED = sorted((a, b) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets)
DISALLOWED = sorted((a, b) for a, b in itertools.product(TaskState, TaskState) if b not in ALLOWED_TRANSITIONS[a])


def test_every_state_has_an_entry() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(TaskState)


@pytest.mark.parametrize(("current", "target"), ALLOWED)
def test_allowed_transitions_pass(current: TaskState, target: TaskState) -> None:
    check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), DISALLOWED)
def test_every_other_transition_is_refused(current: TaskState, target: TaskState) -> None:
    with pytest.raises(InvalidTransitionError) as info:
        check_transition(current, target)
    assert f"'{current.value}' cannot move to '{target.value}'" in info.value.message
    assert info.value.code == "invalid_transition"


@pytest.mark.parametrize(("terminal", "target"), list(itertools.product(sorted(TERMINAL_STATES), TaskState)))
def test_terminal_states_go_nowhere(terminal: TaskState, target: TaskState) -> None:
    with pytest.raises(InvalidTransitionError, match=r"allowed: none \(terminal\)"):
        check_transition(terminal, target)


def test_queued_cannot_jump_to_running_and_message_names_allowed_states() -> None:
    with pytest.raises(InvalidTransitionError) as info:
        check_transition(TaskState.QUEUED, TaskState.RUNNING)
    assert info.value.message == "a task in state 'queued' cannot move to 'running' (allowed: admitted, cancelled, failed)"


def test_preempted_message_names_allowed_states() -> None:
    with pytest.raises(InvalidTransitionError, match=r"\(allowed: cancelled, queued\)"):
        check_transition(TaskState.PREEMPTED, TaskState.RUNNING)


def test_no_self_transitions() -> None:
    for state in TaskState:
        assert state not in ALLOWED_TRANSITIONS[state]


def test_terminal_and_active_flags() -> None:
    assert {s for s in TaskState if s.terminal} == {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED}
    assert {s for s in TaskState if s.holds_resources} == {TaskState.ADMITTED, TaskState.DISPATCHED, TaskState.RUNNING, TaskState.UNKNOWN}
    assert not TERMINAL_STATES & ACTIVE_STATES
    # Every non-terminal state can still be cancelled or otherwise end.
    for state in set(TaskState) - TERMINAL_STATES:
        assert ALLOWED_TRANSITIONS[state] & TERMINAL_STATES, state


def test_every_state_is_reachable_from_pending_approval() -> None:
    seen, frontier = {TaskState.PENDING_APPROVAL}, [TaskState.PENDING_APPROVAL]
    while frontier:
        for nxt in ALLOWED_TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(TaskState)
