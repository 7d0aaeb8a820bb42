"""The start-time forecast runs every `policy.estimate_interval` (as Slurm's bf_interval), not
every cycle: in between, a waiting task keeps what the last forecast said of it, dated by
`estimated_at`; a task that forecast did not cover (queued since) is "pending" until the next
one; if it is parked meanwhile, the next forecast's cycle decides it again so as to reach it.

Each test changes what the forecast reads between cycles (a running task's expected end) so
that a carried estimate and a recomputed one differ."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling.cycle import CycleResult, Decision, QueuedTask, run_cycle
from hetpool.scheduling.explain import ETA_FORECAST, ETA_PENDING, ETA_RESERVATION
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "nvidia-h100"
NO_PARKING = SchedulingPolicySpec(park_waiting=False)


def _q(task_id: str, minutes: float = 0, **fields) -> QueuedTask:
    fields.setdefault("devices", {"class": "gpu", "count": 8, "models": [H100]})
    fields.setdefault("runtime_estimate", "1h")
    return QueuedTask(id=task_id, spec=task(task_id, **fields), queued_at=T0 + timedelta(minutes=minutes))


def _estate():
    """One 8-device node, all held by work that may not be preempted, expected to end at +2h."""
    running = [running_task("r0", [alloc("g0", "h100", range(8))], expected_end=T0 + timedelta(hours=2), preemptible=False)]
    return snapshot_with_running([node("g0", H100, 8, stack=CUDA_STACK)], [pool("h100", H100, ["g0"])], running), running


def _later(running, hours: float):
    """The same running work, now expected to end at T0 + `hours` (it overran, say)."""
    return [replace(running[0], expected_end=T0 + timedelta(hours=hours))]


def _facts(result: CycleResult) -> dict[str, dict]:
    return {d.task_id: d.explanation.to_dict() for d in result.decisions}


def _decided(result: CycleResult) -> set[str]:
    return {d.task_id for d in result.decisions}


def _at(hours: float = 0, seconds: float = 0) -> str:
    return (T0 + timedelta(hours=hours, seconds=seconds)).isoformat()


def test_between_forecasts_a_waiting_task_keeps_the_last_estimate_dated_and_a_new_one_is_pending() -> None:
    snap, running = _estate()
    first = _facts(run_cycle(snap, [_q("w")], CHECK, T0, running=running, policy=NO_PARKING))["w"]
    assert (first["estimated_start"], first["eta_basis"], first["estimated_at"]) == (_at(2), ETA_FORECAST, _at())

    # 10 s later the running work is expected to end an hour later: a forecast now would move
    # w's start; within the interval w keeps the last forecast's, dated by it.
    moved = _later(running, 3)
    queue = [_q("w"), _q("x", 1)]
    second = _facts(run_cycle(snap, queue, CHECK, T0 + timedelta(seconds=10), running=moved, policy=NO_PARKING))
    assert (second["w"]["estimated_start"], second["w"]["estimated_at"], second["w"]["position"]) == (_at(2), _at(), 1)
    x = second["x"]
    assert (x["eta_basis"], x["estimated_start"], x["estimated_wait_s"], x["position"]) == (ETA_PENDING, None, None, 2)
    assert x["next_estimate_at"] == _at(seconds=30)
    assert x["summary"].endswith(f"; its start is estimated by the next forecast (due {_at(seconds=30)})")

    # Past the interval: a new forecast, for both.
    third = _facts(run_cycle(snap, queue, CHECK, T0 + timedelta(seconds=40), running=moved, policy=NO_PARKING))
    assert (third["w"]["estimated_start"], third["w"]["estimated_at"]) == (_at(3), _at(seconds=40))
    assert (third["x"]["eta_basis"], third["x"]["estimated_at"]) == (ETA_FORECAST, _at(seconds=40))
    assert third["x"]["estimated_start"] > _at(3)  # after w's run


def test_an_interval_of_zero_forecasts_every_cycle() -> None:
    snap, running = _estate()
    policy = SchedulingPolicySpec(park_waiting=False, estimate_interval="0s")
    run_cycle(snap, [_q("w")], CHECK, T0, running=running, policy=policy)
    again = _facts(run_cycle(snap, [_q("w")], CHECK, T0 + timedelta(seconds=1), running=_later(running, 3), policy=policy))["w"]
    assert (again["estimated_start"], again["estimated_at"]) == (_at(3), _at(seconds=1))


def test_another_policy_or_an_earlier_clock_forecasts_again() -> None:
    snap, running = _estate()
    run_cycle(snap, [_q("w")], CHECK, T0, running=running, policy=NO_PARKING)
    other = SchedulingPolicySpec(park_waiting=False, aging_per_hour=1.0)
    changed = _facts(run_cycle(snap, [_q("w")], CHECK, T0 + timedelta(seconds=5), running=_later(running, 3), policy=other))["w"]
    assert changed["estimated_start"] == _at(3)
    earlier = _facts(run_cycle(snap, [_q("w")], CHECK, T0, running=_later(running, 4), policy=other))["w"]
    assert (earlier["estimated_start"], earlier["estimated_at"]) == (_at(4), _at())


def test_a_what_if_cycle_forecasts_afresh_and_leaves_the_schedulers_forecast_alone() -> None:
    snap, running = _estate()
    run_cycle(snap, [_q("w")], CHECK, T0, running=running, policy=NO_PARKING)
    planned = _facts(run_cycle(snap.with_own_memory(), [_q("w")], CHECK, T0 + timedelta(seconds=5), running=_later(running, 3), policy=NO_PARKING))
    assert (planned["w"]["estimated_start"], planned["w"]["estimated_at"]) == (_at(3), _at(seconds=5))
    live = _facts(run_cycle(snap, [_q("w")], CHECK, T0 + timedelta(seconds=10), running=_later(running, 3), policy=NO_PARKING))
    assert (live["w"]["estimated_start"], live["w"]["estimated_at"]) == (_at(2), _at())


def test_a_pending_task_parked_meanwhile_is_decided_again_by_the_next_forecast() -> None:
    snap, running = _estate()  # parking on (the default policy)
    queue = [_q("w")]  # the queue's head: it holds the reservation, and is decided every cycle
    run_cycle(snap, queue, CHECK, T0, running=running)
    queue.append(_q("x", 1))  # waits for capacity behind it: parked once decided
    cycles = {}
    for seconds in (10, 20, 40, 50):
        result = run_cycle(snap, queue, CHECK, T0 + timedelta(seconds=seconds), running=running)
        cycles[seconds] = (_decided(result), _facts(result))
    assert cycles[10][0] == {"w", "x"} and cycles[10][1]["x"]["eta_basis"] == ETA_PENDING
    assert cycles[20][0] == {"w"}  # x parked: nothing it could use changed
    assert cycles[20][1]["w"]["estimated_at"] == _at()  # carried from the forecast at T0
    # The forecast at +40 s (30 s after the one at T0) lets x go once and estimates it ...
    assert cycles[40][0] == {"w", "x"} and cycles[40][1]["x"]["eta_basis"] == ETA_FORECAST
    assert cycles[40][1]["x"]["estimated_at"] == _at(seconds=40)
    # ... and parked again, it stays so.
    assert cycles[50][0] == {"w"}


def test_a_reservation_made_between_forecasts_is_the_estimate_and_dated_now() -> None:
    # g0, g1 half held until +2h / +3h by work that may not be preempted: a two-node gang
    # arriving between forecasts holds a reservation from +3h.
    running = [
        running_task("r0", [alloc("g0", "h100", range(4))], expected_end=T0 + timedelta(hours=2), preemptible=False),
        running_task("r1", [alloc("g1", "h100", range(4))], expected_end=T0 + timedelta(hours=3), preemptible=False),
    ]
    nodes = [node(n, H100, 8, stack=CUDA_STACK) for n in ("g0", "g1")]
    snap = snapshot_with_running(nodes, [pool("h100", H100, ["g0", "g1"])], running)
    run_cycle(snap, [_q("w", devices={"class": "gpu", "count": 6, "models": [H100]})], CHECK, T0, running=running, policy=NO_PARKING)
    gang = _q("gang", 1, workers=2)
    result = run_cycle(snap, [gang], CHECK, T0 + timedelta(seconds=10), running=running, policy=NO_PARKING)
    facts: dict[str, Decision] = _facts(result)
    assert facts["gang"]["eta_basis"] == ETA_RESERVATION
    assert (facts["gang"]["estimated_start"], facts["gang"]["estimated_at"]) == (_at(3), _at(seconds=10))
