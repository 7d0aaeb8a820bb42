"""Choosing victims for preemption, with the real device catalog and compatibility KB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from hetpool.core.inventory import TaskType
from hetpool.core.tasks import Priority
from hetpool.scheduling.assign import assign
from hetpool.scheduling.preempt import PreemptionPlan, find_victims
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, Snapshot
from tests.scheduling.factories import CUDA_STACK, alloc, cann_stack, compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
A100 = "nvidia-a100-80g"
T0 = datetime(2025, 1, 1, tzinfo=UTC)
LOW, NORMAL, HIGH = Priority.LOW.rank, Priority.NORMAL.rank, Priority.HIGH.rank


def _running(id: str, allocations: list[Allocation], *, rank: int = LOW, started_min: int = 0, preemptible: bool = True) -> RunningTask:
    return RunningTask(
        id=id,
        tenant="ai-lab/nlp/p",
        priority_rank=rank,
        task_type=TaskType.TRAINING,
        allocations=tuple(allocations),
        started_at=T0 + timedelta(minutes=started_min),
        expected_end=None,
        preemptible=preemptible,
    )


def _cluster(n: int, running: list[RunningTask]) -> Snapshot:
    """`n` 8-GPU A100 nodes g0.. in pool "a100", with `running`'s allocations applied."""
    nodes = [node(f"g{i}", A100, 8, stack=CUDA_STACK) for i in range(n)]
    return make_snapshot(nodes, [pool("a100", A100, [x.name for x in nodes])], [a for r in running for a in r.allocations])


def _full(id: str, node_name: str, **kw) -> RunningTask:
    return _running(id, [alloc(node_name, "a100", range(8))], **kw)


def _gpus(count: int = 8, workers: int = 1, **fields):
    return task("pre", devices={"class": "gpu", "count": count}, workers=workers, **fields)


def _ids(plan: PreemptionPlan | None) -> list[str]:
    assert plan is not None
    return [v.id for v in plan.victims]


def _state(snap: Snapshot) -> tuple:
    return (snap.free_cpu.copy(), snap.free_mem.copy(), snap.row_free_whole.copy(), [d.copy() for d in snap.dev_free])


# ------------------------------------------------------------------ who may be evicted


def test_high_priority_evicts_the_low_task_holding_the_only_node() -> None:
    running = [_full("low-1", "g0", rank=LOW)]
    snap = _cluster(1, running)
    plan = find_victims(snap, _gpus(8), HIGH, running, CHECK, preemptor_id="t-123")
    assert _ids(plan) == ["low-1"]
    assert plan.assignment.feasible
    [placement] = plan.assignment.placements
    assert (placement.node, placement.pool, placement.device_indices) == ("g0", "a100", tuple(range(8)))
    assert plan.reason == "preempted by t-123 (priority high) to free 8 nvidia-a100-80g on g0"


def test_equal_priority_never_preempts() -> None:
    running = [_full("n-1", "g0", rank=NORMAL)]
    assert find_victims(_cluster(1, running), _gpus(8), NORMAL, running, CHECK) is None


def test_higher_priority_running_task_is_never_a_victim() -> None:
    running = [_full("h-1", "g0", rank=HIGH)]
    assert find_victims(_cluster(1, running), _gpus(8), NORMAL, running, CHECK) is None


def test_non_preemptible_tasks_are_never_chosen() -> None:
    pinned = _full("pinned", "g0", rank=LOW, started_min=10, preemptible=False)
    assert find_victims(_cluster(1, [pinned]), _gpus(8), HIGH, [pinned], CHECK) is None

    # With a preemptible task elsewhere, that one goes even though the pinned one is newer.
    running = [pinned, _full("ok", "g1", rank=LOW, started_min=0)]
    plan = find_victims(_cluster(2, running), _gpus(8), HIGH, running, CHECK)
    assert _ids(plan) == ["ok"]
    assert {p.node for p in plan.assignment.placements} == {"g1"}


def test_allowed_callback_is_honoured() -> None:
    running = [_full("low", "g0", rank=LOW), _full("normal", "g1", rank=NORMAL)]
    snap = _cluster(2, running)
    plan = find_victims(snap, _gpus(8), HIGH, running, CHECK, allowed=lambda r: r.id != "low")
    assert _ids(plan) == ["normal"]
    assert find_victims(snap, _gpus(8), HIGH, running, CHECK, allowed=lambda r: False) is None


