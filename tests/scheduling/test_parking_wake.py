"""When a parked head (scheduling/parking.py) is let go: a head held back by another head's
reservation waits parked until that reservation ends or moves (on the benchmark's 5,000-node
estate ~1,900 such heads were re-decided every cycle); a gang is let go by freed capacity
only once all its workers could fit, not one (most heads let go by growth there were gangs
that failed again)."""

from __future__ import annotations

from datetime import timedelta

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.explain import Reason
from tests.scheduling.factories import CUDA_STACK, alloc, node, pool, running_task, snapshot_with_running, task
from tests.scheduling.test_explanations import CHECK, H100, T0, _by_id, _gang, _small


def _reservation_estate(evictable: bool):
    """test_explanations' estate (g0, g1 half used until +2h / +3h, g2 full until +10h),
    with g2's low-priority work preemptible or not."""
    running = [
        running_task("r0", [alloc("g0", "h100", range(4))], priority="low", expected_end=T0 + timedelta(hours=2), preemptible=False),
        running_task("r1", [alloc("g1", "h100", range(4))], priority="low", expected_end=T0 + timedelta(hours=3), preemptible=False),
        running_task("r2", [alloc("g2", "h100", range(8))], priority="low", expected_end=T0 + timedelta(hours=10), preemptible=evictable),
    ]
    nodes = [node(n, H100, 8, stack=CUDA_STACK) for n in ("g0", "g1", "g2")]
    return snapshot_with_running(nodes, [pool("h100", H100, ["g0", "g1", "g2"])], running), running


def test_a_head_blocked_by_a_reservation_waits_parked_until_the_reservation_is_gone() -> None:
    snap, running = _reservation_estate(evictable=False)
    policy = SchedulingPolicySpec(park_waiting=True)
    gang, small = _gang(), _small()  # the same queued tasks every cycle (a new spec is a change)
    first = _by_id(run_cycle(snap, [gang, small], CHECK, T0, running=running, policy=policy))
    assert first["small"].explanation.reason is Reason.BLOCKED_BY_RESERVATION
    assert "small" in snap.parking["state"].parked
    # Nothing changed: the gang still holds its reservation, the small task is passed over.
    again = run_cycle(snap, [gang, small], CHECK, T0, running=running, policy=policy)
    assert [d.task_id for d in again.decisions] == ["gang"] and again.parked == 1
    # The gang is withdrawn: its reservation is gone, and the small task starts at its turn.
    freed = _by_id(run_cycle(snap, [small], CHECK, T0, running=running, policy=policy))
    assert freed["small"].admit


def test_a_parked_gang_is_let_go_when_all_its_workers_could_fit_not_one() -> None:
    end = T0 + timedelta(hours=5)
    busy = {
        n: running_task(f"r-{n}", [alloc(n, "h100", range(8))], priority="critical", preemptible=False, expected_end=end) for n in ("g0", "g1", "g2")
    }
    busy["a0"] = running_task("r-a0", [alloc("a0", "a100", range(8))], priority="critical", preemptible=False, expected_end=end)
    nodes = [node(n, "nvidia-h100", 8, stack=CUDA_STACK) for n in ("g0", "g1", "g2")] + [node("a0", "nvidia-a100-80g", 8, stack=CUDA_STACK)]
    snap = snapshot_with_running(nodes, [pool("h100", "nvidia-h100", ["g0", "g1", "g2"]), pool("a100", "nvidia-a100-80g", ["a0"])], busy.values())
    # w0 holds the queue's reservation (on the A100 node); the gang waits parked behind it.
    w0 = QueuedTask("w0", task("w0", devices={"class": "gpu", "count": 8, "models": ["nvidia-a100-80g"]}), T0)
    gang = QueuedTask("gang", task("gang", workers=2, devices={"class": "gpu", "count": 8, "models": ["nvidia-h100"]}), T0 + timedelta(minutes=1))
    policy = SchedulingPolicySpec(park_waiting=True)

    def cycle():
        return _by_id(run_cycle(snap, [w0, gang], CHECK, T0, running=list(busy.values()), policy=policy, estimate=False))

    def finish(name: str) -> None:
        a = busy.pop(name).allocations[0]
        snap.release(snap.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)

    first = cycle()
    assert first["gang"].explanation.reason is Reason.WAITING_FOR_CAPACITY and "gang" in snap.parking["state"].parked
    finish("g0")  # one worker's node frees: not enough for the gang, it stays passed over
    assert "gang" not in cycle()
    finish("g1")  # now both workers could fit: it is let go and starts
    assert cycle()["gang"].admit


