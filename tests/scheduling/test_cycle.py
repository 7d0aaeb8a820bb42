"""One scheduling cycle: queue order, admission against shrinking capacity, explanations,
and the snapshot operations the cycle relies on."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.filters import REASON_DEVICES, REASON_DEVICES_TOTAL
from hetpool.scheduling.snapshot import Snapshot
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _q(task_id: str, minutes: float = 0, **fields) -> QueuedTask:
    return QueuedTask(id=task_id, spec=task(task_id, **fields), queued_at=T0 + timedelta(minutes=minutes))


def _two_h100_nodes(used_on_g1: int = 8) -> Snapshot:
    nodes = [node("g0", "nvidia-h100", 8, stack=CUDA_STACK), node("g1", "nvidia-h100", 8, stack=CUDA_STACK)]
    allocations = [alloc("g1", "h100", range(used_on_g1))] if used_on_g1 else []
    return make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0", "g1"])], allocations)


def _arrays(snap: Snapshot) -> tuple:
    return (snap.free_cpu.copy(), snap.free_mem.copy(), [d.copy() for d in snap.dev_free])


def _assert_arrays_equal(before: tuple, snap: Snapshot) -> None:
    np.testing.assert_array_equal(before[0], snap.free_cpu)
    np.testing.assert_array_equal(before[1], snap.free_mem)
    for a, b in zip(before[2], snap.dev_free, strict=True):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ queue order


def test_run_cycle_decides_in_queue_order() -> None:
    queue = [
        _q("low", 0, priority="low", devices={"class": "gpu"}),
        _q("high", 5, priority="high", devices={"class": "gpu"}),
        _q("n", 1, devices={"class": "gpu"}),
    ]
    result = run_cycle(_two_h100_nodes(), queue, CHECK, T0)
    assert [d.task_id for d in result.decisions] == ["high", "n", "low"]
    assert all(d.admit for d in result.decisions)
    assert result.duration_s >= 0


# ------------------------------------------------------------------ admission


def test_higher_priority_wins_the_last_eight_devices() -> None:
    queue = [
        _q("older-normal", 0, devices={"class": "gpu", "count": 8}),
        _q("newer-high", 60, priority="high", devices={"class": "gpu", "count": 8}),
    ]
    result = run_cycle(_two_h100_nodes(), queue, CHECK, T0)
    first, second = result.decisions
    assert (first.task_id, first.admit) == ("newer-high", True)
    assert [(p.node, p.device_indices) for p in first.assignment.placements] == [("g0", tuple(range(8)))]
    assert first.explanation.to_dict()["summary"].startswith("fits now on class gpu: 1 worker(s), first on g0 (nvidia-h100)")

    assert (second.task_id, second.admit) == ("older-normal", False)
    assert second.explanation.to_dict()["fits_when_idle"] is True
    # It holds a reservation on the node that frees first; no end is known, so no start is promised.
    assert second.explanation.reason == "holds_reservation"
    summary = second.explanation.to_dict()["summary"]
    assert summary.startswith("waiting for capacity, holding a reservation on 1 node(s) from unknown — 0/2 nodes available: 2 not enough")
    assert second.explanation.summary.endswith("; no start within the forecast horizon (200 queued tasks, running work with a known end)")
    assert REASON_DEVICES in second.explanation.to_dict()["summary"]
    assert second.explanation.to_dict()["reasons"] == {REASON_DEVICES: 2}
    assert [d.task_id for d in result.admitted] == ["newer-high"]


def test_same_priority_older_task_wins() -> None:
    queue = [_q("b-new", 5, devices={"class": "gpu", "count": 8}), _q("a-old", 0, devices={"class": "gpu", "count": 8})]
    result = run_cycle(_two_h100_nodes(), queue, CHECK, T0)
    assert [(d.task_id, d.admit) for d in result.decisions] == [("a-old", True), ("b-new", False)]


def test_admitted_tasks_consume_capacity_within_the_cycle() -> None:
    queue = [_q(f"t{i}", i, devices={"class": "gpu", "count": 4}) for i in range(3)]
    result = run_cycle(_two_h100_nodes(), queue, CHECK, T0)
    assert [d.admit for d in result.decisions] == [True, True, False]
    a, b = (d.assignment.placements[0] for d in result.admitted)
    assert a.node == b.node == "g0"
    assert set(a.device_indices).isdisjoint(b.device_indices)
    assert result.decisions[2].explanation.to_dict()["fits_when_idle"] is True


def test_task_that_cannot_fit_even_on_idle_capacity() -> None:
    queue = [_q("huge", 0, devices={"class": "gpu", "count": 16})]
    result = run_cycle(_two_h100_nodes(used_on_g1=0), queue, CHECK, T0)
    [decision] = result.decisions
    assert not decision.admit
    assert decision.explanation.to_dict()["fits_when_idle"] is False
    assert decision.explanation.to_dict()["summary"] == f"cannot run anywhere, even on idle capacity — 0/2 nodes available: 2 {REASON_DEVICES_TOTAL}"
    assert decision.explanation.to_dict()["attempts"][0]["outcome"] == "no-fit"


def test_gang_too_big_for_the_cluster_cannot_run_anywhere() -> None:
    queue = [_q("gang", 0, devices={"class": "gpu", "count": 8}, workers=3)]
    [decision] = run_cycle(_two_h100_nodes(used_on_g1=0), queue, CHECK, T0).decisions
    assert not decision.admit
    assert decision.explanation.to_dict()["fits_when_idle"] is False
    assert "not enough nodes for all workers at once (gang)" in decision.explanation.to_dict()["summary"]


def test_run_cycle_does_not_mutate_the_input_snapshot() -> None:
    snap = _two_h100_nodes(used_on_g1=2)
    before = _arrays(snap)
    queue = [_q(f"t{i}", i, devices={"class": "gpu", "count": 2}, per_worker={"cpu": 4, "memory_gb": 32}) for i in range(5)]
    result = run_cycle(snap, queue, CHECK, T0)
    assert len(result.admitted) == 5
    _assert_arrays_equal(before, snap)


def test_empty_queue() -> None:
    result = run_cycle(_two_h100_nodes(), [], CHECK, T0)
    assert result.decisions == []
    assert result.admitted == []


# ------------------------------------------------------------------ snapshot


def test_build_snapshot_subtracts_allocations() -> None:
    snap = make_snapshot(
        [node("g0", "nvidia-h100", 4, cpu=32, mem=256, stack=CUDA_STACK)],
        [pool("h100", "nvidia-h100", ["g0"])],
        [alloc("g0", "h100", [1, 2], cpu=8, mem=64), alloc("g0", "h100", [3], fraction=0.25, cpu=2, mem=8)],
    )
    row = snap.row_of("g0", "h100")
    assert row == 0
    np.testing.assert_allclose(snap.dev_free[row], [1.0, 0.0, 0.0, 0.75])
    assert snap.free_cpu.tolist() == [22.0]
    assert snap.free_mem.tolist() == [184.0]
    assert snap.whole_free().tolist() == [1]
    assert snap.fraction_free(0.5).tolist() == [2]
    assert snap.device_totals().tolist() == [4]
    assert snap.row_of("g0", "nope") is None
    assert snap.row_of("nope", "h100") is None


def test_allocation_on_a_vanished_pool_still_holds_cpu_and_memory() -> None:
    snap = make_snapshot(
        [node("g0", "nvidia-h100", 4, cpu=32, mem=256)], [pool("h100", "nvidia-h100", ["g0"])], [alloc("g0", "gone", [0], cpu=8, mem=64)]
    )
    assert snap.free_cpu.tolist() == [24.0]
    assert snap.free_mem.tolist() == [192.0]
    assert snap.whole_free().tolist() == [4]


def test_snapshot_copy_is_independent() -> None:
    snap = _two_h100_nodes(used_on_g1=0)
    copy = snap.copy()
    copy.take(0, (0, 1), 1.0, 4, 16)
    assert snap.whole_free().tolist() == [8, 8]
    assert copy.whole_free().tolist() == [6, 8]
    assert snap.free_cpu[0] == 128 and copy.free_cpu[0] == 124
    assert snap.free_mem[0] == 1024 and copy.free_mem[0] == 1008


def test_snapshot_emptied_frees_everything_without_touching_the_original() -> None:
    snap = _two_h100_nodes(used_on_g1=8)
    snap.take(0, (0,), 0.5, 100, 1000)
    before = _arrays(snap)
    idle = snap.emptied()
    assert idle.whole_free().tolist() == [8, 8]
    np.testing.assert_array_equal(idle.free_cpu, snap.total_cpu)
    np.testing.assert_array_equal(idle.free_mem, snap.total_mem)
    _assert_arrays_equal(before, snap)
    idle.take(1, (0,), 1.0, 1, 1)
    _assert_arrays_equal(before, snap)
    np.testing.assert_array_equal(snap.total_cpu, [128, 128])


def test_snapshot_take_and_release_round_trip() -> None:
    snap = _two_h100_nodes(used_on_g1=0)
    before = _arrays(snap)
    snap.take(1, (2, 3), 0.5, 8, 32)
    assert snap.dev_free[1].tolist() == [1, 1, 0.5, 0.5, 1, 1, 1, 1]
    assert snap.free_cpu.tolist() == [128, 120]
    assert snap.whole_free().tolist() == [8, 6]
    assert snap.fraction_free(0.5).tolist() == [8, 8]
    snap.release(1, (2, 3), 0.5, 8, 32)
    _assert_arrays_equal(before, snap)


def test_take_ignores_out_of_range_device_indices() -> None:
    snap = _two_h100_nodes(used_on_g1=0)
    snap.take(0, (99, -1), 1.0, 0, 0)
    assert snap.whole_free().tolist() == [8, 8]


def test_cpu_pool_rows_have_one_device_slot_and_gpu_less_nodes_are_skipped_in_gpu_pools() -> None:
    snap = make_snapshot(
        [node("c0", cpu=64, mem=256), node("g0", "nvidia-h100", 8)],
        [pool("cpu", "cpu-x86-64", ["c0", "g0"]), pool("h100", "nvidia-h100", ["c0", "g0"])],
    )
    cpu_pool = snap.pools[snap.pool_by_name["cpu"]]
    gpu_pool = snap.pools[snap.pool_by_name["h100"]]
    assert [snap.node_names[snap.row_node[r]] for r in cpu_pool.rows] == ["c0", "g0"]
    assert [len(snap.dev_free[r]) for r in cpu_pool.rows] == [1, 1]
    assert [snap.node_names[snap.row_node[r]] for r in gpu_pool.rows] == ["g0"]


@pytest.mark.parametrize("unhealthy", [{"g1"}, set()])
def test_snapshot_health_mask(unhealthy: set[str]) -> None:
    nodes = [node("g0", "nvidia-h100"), node("g1", "nvidia-h100"), node("g2", "nvidia-h100", schedulable=False)]
    snap = make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0", "g1", "g2"])], unhealthy_nodes=unhealthy)
    assert snap.node_healthy.tolist() == [True, "g1" not in unhealthy, False]


# ------------------------------------------------------------------ snapshot caches as fields


def test_snapshot_caches_are_declared_fields_shared_by_copies() -> None:
    snap = _two_h100_nodes()
    declared = {f.name for f in fields(snap)}
    assert {"compat_cache", "group_cache", "perf_cache", "unit_factors", "row_price", "node_feature_sets"} <= declared
    clone = snap.copy()
    assert clone.compat_cache is snap.compat_cache and clone.group_cache is snap.group_cache
    run_cycle(clone, [_q("t", 0, devices={"class": "gpu"})], CHECK, T0)
    assert snap.compat_cache  # verdicts computed on the copy are kept for the next cycle
    assert clone.free_cpu is not snap.free_cpu


# ------------------------------------------------------------------ waiting for a recovery


def test_a_task_only_unhealthy_capacity_could_run_waits_for_its_recovery_not_forever() -> None:
    """g1 is down now (its engine's controller restarting, say): a gang of two nodes could
    run only with it back. It waits for that, without an estimate or a preemption; a task
    that no node could run even healthy still never fits; a cordon (set in the inventory)
    is no recovery to wait for."""
    nodes = [node("g0", "nvidia-h100", 8, stack=CUDA_STACK), node("g1", "nvidia-h100", 8, stack=CUDA_STACK)]
    nodes.append(node("g2", "nvidia-h100", 8, stack=CUDA_STACK, schedulable=False))
    snap = make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0", "g1", "g2"])], unhealthy_nodes={"g1"})
    queue = [
        _q("gang", 0, devices={"class": "gpu", "count": 8}, workers=2),
        _q("trio", 1, devices={"class": "gpu", "count": 8}, workers=3),
    ]
    decisions = {d.task_id: d for d in run_cycle(snap, queue, CHECK, T0).decisions}
    gang, trio = decisions["gang"], decisions["trio"]
    assert not gang.admit and gang.explanation.reason == "waiting_for_recovery" and not gang.victims
    assert "unhealthy nodes or devices to come back" in gang.explanation.summary
    assert gang.explanation.facts.get("estimated_start") is None
    assert trio.explanation.reason == "never_fits"  # three nodes only with the cordoned one
    recovered = snap.recovered()
    assert recovered.node_healthy.tolist() == [True, True, False]
    assert snap.node_healthy.tolist() == [True, False, False]  # the snapshot itself is unchanged
