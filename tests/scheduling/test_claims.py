"""A preemptor's claim: the placement its preemption planned is held for it (claims.py),
in the cycle of the plan and in the next ones, until it starts there or stops being a
preemptor — so no other head takes it and the preemptor does not evict a second time."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.snapshot import Snapshot
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _q(task_id: str, minutes: float, priority: str, count: int, **fields) -> QueuedTask:
    spec = task(task_id, priority=priority, devices={"class": "gpu", "count": count}, **fields)
    return QueuedTask(id=task_id, spec=spec, queued_at=T0 + timedelta(minutes=minutes))


def _estate():
    """One 8-H100 node: a low-priority task holds devices 0-3, devices 4-7 are free."""
    victim = running_task("victim", [alloc("g0", "h100", range(4))], priority="low", expected_end=T0 + timedelta(hours=10))
    snap = snapshot_with_running([node("g0", "nvidia-h100", 8, stack=CUDA_STACK)], [pool("h100", "nvidia-h100", ["g0"])], [victim])
    return snap, victim


def _release(snap: Snapshot, victim) -> None:
    for a in victim.allocations:
        snap.release(snap.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)


def _by_id(result) -> dict:
    return {d.task_id: d for d in result.decisions}


def test_the_free_part_of_a_planned_placement_is_not_taken_by_a_later_head_of_the_cycle() -> None:
    snap, victim = _estate()
    queue = [_q("whole-node", 0, "high", 8), _q("half-node", 1, "normal", 4)]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=[victim]))
    assert decisions["whole-node"].victims == ["victim"]
    # Devices 4-7 are free, but they are half of the node the preemptor will start on; its
    # explanation says so (the devices look free).
    waiting = decisions["half-node"]
    assert not waiting.admit and waiting.explanation.facts["held_for_preemptors"] == 1
    assert "held for 1 preempting task(s)" in waiting.explanation.summary
    assert snap.claims["whole-node"][0].device_indices == tuple(range(8))


def test_a_claim_holds_while_the_victims_release_and_the_preemptor_starts_where_it_evicted() -> None:
    # As the server does: each cycle runs on a copy of the live snapshot it keeps.
    live, victim = _estate()
    queue = [_q("whole-node", 0, "high", 8), _q("half-node", 1, "normal", 4)]
    run_cycle(live.copy(), queue, CHECK, T0, running=[victim])
    # Next cycle: the victim is still stopping (its checkpoint grace); the claim still holds.
    stopping = replace(victim, being_preempted=True)
    decisions = _by_id(run_cycle(live.copy(), queue, CHECK, T0 + timedelta(seconds=30), running=[stopping]))
    assert not decisions["whole-node"].admit and not decisions["whole-node"].victims
    assert not decisions["half-node"].admit
    # The victim is gone: the preemptor starts on the whole node, nothing was evicted twice.
    _release(live, victim)
    snap = live.copy()
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0 + timedelta(seconds=60), running=[]))
    placed = decisions["whole-node"]
    assert placed.admit and [(p.node, tuple(p.device_indices)) for p in placed.assignment.placements] == [("g0", tuple(range(8)))]
    assert not decisions["half-node"].admit
    assert "whole-node" not in snap.claims


def test_a_claim_ends_with_its_claimant_leaving_the_queue() -> None:
    snap, victim = _estate()
    run_cycle(snap, [_q("whole-node", 0, "high", 8), _q("half-node", 1, "normal", 4)], CHECK, T0, running=[victim])
    _release(snap, victim)
    # The preemptor was cancelled: what it claimed is anyone's.
    decisions = _by_id(run_cycle(snap, [_q("half-node", 1, "normal", 4)], CHECK, T0 + timedelta(seconds=30), running=[]))
    assert decisions["half-node"].admit
    assert snap.claims == {}


def test_a_what_if_cycle_does_not_touch_the_real_claims() -> None:
    snap, victim = _estate()
    queue = [_q("whole-node", 0, "high", 8), _q("half-node", 1, "normal", 4)]
    run_cycle(snap, queue, CHECK, T0, running=[victim])
    kept = dict(snap.claims)
    what_if = snap.with_own_memory()
    _release(what_if, victim)
    run_cycle(what_if, queue, CHECK, T0 + timedelta(seconds=30), running=[])
    assert what_if.claims == {} and snap.claims == kept


def test_a_preemptor_does_not_turn_down_its_claim_to_wait_for_its_preferred_model() -> None:
    """It evicted work to start on a substitute; waiting for the preferred model now would
    leave the victims' devices idle and its victims evicted for nothing."""
    a100 = node("a0", "nvidia-a100-80g", 8, stack=CUDA_STACK)
    h100 = node("g0", "nvidia-h100", 8, stack=CUDA_STACK)
    pools = [pool("h100", "nvidia-h100", ["g0"]), pool("a100", "nvidia-a100-80g", ["a0"])]
    soon = T0 + timedelta(minutes=20)
    # The preferred H100 node is held by high-priority work ending in 20 minutes; the A100
    # node by low-priority work.
    busy = running_task("busy", [alloc("g0", "h100", range(8))], priority="high", expected_end=soon)
    victim = running_task("victim", [alloc("a0", "a100", range(8))], priority="low", expected_end=T0 + timedelta(hours=10))
    snap = snapshot_with_running([h100, a100], pools, [busy, victim])
    spec = task(
        "preemptor",
        priority="high",
        devices={"class": "gpu", "count": 8},
        fallback=["nvidia-h100", "nvidia-a100-80g"],
        runtime_estimate="10h",
    )
    queue = [QueuedTask("preemptor", spec, T0)]
    first = _by_id(run_cycle(snap, queue, CHECK, T0, running=[busy, victim]))["preemptor"]
    assert first.victims == ["victim"]
    _release(snap, victim)
    second = _by_id(run_cycle(snap, queue, CHECK, T0 + timedelta(seconds=30), running=[busy]))["preemptor"]
    assert second.admit and second.assignment.placements[0].node == "a0"


def test_a_head_no_plan_can_help_spends_no_preemption_try() -> None:
    """With one try a cycle, the head first in line that no eviction could place (half its
    node is held by work of its own priority) must not use the try up: the head behind it,
    which a preemption does place, gets it."""
    from hetpool.core.policy import SchedulingPolicySpec

    same_rank = running_task("same-rank", [alloc("g0", "h100", range(4))], priority="high")
    low = running_task("low", [alloc("g0", "h100", range(4, 8))], priority="low")
    snap = snapshot_with_running([node("g0", "nvidia-h100", 8, stack=CUDA_STACK)], [pool("h100", "nvidia-h100", ["g0"])], [same_rank, low])
    queue = [_q("whole-node", 0, "high", 8), _q("half-node", 1, "high", 4)]
    policy = SchedulingPolicySpec(max_preemption_tries=1)
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=[same_rank, low], policy=policy))
    assert decisions["whole-node"].victims == [] and not decisions["whole-node"].admit
    assert decisions["half-node"].victims == ["low"]
