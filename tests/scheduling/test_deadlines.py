"""Deadlines in the cycle (scheduling/deadlines.py): a task with a deadline that only some
of its candidates can meet goes to one that meets it; a task without one (or without a
runtime estimate, or that every candidate meets alike) keeps the usual order; a waiting
task that can no longer meet its deadline says so, with the expected lateness."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hetpool.scheduling.cycle import CycleResult, Decision, QueuedTask, run_cycle
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.explain import Explanation, Reason
from tests.scheduling.factories import (
    CUDA_STACK,
    alloc,
    catalog_models,
    compat_check,
    node,
    pool,
    running_task,
    snapshot_with_running,
    task,
)

CHECK = compat_check()
MODELS = catalog_models()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "nvidia-h100"  # 2.71 × the reference for training: 10h of work take ~3.7h
T4 = "nvidia-t4"  # 0.19 ×: the same 10h take ~53h
DEADLINE_KEYS = {"deadline", "deadline_at_risk", "deadline_late_s", "expected_finish", "expected_runtime_s"}


def _q(task_id: str, *, deadline: str | datetime | None = None, queued_at: datetime = T0, **fields) -> QueuedTask:
    if deadline is not None:
        fields["goal"] = {"deadline": deadline.isoformat() if isinstance(deadline, datetime) else deadline}
    return QueuedTask(id=task_id, spec=task(task_id, **fields), queued_at=queued_at)


def _gpus(count: int = 8, **extra) -> dict:
    return {"class": "gpu", "count": count, **extra}


def _estate(running=()):
    """Two idle 8-device nodes, one T4 and one H100 (unless `running` holds it)."""
    nodes = [node("t0", T4, 8, stack=CUDA_STACK), node("g0", H100, 8, stack=CUDA_STACK)]
    return snapshot_with_running(nodes, [pool("t4", T4, ["t0"]), pool("h100", H100, ["g0"])], running)


def _by_id(result: CycleResult) -> dict[str, Decision]:
    return {d.task_id: d for d in result.decisions}


def _models_of(decision: Decision) -> set[str]:
    return {p.model for p in decision.assignment.placements}


def _slow_first(task_id: str = "job", runtime: str | None = "10h", **kw) -> QueuedTask:
    """Prefers the slow T4, falls back to the fast H100."""
    fields = {"runtime_estimate": runtime} if runtime else {}
    return _q(task_id, devices=_gpus(8), fallback=[T4, H100], **fields, **kw)


# ------------------------------------------------------------------ the deadline step


def test_a_deadline_only_the_fallback_meets_sends_the_task_to_the_fallback() -> None:
    snap = _estate()
    decision = run_cycle(snap, [_slow_first(deadline=T0 + timedelta(hours=5))], CHECK, T0).decisions[0]
    assert decision.admit
    assert _models_of(decision) == {H100}
    assert decision.assignment.fallback_used and decision.assignment.for_deadline
    info = decision.explanation.to_dict()
    assert info["chosen_for_deadline"] is True
    assert info["summary"].endswith("; chosen because it meets the task's deadline")
    # Every attempt is still recorded: the H100 first (it meets the deadline), the T4 not tried.
    assert [a["candidate"] for a in info["attempts"]] == [H100]


def test_without_a_deadline_the_usual_order_stands() -> None:
    decision = run_cycle(_estate(), [_slow_first()], CHECK, T0).decisions[0]
    assert decision.admit and _models_of(decision) == {T4}
    assert not decision.assignment.fallback_used and not decision.assignment.for_deadline
    assert "chosen_for_deadline" not in decision.explanation.facts


def test_a_deadline_every_candidate_meets_or_none_meets_keeps_the_usual_order() -> None:
    for deadline in (T0 + timedelta(days=10), T0 + timedelta(hours=1)):
        decision = run_cycle(_estate(), [_slow_first(deadline=deadline)], CHECK, T0).decisions[0]
        assert decision.admit and _models_of(decision) == {T4}, deadline
        assert not decision.assignment.for_deadline


def test_without_a_runtime_estimate_a_deadline_changes_nothing() -> None:
    decision = run_cycle(_estate(), [_slow_first(runtime=None, deadline=T0 + timedelta(hours=5))], CHECK, T0).decisions[0]
    assert decision.admit and _models_of(decision) == {T4}
    assert not DEADLINE_KEYS & set(decision.explanation.facts)


def test_a_relative_deadline_counts_from_entering_the_queue() -> None:
    # Queued 4h ago with 5h to go: 1h is left, which not even the H100 meets — the usual order.
    late = _slow_first(deadline="5h", queued_at=T0 - timedelta(hours=4))
    assert _models_of(run_cycle(_estate(), [late], CHECK, T0).decisions[0]) == {T4}
    fresh = _slow_first(deadline="5h", queued_at=T0)
    assert _models_of(run_cycle(_estate(), [fresh], CHECK, T0).decisions[0]) == {H100}


def test_within_one_choice_the_scorer_is_left_the_pools_that_meet_the_deadline() -> None:
    """A device-class request spans both models: the deadline step narrows it to the H100."""
    job = _q("job", devices=_gpus(8), runtime_estimate="10h", deadline=T0 + timedelta(hours=5))
    decision = run_cycle(_estate(), [job], CHECK, T0).decisions[0]
    assert decision.admit and _models_of(decision) == {H100}
    assert decision.assignment.chosen == "class gpu (meets deadline)"
    assert decision.assignment.for_deadline and not decision.assignment.fallback_used


def test_when_what_meets_the_deadline_is_full_the_task_takes_what_is_free() -> None:
    """The deadline step orders; it never makes a task wait for capacity that is busy."""
    running = [running_task("h100-busy", [alloc("g0", "h100", range(8))], expected_end=T0 + timedelta(days=30), preemptible=False)]
    snap = _estate(running)
    decision = run_cycle(snap, [_slow_first(deadline=T0 + timedelta(hours=5))], CHECK, T0, running=running).decisions[0]
    assert decision.admit and _models_of(decision) == {T4}
    assert [(a["candidate"], a["outcome"]) for a in decision.explanation.attempts] == [(H100, "no-fit"), (T4, "fit")]
    assert not decision.assignment.for_deadline


def test_the_input_snapshot_is_not_changed() -> None:
    snap = _estate()
    before = snap.dev_free.data.copy()
    run_cycle(snap, [_slow_first(deadline=T0 + timedelta(hours=5))], CHECK, T0)
    assert (snap.dev_free.data == before).all()


# ------------------------------------------------------------------ wait for preferred vs fallback


def _fast_first(deadline: datetime | None, h100_free_in: timedelta) -> tuple:
    running = [running_task("h100-busy", [alloc("g0", "h100", range(8))], priority="high", expected_end=T0 + h100_free_in)]
    job = _q("job", devices=_gpus(8), fallback=[H100, T4], runtime_estimate="2h", deadline=deadline)
    return _estate(running), running, job


def test_no_wait_for_the_preferred_model_when_waiting_misses_the_deadline_and_the_fallback_meets_it() -> None:
    # The H100 frees in 20h: waiting ends after 20h44m; the T4 ends after 10h32m, before the 12h deadline.
    snap, running, job = _fast_first(T0 + timedelta(hours=12), timedelta(hours=20))
    decision = run_cycle(snap, [job], CHECK, T0, running=running).decisions[0]
    assert decision.admit and _models_of(decision) == {T4} and decision.assignment.fallback_used


def test_a_deadline_still_waits_for_the_preferred_model_when_that_meets_it_sooner() -> None:
    snap, running, job = _fast_first(T0 + timedelta(hours=12), timedelta(minutes=10))
    decision = run_cycle(snap, [job], CHECK, T0, running=running).decisions[0]
    assert not decision.admit
    assert decision.explanation.reason is Reason.WAITING_FOR_PREFERRED
    assert decision.explanation.facts["deadline_at_risk"] is False  # 10 min + 44 min: well before it


# ------------------------------------------------------------------ explanations: at risk


def _h100_held_for(hours: float | None):
    end = T0 + timedelta(hours=hours) if hours is not None else None
    running = [running_task("r", [alloc("g0", "h100", range(8))], expected_end=end, preemptible=False)]
    nodes = [node("g0", H100, 8, stack=CUDA_STACK)]
    return snapshot_with_running(nodes, [pool("h100", H100, ["g0"])], running), running


def _waiting(deadline: datetime | str | None, held_for: float | None = 1.0) -> Explanation:
    snap, running = _h100_held_for(held_for)
    job = _q("job", devices=_gpus(8, models=[H100]), runtime_estimate="10h", deadline=deadline)
    decision = _by_id(run_cycle(snap, [job], CHECK, T0, running=running))["job"]
    assert not decision.admit
    return decision.explanation


def test_a_waiting_task_that_can_no_longer_meet_its_deadline_says_so() -> None:
    runtime = runtime_on(task("x", devices=_gpus(8), runtime_estimate="10h"), MODELS[H100])
    deadline = T0 + timedelta(hours=3)
    expl = _waiting(deadline)  # starts in 1h, runs 3h41m29s: ends 4h42m (up to the minute), 1h42m late
    facts = expl.facts
    assert facts["estimated_start"] == (T0 + timedelta(hours=1)).isoformat()
    assert facts["deadline"] == deadline.isoformat()
    assert facts["deadline_at_risk"] is True
    expected_late = (T0 + timedelta(hours=1, seconds=runtime) - deadline).total_seconds()
    assert 0 <= facts["deadline_late_s"] - expected_late < 60
    assert facts["expected_runtime_s"] == round(runtime)
    assert facts["deadline_late_s"] % 60 == 0  # the finish is taken up to the minute: no rewrite every cycle
    assert facts["expected_finish"] == (T0 + timedelta(hours=4, minutes=42)).isoformat()
    summary = expl.to_dict()["summary"]
    assert summary.startswith("waiting for capacity")
    assert f"; it cannot meet its deadline {deadline.isoformat()}: expected to finish 1h42m late" in summary


def test_a_waiting_task_that_will_meet_its_deadline_is_not_at_risk() -> None:
    expl = _waiting(T0 + timedelta(hours=8))
    assert expl.facts["deadline_at_risk"] is False
    assert "deadline_late_s" not in expl.facts
    assert "deadline" not in expl.to_dict()["summary"]


def test_with_no_start_estimate_now_plus_the_runtime_decides() -> None:
    # The H100 is held by work of unknown length: no estimated start, so now + ~3h41m counts.
    at_risk = _waiting(T0 + timedelta(hours=3), held_for=None)
    assert at_risk.facts["estimated_start"] is None
    assert at_risk.facts["deadline_at_risk"] is True
    assert at_risk.facts["deadline_late_s"] == 42 * 60  # now + 3h41m29s, up to the minute
    assert _waiting(T0 + timedelta(hours=4), held_for=None).facts["deadline_at_risk"] is False


def test_a_deadline_already_past_is_at_risk_even_without_a_runtime_estimate() -> None:
    snap, running = _h100_held_for(1.0)
    job = _q("job", devices=_gpus(8, models=[H100]), deadline=T0 - timedelta(hours=2))
    facts = run_cycle(snap, [job], CHECK, T0, running=running).decisions[0].explanation.facts
    assert facts["deadline_at_risk"] is True and facts["deadline_late_s"] == 7200
    assert "expected_finish" not in facts


def test_a_waiting_task_without_a_deadline_gets_no_deadline_facts() -> None:
    expl = _waiting(None)
    assert not DEADLINE_KEYS & set(expl.facts)


def test_the_stored_form_reads_back_with_its_deadline_facts() -> None:
    stored = _waiting(T0 + timedelta(hours=3)).to_dict()
    again = Explanation.from_dict(stored)
    assert again is not None and again.facts["deadline_at_risk"] is True
    assert again.summary == stored["summary"]
