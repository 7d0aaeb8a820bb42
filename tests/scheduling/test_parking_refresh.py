"""Parked heads are refreshed — decided again although nothing they wait for changed — after
MAX_PARKED_S of the cycle clock (or MAX_PARKED_CYCLES cycles), at most an eighth of the
cycle's head budget per cycle, oldest first (parking.refresh_limit): heads parked together
would otherwise all come due in one later cycle, a whole queue's worth on a busy estate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.parking import MAX_PARKED_S
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_refreshes_are_rationed_oldest_first() -> None:
    running = [running_task("busy", [alloc("g0", "h100", range(8))], priority="critical", preemptible=False)]
    snap = snapshot_with_running([node("g0", "nvidia-h100", 8, stack=CUDA_STACK)], [pool("h100", "nvidia-h100", ["g0"])], running)
    # Twelve heads that wait for g0 (no victim: its work is critical and not preemptible).
    # w0 holds the queue's reservation (decided every cycle); the next five are parked in the
    # first cycle, the other six arrive a cycle later and are parked then.
    heads = [QueuedTask(f"w{i}", task(f"w{i}", devices={"class": "gpu", "count": 8}), T0 + timedelta(minutes=i)) for i in range(12)]
    policy = SchedulingPolicySpec(max_heads_per_cycle=16, park_waiting=True)  # refreshes: 16 // 8 = 2 a cycle
    now = T0 + timedelta(hours=1)
    first = run_cycle(snap, heads[:6], CHECK, now, policy=policy, running=running, estimate=False)
    assert len(first.decisions) == 6 and first.parked == 0 and [r.task_id for r in first.reservations] == ["w0"]
    now += timedelta(seconds=30)
    second = run_cycle(snap, heads, CHECK, now, policy=policy, running=running, estimate=False)
    assert sorted(d.task_id for d in second.decisions) == sorted(["w0", *(f"w{i}" for i in range(6, 12))]) and second.parked == 5
    # Past MAX_PARKED_S for the first five only: two a cycle are decided again, and only
    # those older ones; the rest stay passed over until a later cycle.
    now = T0 + timedelta(hours=1) + timedelta(seconds=MAX_PARKED_S)
    refreshed: list[list[str]] = []
    for _ in range(3):
        result = run_cycle(snap, heads, CHECK, now, policy=policy, running=running, estimate=False)
        refreshed.append(sorted(d.task_id for d in result.decisions if d.task_id != "w0"))
        assert result.parked == 11 - len(refreshed[-1])
        now += timedelta(seconds=1)
    assert [len(r) for r in refreshed] == [2, 2, 1]
    assert sorted(t for r in refreshed for t in r) == [f"w{i}" for i in range(1, 6)]  # each of the older five once


def test_a_head_that_never_fits_is_not_refreshed_by_time() -> None:
    """Its explanation (no pool could hold it even idle and healthy) depends on nothing time
    changes; refreshing it would only spend the refresh ration others need."""
    snap = snapshot_with_running([node("g0", "nvidia-h100", 8, stack=CUDA_STACK)], [pool("h100", "nvidia-h100", ["g0"])], [])
    huge = QueuedTask("huge", task("huge", devices={"class": "gpu", "count": 8}, workers=2), T0)  # two 8-GPU nodes: there is one
    policy = SchedulingPolicySpec(max_heads_per_cycle=16, park_waiting=True)
    first = run_cycle(snap, [huge], CHECK, T0, policy=policy, estimate=False)
    assert first.decisions[0].explanation.reason.value == "never_fits"
    later = run_cycle(snap, [huge], CHECK, T0 + timedelta(seconds=10 * MAX_PARKED_S), policy=policy, estimate=False)
    assert later.decisions == [] and later.parked == 1