def test_a_parked_slice_is_let_go_only_when_a_device_has_its_share_free() -> None:
    """A slice (here 40 GB of an 80 GB H100: half a device) waits for a device with half of
    it free; slices ending elsewhere on the device that free less do not let it go (before,
    any growth on its pools did, and on the benchmark's estate ~120 slices a cycle were
    decided again, to fail again)."""
    end = T0 + timedelta(hours=5)
    busy = {"whole": running_task("whole", [alloc("g0", "h100", range(1, 8))], priority="critical", preemptible=False, expected_end=end)}
    for name, share in (("half", 0.5), ("quarter", 0.25), ("eighth", 0.125)):
        busy[name] = running_task(name, [alloc("g0", "h100", [0], fraction=share)], priority="critical", preemptible=False, expected_end=end)
    # g1 ends first: the whole-node head ahead of the slice reserves it, not g0.
    busy["g1"] = running_task("g1", [alloc("g1", "h100", range(8))], priority="critical", preemptible=False, expected_end=T0 + timedelta(hours=1))
    nodes = [node(n, "nvidia-h100", 8, stack=CUDA_STACK) for n in ("g0", "g1")]
    snap = snapshot_with_running(nodes, [pool("h100", "nvidia-h100", ["g0", "g1"], shareable=True)], busy.values())
    ahead = QueuedTask("ahead", task("ahead", devices={"class": "gpu", "count": 8}), T0)
    slice_ = QueuedTask("slice", task("slice", devices={"class": "gpu", "count": 1, "memory_gb": 40}), T0 + timedelta(minutes=1))
    policy = SchedulingPolicySpec(park_waiting=True)

    def cycle():
        return _by_id(run_cycle(snap, [ahead, slice_], CHECK, T0, running=list(busy.values()), policy=policy, estimate=False))

    def finish(name: str) -> None:
        a = busy.pop(name).allocations[0]
        snap.release(snap.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)

    first = cycle()
    assert not first["slice"].admit and "slice" in snap.parking["state"].parked
    finish("eighth")  # device 0 now has a quarter free: not its half
    assert "slice" not in cycle()
    finish("quarter")  # half free: it is let go and starts there
    started = cycle()["slice"]
    assert started.admit and started.assignment.placements[0].device_indices == (0,)


def test_a_blocked_head_with_work_it_could_evict_is_decided_every_cycle() -> None:
    """Blocked by a reservation it plans no preemption; once the free capacity beside the
    reservation is taken it is no longer blocked and does (tests/sim/test_parking.py, seed
    105). Capacity shrinking is nothing parking watches, so such a head is not parked."""
    snap, running = _reservation_estate(evictable=True)
    policy = SchedulingPolicySpec(park_waiting=True)
    gang, small = _gang(), _small()
    first = _by_id(run_cycle(snap, [gang, small], CHECK, T0, running=running, policy=policy))
    assert first["small"].explanation.reason is Reason.BLOCKED_BY_RESERVATION
    assert "small" not in snap.parking["state"].parked
    again = run_cycle(snap, [gang, small], CHECK, T0, running=running, policy=policy)
    assert sorted(d.task_id for d in again.decisions) == ["gang", "small"] and again.parked == 0