def test_tasks_on_pools_the_preemptor_cannot_use_are_not_candidates() -> None:
    # The NPU task is lower priority and newer, but evicting it frees nothing a GPU task can use.
    nodes = [node("g0", A100, 8, stack=CUDA_STACK), node("n0", "ascend-910b1", 8, stack=cann_stack("8.5.0"))]
    pools = [pool("a100", A100, ["g0"]), pool("npu", "ascend-910b1", ["n0"])]
    running = [
        _full("gpu-normal", "g0", rank=NORMAL, started_min=0),
        _running("npu-low", [alloc("n0", "npu", range(8))], rank=LOW, started_min=30),
    ]
    snap = make_snapshot(nodes, pools, [a for r in running for a in r.allocations])
    asked: list[str] = []
    plan = find_victims(snap, _gpus(8), HIGH, running, CHECK, allowed=lambda r: asked.append(r.id) or True)
    assert _ids(plan) == ["gpu-normal"]
    assert asked == ["gpu-normal"]  # the policy is only consulted about tasks that could help


def test_no_plan_when_evicting_everything_does_not_help() -> None:
    running = [_full("low-0", "g0"), _full("low-1", "g1")]
    snap = _cluster(2, running)
    mindspore = _gpus(1, framework={"name": "mindspore", "version": "2.9"}, image="ms:2.9")
    assert find_victims(snap, mindspore, HIGH, running, CHECK) is None
    # Three 8-GPU workers never fit on two nodes.
    assert find_victims(snap, _gpus(8, workers=3), HIGH, running, CHECK) is None


def test_task_that_already_fits_needs_no_victims() -> None:
    running = [_full("low-0", "g0")]
    plan = find_victims(_cluster(2, running), _gpus(8), HIGH, running, CHECK)
    assert _ids(plan) == []
    assert plan.assignment.feasible
    assert {p.node for p in plan.assignment.placements} == {"g1"}


# ------------------------------------------------------------------ smallest set, order


def test_one_victim_when_one_node_suffices() -> None:
    running = [_full("low-0", "g0", started_min=0), _full("low-1", "g1", started_min=5)]
    snap = _cluster(2, running)
    plan = find_victims(snap, _gpus(8), HIGH, running, CHECK)
    assert _ids(plan) == ["low-1"]  # the newer one: less work lost


def test_two_victims_for_two_full_node_workers() -> None:
    running = [_full("low-0", "g0"), _full("low-1", "g1"), _full("low-2", "g2", rank=NORMAL)]
    snap = _cluster(3, running)
    plan = find_victims(snap, _gpus(8, workers=2), HIGH, running, CHECK)
    assert sorted(_ids(plan)) == ["low-0", "low-1"]
    assert sorted(p.node for p in plan.assignment.placements) == ["g0", "g1"]


def test_lower_priority_goes_before_higher_low() -> None:
    # The normal task started later (less work lost) but low priority goes first.
    running = [_full("normal", "g0", rank=NORMAL, started_min=60), _full("low", "g1", rank=LOW, started_min=0)]
    plan = find_victims(_cluster(2, running), _gpus(8), HIGH, running, CHECK)
    assert _ids(plan) == ["low"]
    assert {p.node for p in plan.assignment.placements} == {"g1"}


def test_most_recently_started_goes_first_among_equals() -> None:
    running = [_full(f"low-{m}", f"g{i}", started_min=m) for i, m in enumerate([10, 30, 20])]
    plan = find_victims(_cluster(3, running), _gpus(8), HIGH, running, CHECK)
    assert _ids(plan) == ["low-30"]


def test_smaller_goes_first_among_equal_priority_and_age() -> None:
    running = [
        _running("big", [alloc("g0", "a100", range(8))]),
        _running("small", [alloc("g1", "a100", range(4))]),
        _running("pinned", [alloc("g1", "a100", range(4, 8))], preemptible=False),
    ]
    plan = find_victims(_cluster(2, running), _gpus(4), HIGH, running, CHECK)
    assert _ids(plan) == ["small"]
    assert plan.assignment.placements[0].device_indices == (0, 1, 2, 3)


def test_redundant_early_victim_is_dropped_by_minimisation() -> None:
    # "tiny" is first in eviction order but freeing its one GPU does not help on its own;
    # once "whole" is gone the task fits on g1, so tiny is spared.
    running = [
        _running("tiny", [alloc("g0", "a100", [0])], rank=LOW, started_min=50),
        _running("rest", [alloc("g0", "a100", range(1, 8))], rank=NORMAL, started_min=0),
        _full("whole", "g1", rank=LOW, started_min=10),
    ]
    plan = find_victims(_cluster(2, running), _gpus(8), HIGH, running, CHECK)
    assert _ids(plan) == ["whole"]


def test_victims_are_in_eviction_order() -> None:
    running = [_full("low-old", "g0", started_min=0), _full("low-new", "g1", started_min=9), _full("normal", "g2", rank=NORMAL)]
    plan = find_victims(_cluster(3, running), _gpus(8, workers=3), HIGH, running, CHECK)
    assert _ids(plan) == ["low-new", "low-old", "normal"]


