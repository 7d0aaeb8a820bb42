"""Start-time forecast for pending tasks, with the real device catalog and compatibility KB."""

from __future__ import annotations

import heapq
import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from hetpool.core.inventory import TaskType
from hetpool.scheduling.assign import assign
from hetpool.scheduling.cycle import QueuedTask
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.forecast import StartEstimate, forecast_starts
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, Snapshot
from tests.scheduling.factories import CUDA_STACK, alloc, catalog_models, compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
MODELS = catalog_models()
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
A100 = "nvidia-a100-80g"  # the reference device: relative performance 1.0


def _q(task_id: str, minutes: float = 0, **fields) -> QueuedTask:
    fields.setdefault("devices", {"class": "gpu", "count": 8})
    return QueuedTask(id=task_id, spec=task(task_id, **fields), queued_at=NOW - timedelta(minutes=minutes))


def _running(task_id: str, allocations: list[Allocation], end: datetime | None) -> RunningTask:
    return RunningTask(
        id=task_id,
        tenant="ai-lab/nlp/p",
        priority_rank=0,
        task_type=TaskType.TRAINING,
        allocations=tuple(allocations),
        started_at=NOW - timedelta(hours=1),
        expected_end=end,
    )


def _cluster(running: list[RunningTask], count: int = 1, model: str = A100, name: str = "a100") -> Snapshot:
    """`count` 8-device nodes in one pool, with the running tasks' allocations subtracted."""
    nodes = [node(f"g{i}", model, 8, stack=CUDA_STACK) for i in range(count)]
    held = [a for r in running for a in r.allocations]
    return make_snapshot(nodes, [pool(name, model, [n.name for n in nodes])], held)


def _forecast(snap: Snapshot, ordered: list[QueuedTask], running: list[RunningTask], **kw) -> dict[str, StartEstimate]:
    return forecast_starts(snap, ordered, running, CHECK, NOW, MODELS, **kw)


def _state(snap: Snapshot) -> tuple:
    return (snap.free_cpu.copy(), snap.free_mem.copy(), snap.whole_free().copy(), [d.copy() for d in snap.dev_free])


