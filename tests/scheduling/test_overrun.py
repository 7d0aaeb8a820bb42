"""Work that overruns its estimate: its expected end is revised (never "free now" forever),
and a task waiting for its preferred model gives way to the substitute once the start it
was promised has passed (issue 16, item 1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hetpool.scheduling.backfill import PROMISE_GRACE_S, PreferredWait
from hetpool.scheduling.cycle import Decision, QueuedTask, run_cycle
from hetpool.scheduling.running import BASIS_ESTIMATE, BASIS_OVERRUN, OVERRUN_MIN_REMAINING_S, overrun_end, revise_overruns
from hetpool.sim.engine import Simulator
from hetpool.sim.trace import TraceTask
from tests.scheduling.factories import (
    CUDA_STACK,
    alloc,
    catalog_models,
    cluster,
    compat_check,
    node,
    pool,
    running_task,
    snapshot_with_running,
    task,
)

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H800, A100 = "nvidia-h800", "nvidia-a100-80g"
BLOCKER_END = T0 + timedelta(minutes=5)  # the blocker's own estimate: 5 minutes


def _estate():
    """One H800 node held by a task estimated at 5 minutes; one idle A100 node."""
    running = [running_task("blocker", [alloc("h0", "h800", range(8))], started_at=T0, expected_end=BLOCKER_END, preemptible=False)]
    nodes = [node("h0", H800, 8, stack=CUDA_STACK), node("a0", A100, 8, stack=CUDA_STACK)]
    return snapshot_with_running(nodes, [pool("h800", H800, ["h0"]), pool("a100", A100, ["a0"])], running), running


def _job(promise: PreferredWait | None = None) -> QueuedTask:
    # 1 h on the reference A100, 1 h / 2.71 ≈ 22 min on the H800: waiting a few minutes pays.
    spec = task("job", devices={"class": "gpu", "count": 8}, fallback=[H800, A100], runtime_estimate="1h")
    return QueuedTask("job", spec, T0, preferred_wait=promise)


def _cycle(at: timedelta, promise: PreferredWait | None = None) -> Decision:
    snap, running = _estate()
    return run_cycle(snap, [_job(promise)], CHECK, T0 + at, running=running).decisions[0]


def _facts(decision: Decision) -> dict:
    info = decision.explanation
    return info.to_dict() if hasattr(info, "to_dict") else dict(info)


# ------------------------------------------------------------------ the revision rule


def test_an_overrunning_end_recedes_with_the_overrun() -> None:
    at_1_min = overrun_end(BLOCKER_END, BLOCKER_END + timedelta(minutes=1))
    at_10_min = overrun_end(BLOCKER_END, BLOCKER_END + timedelta(minutes=10))
    assert at_1_min == BLOCKER_END + timedelta(minutes=2)  # late by d: expected d later still
    assert at_10_min == BLOCKER_END + timedelta(minutes=20)
    just_late = BLOCKER_END + timedelta(seconds=1)
    assert overrun_end(BLOCKER_END, just_late) == just_late + timedelta(seconds=OVERRUN_MIN_REMAINING_S)


def test_revision_touches_only_ends_that_have_passed_and_is_idempotent() -> None:
    now = T0 + timedelta(minutes=8)
    on_time = running_task("on-time", [], expected_end=now + timedelta(minutes=1))
    unknown = running_task("unknown", [], expected_end=None)
    late = running_task("late", [], started_at=T0, expected_end=BLOCKER_END)
    revised = revise_overruns([on_time, unknown, late], now)
    assert revised[:2] == [on_time, unknown]
    assert revised[2].expected_end == now + timedelta(minutes=3)
    assert (revised[2].estimate_basis, revised[2].revised_from) == (BASIS_OVERRUN, BLOCKER_END)
    assert revise_overruns(revised, now) == revised
    assert on_time.estimate_basis == BASIS_ESTIMATE


# ------------------------------------------------------------------ what a waiting task is told


def test_a_task_waiting_on_overrunning_work_is_not_told_free_now() -> None:
    decision = _cycle(timedelta(minutes=8))
    facts = _facts(decision)
    assert not decision.admit and facts["reason"] == "waiting_for_preferred"
    # 3 minutes late: expected 3 minutes more. Not "free at <now>" with a zero wait.
    assert datetime.fromisoformat(facts["free_at"]) == T0 + timedelta(minutes=11)
    assert facts["estimated_wait_s"] == pytest.approx(180)
    assert datetime.fromisoformat(facts["estimated_start"]) == T0 + timedelta(minutes=11)
    assert facts["estimate_basis"] == BASIS_OVERRUN
    assert datetime.fromisoformat(facts["revised_from"]) == BLOCKER_END
    # The sentence says why "free at" moved.
    assert facts["summary"].endswith(f"has overrun its estimate (it was due at {facts['revised_from']}), so its end was revised")


def test_the_estimated_start_of_a_preferred_wait_is_on_the_preferred_model() -> None:
    # Before any overrun: the start it waits for, not "now" on the substitute it refused.
    facts = _facts(_cycle(timedelta(minutes=1)))
    assert facts["reason"] == "waiting_for_preferred"
    assert facts["estimated_wait_s"] == pytest.approx(240)
    assert "estimate_basis" not in facts and "overrun" not in facts["summary"]
    assert datetime.fromisoformat(facts["promised_start"]) == BLOCKER_END
    assert datetime.fromisoformat(facts["waiting_since"]) == T0 + timedelta(minutes=1)


def test_a_reservation_behind_overrunning_work_starts_later_than_now() -> None:
    snap, running = _estate()
    head = QueuedTask("head", task("head", devices={"class": "gpu", "count": 8, "models": [H800]}), T0)
    now = T0 + timedelta(minutes=8)
    decision = run_cycle(snap, [head], CHECK, now, running=running).decisions[0]
    reservation = _facts(decision)["reservation"]
    assert datetime.fromisoformat(reservation["start_at"]) == now + timedelta(minutes=3)


# ------------------------------------------------------------------ the promise


def test_a_wait_past_its_promise_takes_the_substitute() -> None:
    first = _cycle(timedelta(minutes=1))
    promise = PreferredWait.from_explanation(_facts(first))
    assert promise == PreferredWait(H800, BLOCKER_END, T0 + timedelta(minutes=1))
    # Still within the grace after the promised start: it keeps waiting, promise unchanged.
    within = _cycle(timedelta(minutes=5) + timedelta(seconds=PROMISE_GRACE_S), promise)
    assert not within.admit
    assert PreferredWait.from_explanation(_facts(within)) == promise
    # Past it: the blocker's estimate was wrong once, so the substitute is taken.
    late = _cycle(timedelta(minutes=7), promise)
    assert late.admit and late.assignment.fallback_used
    assert {p.model for p in late.assignment.placements} == {A100}


def test_the_grace_grows_with_a_long_promised_wait() -> None:
    promise = PreferredWait(H800, T0 + timedelta(hours=2), T0)  # promised a 2 h wait: 12 min of grace
    assert not promise.broken(T0 + timedelta(hours=2, minutes=11))
    assert promise.broken(T0 + timedelta(hours=2, minutes=13))


def test_a_wait_that_no_longer_pays_ends_without_a_promise_too() -> None:
    # 50 minutes late: expected free at 1 h 45, + 22 min on the H800 > 1 h on the A100 from now.
    decision = _cycle(timedelta(minutes=55))
    assert decision.admit and {p.model for p in decision.assignment.placements} == {A100}


def test_a_promise_for_another_model_is_not_carried() -> None:
    other = PreferredWait("nvidia-h100", T0 + timedelta(minutes=30), T0)
    facts = _facts(_cycle(timedelta(minutes=1), other))
    assert datetime.fromisoformat(facts["promised_start"]) == BLOCKER_END
    assert datetime.fromisoformat(facts["waiting_since"]) == T0 + timedelta(minutes=1)


@pytest.mark.parametrize(
    "stored",
    [
        None,
        {},
        ["waiting_for_preferred"],
        {"reason": "waiting_for_capacity", "promised_start": "2026-01-01T00:05:00+00:00"},
        {"reason": "waiting_for_preferred", "preferred_model": H800},  # written before promises
        {"reason": "waiting_for_preferred", "preferred_model": H800, "promised_start": "soon", "waiting_since": "2026-01-01"},
        {"reason": "waiting_for_preferred", "preferred_model": H800, "promised_start": 5, "waiting_since": None},
    ],
)
def test_an_unreadable_or_absent_promise_is_none(stored) -> None:
    assert PreferredWait.from_explanation(stored) is None


def test_a_promise_without_a_zone_is_read_as_utc() -> None:
    stored = {
        "reason": "waiting_for_preferred",
        "preferred_model": H800,
        "promised_start": "2026-01-01T00:05:00",
        "waiting_since": "2026-01-01T00:01:00",
    }
    promise = PreferredWait.from_explanation(stored)
    assert promise is not None and promise.promised_start == BLOCKER_END and not promise.broken(BLOCKER_END)


# ------------------------------------------------------------------ the simulator agrees


def test_the_simulator_holds_a_wait_to_its_promise_too() -> None:
    # The blocker is estimated at 5 min on the H800 but really runs 2 h; nothing else
    # happens until it ends, so only the broken promise can wake the waiting job up.
    blocker_spec = task("blocker", devices={"class": "gpu", "count": 8, "models": [H800]}, runtime_estimate=f"{300 * 2.71:.0f}s")
    trace = [
        TraceTask("blocker", 0.0, blocker_spec, reference_s=2 * 3600 * 2.71),
        TraceTask("job", 60.0, _job().spec, reference_s=3600.0),
    ]
    nodes = [node("h0", H800, 8, stack=CUDA_STACK), node("a0", A100, 8, stack=CUDA_STACK)]
    pools = [pool("h800", H800, ["h0"]), pool("a100", A100, ["a0"])]
    result = Simulator([cluster()], nodes, pools, catalog_models(), CHECK).run(trace)
    job = result.outcomes["job"]
    assert job.model == A100
    # Promised the H800 at 5 min; given way a minute (the grace) and a second later.
    assert job.start_s == pytest.approx(300 + PROMISE_GRACE_S + 1, abs=2)


def test_a_promise_at_the_end_of_the_calendar_does_not_break_the_cycle() -> None:
    far = PreferredWait(H800, datetime.max.replace(tzinfo=UTC) - timedelta(seconds=1), T0)
    assert not far.broken(T0 + timedelta(days=365))
    decision = _cycle(timedelta(minutes=1), far)
    assert not decision.admit and _facts(decision)["reason"] == "waiting_for_preferred"