# ------------------------------------------------------------------ the plan itself


def test_input_snapshot_is_unchanged() -> None:
    running = [_full("low-0", "g0"), _full("low-1", "g1"), _running("half", [alloc("g2", "a100", range(4), cpu=8, mem=64)])]
    snap = _cluster(3, running)
    before = _state(snap)
    plan = find_victims(snap, _gpus(8, workers=2), HIGH, running, CHECK)
    assert plan is not None
    cpu, mem, whole, devs = before
    np.testing.assert_array_equal(cpu, snap.free_cpu)
    np.testing.assert_array_equal(mem, snap.free_mem)
    np.testing.assert_array_equal(whole, snap.row_free_whole)
    for a, b in zip(devs, snap.dev_free, strict=True):
        np.testing.assert_array_equal(a, b)


def test_assignment_lands_on_devices_freed_by_victims() -> None:
    # g0 half full with a non-preemptible task; the low task holds the other half.
    running = [
        _running("pinned", [alloc("g0", "a100", range(4))], preemptible=False),
        _running("low", [alloc("g0", "a100", range(4, 8))]),
    ]
    plan = find_victims(_cluster(1, running), _gpus(2, workers=2), HIGH, running, CHECK)
    assert _ids(plan) == ["low"]
    freed = {("g0", i) for a in plan.victims[0].allocations for i in a.device_indices}
    used = {(p.node, i) for p in plan.assignment.placements for i in p.device_indices}
    assert used and used <= freed
    assert "4 nvidia-a100-80g on g0" in plan.reason


def test_cpu_freed_by_a_victim_counts() -> None:
    # GPUs are idle but the node's CPUs are taken by a low-priority CPU-heavy task.
    running = [_running("cpu-hog", [alloc("g0", "a100", [], fraction=0.0, cpu=120, mem=10)])]
    snap = _cluster(1, running)
    plan = find_victims(snap, _gpus(8, per_worker={"cpu": 64}), HIGH, running, CHECK, preemptor_id="p")
    assert _ids(plan) == ["cpu-hog"]
    assert plan.reason == "preempted by p (priority high) to free 120 CPU on g0"


def _minimal_plainly(snap: Snapshot, spec, chosen: list[RunningTask]) -> list[str]:
    """The minimisation as first written: every victim put back in reverse order, one
    placement each, kept evicted only when the task no longer fits without it."""
    scratch = snap.copy()
    for victim in chosen:
        for a in victim.allocations:
            scratch.release(scratch.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)
    needed = {chosen[-1].id}
    for victim in reversed(chosen[:-1]):
        for a in victim.allocations:
            scratch.take(scratch.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)
        if not assign(scratch, spec, CHECK).feasible:
            for a in victim.allocations:
                scratch.release(scratch.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)
            needed.add(victim.id)
    return [v.id for v in chosen if v.id in needed]


def test_victims_put_back_off_the_placement_are_the_plain_minimisations(monkeypatch) -> None:
    """find_victims puts a victim back without a placement when it holds nothing on the nodes
    of a placement that fits (most of a busy estate's chosen victims are small ones
    elsewhere). Random estates: the same victims as asking a placement for every one, and
    fewer placements asked."""
    import hetpool.scheduling.preempt as preempt

    calls = {"n": 0}

    def counted(*args, **kwargs):
        calls["n"] += 1
        return assign(*args, **kwargs)

    monkeypatch.setattr(preempt, "assign", counted)
    rng = np.random.default_rng(7)
    fewer = 0
    for trial in range(30):
        running, n = [], 6
        for i in range(n):
            free = list(range(8))
            rng.shuffle(free)
            while free:
                k = int(rng.integers(1, 4))
                taken, free = free[:k], free[k:]
                running.append(_running(f"r{trial}-{i}-{len(free)}", [alloc(f"g{i}", "a100", taken)], started_min=int(rng.integers(0, 100))))
        snap = _cluster(n, running)
        spec = _gpus(count=int(rng.integers(1, 9)), workers=int(rng.integers(1, 3)))
        calls["n"] = 0
        plan = find_victims(snap, spec, HIGH, running, CHECK)
        assert plan is not None and plan.assignment.feasible
        order = sorted(running, key=lambda r: (r.priority_rank, -r.started_at.timestamp(), sum(len(a.device_indices) for a in r.allocations), r.id))
        # The prefix find_victims chose: its victims are a subset of it, the last one included.
        last = max(order.index(v) for v in plan.victims)
        assert _ids(plan) == _minimal_plainly(snap, spec, order[: last + 1])
        fewer += calls["n"] < last + 1
    assert fewer > 0
