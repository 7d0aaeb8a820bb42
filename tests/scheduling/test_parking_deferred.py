"""A head whose preemption planning was deferred (policy.max_preemption_tries used up
before its turn) is parked as *deferred*: it is passed over while a cycle has no try left
at its turn — it would only be deferred again — and decided, in queue order, as soon as a
cycle has one. Without this, every deferred head was placed again every cycle for
nothing (bench/scheduler_throughput.py: ~1,200 of a cycle's 2,000 heads at 2,000 nodes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _estate(nodes: int = 3):
    names = [f"g{i}" for i in range(nodes)]
    running = [running_task(f"low{i}", [alloc(n, "h100", range(8))], priority="low") for i, n in enumerate(names)]
    snap = snapshot_with_running([node(n, "nvidia-h100", 8, stack=CUDA_STACK) for n in names], [pool("h100", "nvidia-h100", names)], running)
    return snap, {r.id: r for r in running}


def _heads(n: int, **fields) -> list[QueuedTask]:
    return [
        QueuedTask(f"hi{i}", task(f"hi{i}", priority="high", devices={"class": "gpu", "count": 8}, **fields), T0 + timedelta(minutes=i))
        for i in range(n)
    ]


def test_deferred_heads_wait_parked_and_plan_in_queue_order_when_a_try_is_left() -> None:
    snap, running = _estate()
    queue = _heads(4)
    policy = SchedulingPolicySpec(max_heads_per_cycle=0, max_preemption_tries=1)
    victims_by_cycle, parked_by_cycle, decided_by_cycle = [], [], []
    for _ in range(3):
        result = run_cycle(snap, queue, CHECK, T0, policy=policy, running=list(running.values()), estimate=False)
        victims_by_cycle.append({d.task_id: list(d.victims) for d in result.decisions if d.victims})
        parked_by_cycle.append(result.parked)
        decided_by_cycle.append(sorted(d.task_id for d in result.decisions))
        if len(decided_by_cycle) == 1:
            deferred_after_first = {t for t, p in snap.parking["state"].parked.items() if p.deferred}
        for d in result.decisions:
            for v in d.victims:  # evicted at once
                _release(snap, running.pop(v))
            if d.admit:
                queue = [q for q in queue if q.id != d.task_id]
                for p in d.assignment.placements:
                    snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
                running[d.task_id] = running_task(
                    d.task_id, [alloc(p.node, p.pool, p.device_indices) for p in d.assignment.placements], priority="high"
                )
    # One try per cycle, given in queue order: hi0, then hi1, then hi2 — each the most
    # deserving head that had not planned yet.
    assert [list(v) for v in victims_by_cycle] == [["hi0"], ["hi1"], ["hi2"]]
    assert len({v for c in victims_by_cycle for vs in c.values() for v in vs}) == 3  # three different victims
    # After cycle 1, hi2 and hi3 (deferred: hi0 had used the try; hi3 has hi2's shape and
    # was decided as hi2 was) were parked as deferred; hi2 still got its try in queue order.
    assert deferred_after_first == {"hi2", "hi3"}
    assert decided_by_cycle[0] == ["hi0", "hi1", "hi2", "hi3"]


def _release(snap, r) -> None:
    for a in r.allocations:
        snap.release(snap.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)


def test_a_deferred_head_is_let_go_at_its_turn_when_what_grew_can_hold_it() -> None:
    names = ["g0", "g1", "g2"]
    ends = {"g0": T0 + timedelta(hours=1), "g1": T0 + timedelta(hours=1), "g2": T0 + timedelta(hours=9)}
    running = {f"low-{n}": running_task(f"low-{n}", [alloc(n, "h100", range(8))], priority="low", expected_end=ends[n]) for n in names}
    snap = snapshot_with_running([node(n, "nvidia-h100", 8, stack=CUDA_STACK) for n in names], [pool("h100", "nvidia-h100", names)], running.values())
    # The queue's head is a gang of two nodes: it holds the reservation (g0 and g1, the first
    # to free) and fits nowhere when one node frees; behind it, two one-node heads short
    # enough to backfill before it starts.
    gang = QueuedTask("gang", task("gang", priority="high", workers=2, devices={"class": "gpu", "count": 8}), T0 - timedelta(hours=1))
    queue = [gang, *_heads(2, runtime_estimate="30m")]
    policy = SchedulingPolicySpec(max_heads_per_cycle=0, max_preemption_tries=0)  # no try ever: every head is deferred
    for _ in range(2):
        result = run_cycle(snap, queue, CHECK, T0, policy=policy, running=list(running.values()), estimate=False)
        assert not result.admitted and [r.task_id for r in result.reservations] == ["gang"]
    assert result.parked == 2 and [d.task_id for d in result.decisions] == ["gang"]  # nothing changed: passed over
    assert all(p.deferred for p in snap.parking["state"].parked.values())
    _release(snap, running.pop("low-g2"))  # g2's work ends early: one one-node head fits there now
    third = run_cycle(snap, queue, CHECK, T0, policy=policy, running=list(running.values()), estimate=False)
    assert [d.task_id for d in third.admitted] == ["hi0"]
    assert third.parked == 1 and "hi1" not in {d.task_id for d in third.decisions}  # g2 is hi0's by hi1's turn