def _assert_same_state(before: tuple, snap: Snapshot) -> None:
    for a, b in zip(before[:3], _state(snap)[:3], strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(before[3], snap.dev_free, strict=True):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ basics


def test_task_that_fits_now_starts_now() -> None:
    est = _forecast(_cluster([]), [_q("t1", runtime_estimate="1h")], [])["t1"]
    assert est == StartEstimate("t1", 1, NOW, 0.0, "a100", A100)


def test_task_blocked_by_running_task_starts_when_it_ends() -> None:
    running = [_running("r1", [alloc("g0", "a100", range(8))], NOW + timedelta(hours=2))]
    est = _forecast(_cluster(running), [_q("t1")], running)["t1"]
    assert est.start_at == NOW + timedelta(hours=2)
    assert est.wait_s == pytest.approx(7200)
    assert (est.pool, est.model) == ("a100", A100)


def test_two_tasks_on_the_same_devices_queue_behind_each_other() -> None:
    running = [_running("r1", [alloc("g0", "a100", range(8))], NOW + timedelta(minutes=30))]
    ordered = [_q("t1", 2, runtime_estimate="1h"), _q("t2", 1, runtime_estimate="1h")]
    out = _forecast(_cluster(running), ordered, running)
    assert out["t1"].start_at == NOW + timedelta(minutes=30)
    assert out["t2"].start_at == NOW + timedelta(minutes=90)
    assert out["t2"].wait_s == pytest.approx(5400)


def test_runtime_scales_with_the_chosen_model() -> None:
    running = [_running("r1", [alloc("g0", "h100", range(8))], NOW + timedelta(minutes=30))]
    ordered = [_q("t1", runtime_estimate="1h"), _q("t2", runtime_estimate="1h")]
    out = _forecast(_cluster(running, model="nvidia-h100", name="h100"), ordered, running)
    on_h100 = runtime_on(ordered[0].spec, MODELS["nvidia-h100"])
    assert on_h100 < 3600
    assert out["t2"].start_at == NOW + timedelta(minutes=30) + timedelta(seconds=on_h100)
    assert out["t2"].model == "nvidia-h100"


def test_running_task_without_expected_end_blocks_forever() -> None:
    running = [_running("r1", [alloc("g0", "a100", range(8))], None)]
    est = _forecast(_cluster(running), [_q("t1", runtime_estimate="1h")], running)["t1"]
    assert est == StartEstimate("t1", 1, None, None, None, None)


def test_past_expected_end_counts_as_ending_now() -> None:
    running = [_running("r1", [alloc("g0", "a100", range(8))], NOW - timedelta(hours=3))]
    est = _forecast(_cluster(running), [_q("t1")], running)["t1"]
    assert est.start_at == NOW and est.wait_s == 0.0


def test_positions_follow_the_given_order() -> None:
    ordered = [_q(f"t{i}", i, runtime_estimate="1h") for i in (3, 1, 2, 0)]
    out = _forecast(_cluster([]), ordered, [])
    assert list(out) == ["t3", "t1", "t2", "t0"]
    assert [e.position for e in out.values()] == [1, 2, 3, 4]
    assert [e.start_at - NOW for e in out.values()] == [timedelta(hours=h) for h in (0, 1, 2, 3)]


def test_horizon_limits_estimates_but_keeps_positions() -> None:
    ordered = [_q(f"t{i}", devices={"class": "gpu", "count": 1}) for i in range(5)]
    out = _forecast(_cluster([]), ordered, [], horizon=2)
    assert [e.start_at for e in out.values()] == [NOW, NOW, None, None, None]
    assert [e.position for e in out.values()] == [1, 2, 3, 4, 5]
    assert out["t4"].wait_s is None and out["t4"].pool is None


def test_input_snapshot_is_not_changed() -> None:
    running = [_running("r1", [alloc("g0", "a100", range(4))], NOW + timedelta(minutes=30))]
    snap = _cluster(running, count=2)
    before = _state(snap)
    ordered = [_q(f"t{i}", runtime_estimate="1h") for i in range(4)] + [_q("small", devices={"class": "gpu", "count": 2})]
    out = _forecast(snap, ordered, running)
    assert all(e.start_at is not None for e in out.values())
    _assert_same_state(before, snap)


# ------------------------------------------------------------------ unknown runtimes, backfill, never fits


def test_started_task_without_estimate_holds_its_devices_unless_a_default_is_given() -> None:
    ordered = [_q("no-estimate"), _q("next", runtime_estimate="1h")]
    out = _forecast(_cluster([]), ordered, [])
    assert out["no-estimate"].start_at == NOW
    assert out["next"].start_at is None
    out = _forecast(_cluster([]), ordered, [], default_runtime_s=600)
    assert out["next"].start_at == NOW + timedelta(minutes=10)


def test_small_task_backfills_past_a_blocked_big_one() -> None:
    running = [_running("r1", [alloc("g0", "a100", range(4))], NOW + timedelta(hours=1))]
    ordered = [_q("big", runtime_estimate="1h"), _q("small", devices={"class": "gpu", "count": 2}, runtime_estimate="2h")]
    out = _forecast(_cluster(running), ordered, running)
    assert out["small"].start_at == NOW
    # The big task needs the small one's devices as well: it starts when both are gone.
    assert out["big"].start_at == NOW + timedelta(hours=2)


def test_task_that_can_never_fit_does_not_hold_up_the_rest() -> None:
    ordered = [_q("huge", devices={"class": "gpu", "count": 8}, workers=3), _q("ok", runtime_estimate="1h")]
    out = _forecast(_cluster([]), ordered, [])
    assert out["huge"].start_at is None
    assert out["ok"].start_at == NOW


def test_gang_waits_for_capacity_on_several_nodes() -> None:
    running = [
        _running("r0", [alloc("g0", "a100", range(8))], NOW + timedelta(hours=1)),
        _running("r1", [alloc("g1", "a100", range(8))], NOW + timedelta(hours=3)),
    ]
    est = _forecast(_cluster(running, count=2), [_q("gang", workers=2, runtime_estimate="1h")], running)["gang"]
    assert est.start_at == NOW + timedelta(hours=3)


def test_cpu_and_memory_released_on_a_node_count_for_its_other_pools() -> None:
    # r1 holds all of g0's CPU through the CPU pool; the GPU task on the same node waits for it.
    nodes = [node("g0", A100, 8, cpu=16, stack=CUDA_STACK)]
    pools = [pool("a100", A100, ["g0"]), pool("cpu", "cpu-x86-64", ["g0"])]
    running = [_running("r1", [alloc("g0", "cpu", (), fraction=0.0, cpu=16)], NOW + timedelta(minutes=45))]
    snap = make_snapshot(nodes, pools, [a for r in running for a in r.allocations])
    est = _forecast(snap, [_q("t1")], running)["t1"]
    assert est.start_at == NOW + timedelta(minutes=45)


# ------------------------------------------------------------------ larger queue against a plain reference


def _reference(snap: Snapshot, ordered: list[QueuedTask], running: list[RunningTask], default: float | None) -> dict:
    """The same simulation without any early exit: every event walks every pending task."""
    scratch = snap.copy()
    events = [(max(r.expected_end, NOW), i, r.allocations) for i, r in enumerate(running) if r.expected_end is not None]
    heapq.heapify(events)
    pending, starts, seq, t = list(ordered), {}, len(running), NOW
    while True:
        while events and events[0][0] <= t:
            for a in heapq.heappop(events)[2]:
                scratch.release(scratch.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)
        still = []
        for q in pending:
            result = assign(scratch, q.spec, CHECK)
            if not result.feasible:
                still.append(q)
                continue
            for w in result.placements:
                scratch.take(scratch.row_of(w.node, w.pool), w.device_indices, w.device_fraction, w.cpu, w.memory_gb)
            starts[q.id] = t
            runtime = max(runtime_on(q.spec, MODELS[w.model]) or -1 for w in result.placements)
            runtime = default if runtime < 0 else runtime
            if runtime is not None:
                heapq.heappush(events, (t + timedelta(seconds=runtime), seq, result.placements))
                seq += 1
        pending = still
        if not pending or not events:
            return starts
        t = events[0][0]


def _busy_cluster(seed: int, nodes_per_pool: int, n_running: int, n_pending: int, gangs: bool = False):
    rng = random.Random(seed)
    pools_spec = [("a100", A100), ("h100", "nvidia-h100"), ("l40s", "nvidia-l40s")]
    nodes, pools, free = [], [], {}
    for name, model in pools_spec:
        names = [f"{name}-{i}" for i in range(nodes_per_pool)]
        nodes += [node(n, model, 8, stack=CUDA_STACK, network_group=f"{name}-g{i // 4}", zone=f"z{i % 2}") for i, n in enumerate(names)]
        pools.append(pool(name, model, names, shareable=(name == "l40s")))
        free.update({n: (name, list(range(8))) for n in names})
    running = []
    for i in range(n_running):
        n = rng.choice([k for k, (_, idle) in free.items() if idle])
        pool_name, idle = free[n]
        take = [idle.pop() for _ in range(min(len(idle), rng.choice([1, 1, 2, 4])))]
        end = None if rng.random() < 0.03 else NOW + timedelta(minutes=rng.randint(-30, 600))
        running.append(_running(f"r{i}", [alloc(n, pool_name, take, cpu=4, mem=32)], end))
    ordered = []
    for i in range(n_pending):
        devices = {"class": "gpu", "count": rng.choice([1, 2, 4, 8, 0.5])}
        if rng.random() < 0.3:
            devices["models"] = [rng.choice([m for _, m in pools_spec])]
        fields = {"runtime_estimate": f"{rng.randint(10, 300)}m"} if rng.random() < 0.9 else {}
        workers = rng.choice([1, 1, 1, 2])
        if gangs and rng.random() < 0.5:  # one-model gangs, some of them within one node / group / zone
            workers = rng.choice([2, 3, 4])
            if rng.random() < 0.6:
                fields["topology"] = {"same": rng.choice(["node", "network_group", "zone"])}
        ordered.append(_q(f"p{i}", devices=devices, workers=workers, per_worker={"cpu": 4, "memory_gb": 32}, **fields))
    snap = make_snapshot(nodes, pools, [a for r in running for a in r.allocations])
    return snap, ordered, running


@pytest.mark.parametrize("default", [None, 1800.0])
def test_early_exits_agree_with_the_plain_simulation(default: float | None) -> None:
    snap, ordered, running = _busy_cluster(seed=7, nodes_per_pool=12, n_running=120, n_pending=60)
    before = _state(snap)
    out = _forecast(snap, ordered, running, default_runtime_s=default)
    expected = _reference(snap, ordered, running, default)
    assert {k: e.start_at for k, e in out.items() if e.start_at is not None} == expected
    assert any(e.start_at is None for e in out.values()) == (len(expected) < len(ordered))
    _assert_same_state(before, snap)


@pytest.mark.parametrize("seed", [7, 8])
def test_early_exits_agree_for_gangs_within_one_model_node_group_or_zone(seed: int) -> None:
    """The capacity bound asks whether one device model / node / network group / zone has
    room for the whole gang (forecast._gang_parts): it must never skip a start the plain
    simulation finds."""
    snap, ordered, running = _busy_cluster(seed=seed, nodes_per_pool=12, n_running=120, n_pending=60, gangs=True)
    assert any(q.spec.topology for q in ordered) and any(q.spec.workers > 2 for q in ordered)
    out = _forecast(snap, ordered, running, default_runtime_s=1800.0)
    expected = _reference(snap, ordered, running, 1800.0)
    assert {k: e.start_at for k, e in out.items() if e.start_at is not None} == expected


def test_two_hundred_pending_against_five_hundred_running() -> None:
    snap, ordered, running = _busy_cluster(seed=3, nodes_per_pool=40, n_running=500, n_pending=250)
    out = _forecast(snap, ordered, running)
    assert [e.position for e in out.values()] == list(range(1, 251))
    assert all(out[q.id].start_at is None for q in ordered[200:])
    estimated = [e for e in list(out.values())[:200] if e.start_at is not None]
    assert len(estimated) > 150
    for e in estimated:
        assert e.start_at >= NOW and e.wait_s == pytest.approx((e.start_at - NOW).total_seconds())
        assert e.pool in {"a100", "h100", "l40s"} and e.model == MODELS[e.model].name
