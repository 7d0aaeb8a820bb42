"""A bounded cycle (policy.max_heads_per_cycle): at most that many heads are decided per
cycle — half from the front of the queue, half rotating through the rest — and the tasks
passed over carry to the next cycle, so the tail gets its turn however stuck the front is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, make_snapshot, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _estate():
    nodes = [node(f"g{i}", "nvidia-h100", 8, stack=CUDA_STACK) for i in range(2)]
    return make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0", "g1"])], [])


def _queue() -> list[QueuedTask]:
    # The front: ten gangs that can never fit (3 × 8 devices on two nodes), high priority.
    stuck = [QueuedTask(f"big{i}", task(f"big{i}", priority="high", workers=3, devices={"class": "gpu", "count": 8}), T0) for i in range(10)]
    # The tail: ten one-device tasks that fit at once.
    small = [QueuedTask(f"small{i}", task(f"small{i}", devices={"class": "gpu", "count": 1}), T0 + timedelta(minutes=i)) for i in range(10)]
    return stuck + small


def test_a_bounded_cycle_decides_at_most_its_budget_and_the_rotation_reaches_the_tail() -> None:
    snap, queue = _estate(), _queue()
    policy = SchedulingPolicySpec(max_heads_per_cycle=4, park_waiting=False)  # the rotation alone (parking: test_parking.py)
    admitted: list[str] = []
    for _ in range(9):  # 8 stuck heads behind the front, then 10 small ones, 2 per cycle
        result = run_cycle(snap, [q for q in queue if q.id not in admitted], CHECK, T0, policy=policy, estimate=False)
        decided = {d.task_id for d in result.decisions}
        assert len(decided) <= 4
        assert result.carried == len(queue) - len(admitted) - len(decided)
        # The two most deserving heads are decided every cycle, however stuck.
        assert {"big0", "big1"} <= decided
        for d in result.admitted:
            admitted.append(d.task_id)
            for p in d.assignment.placements:
                snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
    assert sorted(admitted) == sorted(f"small{i}" for i in range(10))  # every tail task got its turn


def test_an_unbounded_cycle_decides_every_task() -> None:
    result = run_cycle(_estate(), _queue(), CHECK, T0, policy=SchedulingPolicySpec(max_heads_per_cycle=0), estimate=False)
    assert len(result.decisions) == 20 and result.carried == 0
    assert sum(d.admit for d in result.decisions) == 10


def _evict(snap, running: dict, victim: str) -> None:
    for a in running.pop(victim).allocations:
        snap.release(snap.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)


def test_a_preemptor_claims_what_it_freed_before_its_victims_come_back() -> None:
    """Regression (bench/scheduler_throughput.py): with a bounded scan, the preemptor was
    passed over in the next cycle while its evicted victim, requeued, was decided and took
    the devices back — and was evicted again, cycle after cycle."""
    low = running_task("low", [alloc("g0", "h100", range(8))], priority="low")
    other = running_task("other", [alloc("g1", "h100", range(8))], preemptible=False)
    running = {r.id: r for r in (low, other)}
    snap = snapshot_with_running(_estate_nodes(), [pool("h100", "nvidia-h100", ["g0", "g1"])], running.values())
    stuck = [QueuedTask(f"big{i}", task(f"big{i}", priority="high", workers=3, devices={"class": "gpu", "count": 8}), T0) for i in range(11)]
    # 2 heads from the front, 2 rotating: the preemptor is the last of a rotation window,
    # so the next window starts right behind it — where its requeued victim sits.
    preemptor = QueuedTask("pre", task("pre", devices={"class": "gpu", "count": 8}), T0 + timedelta(minutes=1))
    queue = {q.id: q for q in [*stuck, preemptor]}
    policy = SchedulingPolicySpec(max_heads_per_cycle=4, park_waiting=False)  # the rotation alone (parking: test_parking.py)
    history = []
    for _ in range(12):
        result = run_cycle(snap, list(queue.values()), CHECK, T0, policy=policy, running=list(running.values()), estimate=False)
        for d in result.decisions:
            for victim in d.victims:  # evicted at once, back in the queue with its age
                _evict(snap, running, victim)
                queue[victim] = QueuedTask(victim, task(victim, priority="low", devices={"class": "gpu", "count": 8}), T0 - timedelta(hours=1))
            if d.admit:
                history.append(d.task_id)
                del queue[d.task_id]
                for p in d.assignment.placements:
                    snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
                running[d.task_id] = running_task(d.task_id, [alloc(p.node, p.pool, p.device_indices) for p in d.assignment.placements])
    assert history == ["pre"]  # the victim never took its devices back
    assert "low" in queue and "low" not in running


def _estate_nodes():
    return [node(f"g{i}", "nvidia-h100", 8, stack=CUDA_STACK) for i in range(2)]


def test_a_what_if_cycle_leaves_the_schedulers_memory_alone() -> None:
    """`hetpool plan` runs a cycle on the live snapshot with the planned task added: on a
    copy with its own memory, it neither moves the rotating scan, nor claims, nor parks."""
    snap, queue = _estate(), _queue()
    policy = SchedulingPolicySpec(max_heads_per_cycle=4)
    run_cycle(snap, queue, CHECK, T0, policy=policy, estimate=False)
    cursor, parked = list(snap.scan_cursor), dict(snap.parking["state"].parked)
    assert parked  # the stuck gangs are parked: there is memory to protect
    run_cycle(snap.with_own_memory(), queue, CHECK, T0, policy=policy.model_copy(update={"estimate_horizon": 999}), estimate=False)
    assert snap.scan_cursor == cursor and snap.parking["state"].parked == parked
    assert snap.parking["state"].policy_key == repr(policy)


def test_every_queue_gets_a_share_of_the_front_however_stuck_another_queue_is() -> None:
    """As Kueue tries every ClusterQueue's head each cycle: a FIFO queue of small tasks that
    fit is not kept waiting behind another queue's stuck high-priority gangs until the
    rotation happens to reach it (the honest benchmark's `prep` queue waited ~25 cycles)."""
    queues = [
        QueueSpec(name="train", task_types=["training"], order=10),
        QueueSpec(name="prep", task_types=["preprocessing"], ordering="fifo", order=20),
    ]
    stuck = [QueuedTask(f"big{i}", task(f"big{i}", priority="high", workers=3, devices={"class": "gpu", "count": 8}), T0) for i in range(20)]
    # Arrived after every stuck gang: in plain queue order, all 20 come first.
    prep = [QueuedTask(f"prep{i}", task(f"prep{i}", type="preprocessing", priority="low"), T0 + timedelta(minutes=i)) for i in range(6)]
    policy = SchedulingPolicySpec(max_heads_per_cycle=4, park_waiting=False)  # front of 2: one turn per queue
    snap, queue, admitted = _estate(), stuck + prep, []
    for cycle in range(3):
        result = run_cycle(snap, [q for q in queue if q.id not in admitted], CHECK, T0, policy=policy, estimate=False, queues=queues)
        decided = [d.task_id for d in result.decisions]
        assert "big0" in decided  # the most deserving head of the stuck queue is still decided every cycle
        assert f"prep{cycle}" in [d.task_id for d in result.admitted]  # and the prep queue's head starts at once
        admitted += [d.task_id for d in result.admitted]
    # A queue with nothing to decide leaves its share to the others (water-filling).
    result = run_cycle(_estate(), stuck, CHECK, T0, policy=policy, estimate=False, queues=queues)
    assert [d.task_id for d in result.decisions][:2] == ["big0", "big1"]
