"""Running work as arrays (victim_arrays.py): giving back the first k candidates in one
numpy step must leave a snapshot exactly as releasing them one by one does, and the
candidate filter must pick exactly what the per-task rule picks."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np

from hetpool.core.inventory import TaskType
from hetpool.scheduling.preempt import _release
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Snapshot
from hetpool.scheduling.victim_arrays import ARRAYS_KEY, RunningArrays, cycle_arrays
from tests.scheduling.factories import CUDA_STACK, alloc, make_snapshot, node, pool

A100, T4 = "nvidia-a100-80g", "nvidia-t4"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _estate(rng: random.Random) -> tuple[Snapshot, list[RunningTask]]:
    """Two pools on six nodes, random whole and fractional workers, some on a pool or node
    the inventory no longer has (their capacity was charged to the node, or not at all)."""
    nodes = [node(f"g{i}", A100 if i < 4 else T4, 8, stack=CUDA_STACK) for i in range(6)]
    pools = [pool("a100", A100, [f"g{i}" for i in range(4)]), pool("t4", T4, ["g4", "g5"])]
    running, allocations = [], []
    for t in range(40):
        workers = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            i = rng.randrange(7)
            name = f"g{i}" if i < 6 else "gone-node"
            pool_name = "a100" if i < 4 else "t4"
            if rng.random() < 0.1:
                pool_name = "gone-pool"
            fraction = rng.choice([1.0, 0.5, 0.25])
            devices = rng.sample(range(8), rng.choice([0, 1, 2, 4])) + ([9] if rng.random() < 0.05 else [])  # 9: past the row's end
            workers.append(alloc(name, pool_name, devices, fraction=fraction, cpu=rng.choice([0.5, 2, 8]), mem=rng.choice([1, 16])))
        allocations += workers
        running.append(
            RunningTask(
                id=f"r{t}",
                tenant="t",
                priority_rank=rng.randrange(4),
                task_type=TaskType.TRAINING,
                allocations=tuple(workers),
                started_at=T0 + timedelta(minutes=rng.randrange(100)),
                expected_end=None,
                preemptible=rng.random() < 0.8,
            )
        )
    known = {"g0", "g1", "g2", "g3", "g4", "g5"}
    return make_snapshot(nodes, pools, [a for a in allocations if a.node in known and a.pool != "gone-pool"]), running


def _state(snap: Snapshot) -> tuple:
    return (snap.free_cpu, snap.free_mem, snap.row_free_whole, snap.pool_free_whole, snap.dev_free.data)


def test_releasing_a_prefix_in_one_step_equals_releasing_each_task_in_turn() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        snap, running = _estate(rng)
        before = [x.copy() for x in _state(snap)]
        arrays = RunningArrays(snap, running)
        order = rng.sample(range(len(running)), 25)
        releases = arrays.releases(order)
        for k in (0, 1, 7, 25):
            expected = snap.copy()
            for i in order[:k]:
                _release(expected, running[i])
            got = releases.released(snap, k)
            for a, b in zip(_state(got), _state(expected), strict=True):
                assert np.array_equal(a, b), (seed, k)
        assert all(np.array_equal(a, b) for a, b in zip(_state(snap), before, strict=True)), "the snapshot itself is not changed"


def test_candidates_are_the_preemptible_lower_ranked_or_reclaimable_work_on_usable_nodes() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        snap, running = _estate(rng)
        arrays = RunningArrays(snap, running, eligible=lambda r: r.id != "r3")
        usable = np.array([rng.random() < 0.5 for _ in snap.node_names], dtype=np.float64)
        usable_names = {n for n, u in zip(snap.node_names, usable, strict=True) if u}
        rank, also = 2, {"r5", "r6", "no-such-task"}
        expected = [
            i
            for i, r in enumerate(running)
            if r.preemptible and r.id != "r3" and (r.priority_rank < rank or r.id in also) and any(a.node in usable_names for a in r.allocations)
        ]
        assert list(arrays.candidates(usable, rank, also)) == expected, seed


def _arrays_state(arrays: RunningArrays) -> tuple:
    return (
        arrays.rank,
        arrays.eligible,
        arrays.node_off,
        arrays.dev_off,
        arrays.node_owner,
        arrays.node,
        arrays.cpu,
        arrays.mem,
        arrays.dev_row,
        arrays.dev_col,
        arrays.dev_frac,
    )


def test_arrays_built_from_the_previous_cycles_equal_a_fresh_build() -> None:
    """cycle_arrays takes a task's entries from the previous cycle's arrays while it keeps
    its placement: over random cycles (work ends, starts, is re-placed under the same id,
    changes priority or preemptibility, the running order shuffles) every build equals
    one from scratch, entry for entry."""
    for seed in range(20):
        rng = random.Random(seed)
        snap, pool_of_work = _estate(rng)
        running = rng.sample(pool_of_work, 20)
        previous = None
        for _ in range(8):
            arrays = RunningArrays(snap, running, previous=previous)
            fresh = RunningArrays(snap, running)
            for a, b in zip(_arrays_state(arrays), _arrays_state(fresh), strict=True):
                assert a.dtype == b.dtype and np.array_equal(a, b), seed
            assert [arrays.tasks[i].id for i in range(len(running))] == [r.id for r in running]
            previous = arrays
            kept = [r for r in running if rng.random() < 0.8]
            started = rng.sample([r for r in pool_of_work if r not in kept], rng.randrange(4))
            # the same id placed elsewhere (a requeued task's next attempt), or its priority changed
            moved = [
                RunningTask(r.id, r.tenant, r.priority_rank, r.task_type, rng.choice(pool_of_work).allocations, r.started_at, None) for r in kept[:2]
            ]
            changed = [
                RunningTask(r.id, r.tenant, 3 - r.priority_rank, r.task_type, r.allocations, r.started_at, None, preemptible=not r.preemptible)
                for r in kept[2:4]
            ]
            running = moved + changed + kept[4:] + started
            rng.shuffle(running)


def test_cycle_arrays_keeps_the_last_build_with_the_snapshot() -> None:
    snap, running = _estate(random.Random(3))
    first = cycle_arrays(snap, running[:30])
    second = cycle_arrays(snap.copy(), running[10:])  # a cycle's copy shares the snapshot's memory
    assert snap.parking[ARRAYS_KEY] is second and second is not first
    fresh = RunningArrays(snap, running[10:])
    assert all(np.array_equal(a, b) for a, b in zip(_arrays_state(second), _arrays_state(fresh), strict=True))
