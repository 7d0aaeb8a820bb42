"""scheduling/migration.py: which checkpointed tasks move to faster idle devices, and who gets them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec, TaskType
from hetpool.core.policy import MigrationRule
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.migration import plan_moves
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, build_snapshot

MODELS = {m.name: m for m in DeviceCatalog.builtin().all()}
FAST, SLOW = "nvidia-h100", "nvidia-a100-80g"
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
RULE = MigrationRule(round="6m", overhead="60s", min_gain=0.1)


def _snapshot(fast_free: int = 2):
    nodes = [
        NodeSpec.model_validate({"name": "fast-1", "cluster": "c", "cpu_cores": 64, "memory_gb": 512, "devices": [{"model": FAST, "count": 4}]}),
        NodeSpec.model_validate({"name": "slow-1", "cluster": "c", "cpu_cores": 64, "memory_gb": 512, "devices": [{"model": SLOW, "count": 8}]}),
    ]
    pools = [PoolSpec(name="fast", cluster="c", model=FAST, nodes=["fast-1"]), PoolSpec(name="slow", cluster="c", model=SLOW, nodes=["slow-1"])]
    snap = build_snapshot([ClusterSpec(name="c")], nodes, pools, MODELS)
    row = snap.row_of("fast-1", "fast")
    snap.take(row, tuple(range(4 - fast_free)), 1.0, 0, 0)  # the rest of the fast node is busy
    return snap


def _running(task_id: str, tenant: str, device: int, hours_left: float, *, checkpoint: bool = True, **fields):
    doc = {
        "name": task_id,
        "tenant": tenant,
        "type": "training",
        "per_worker": {"devices": {"class": "gpu", "count": 1}},
        "relative_performance": {SLOW: 1.0, FAST: 2.0},
        **fields,
    }
    if checkpoint:
        doc["checkpoint"] = {"grace": "60s"}
    spec = TaskSpec.model_validate(doc)
    allocation = Allocation("slow-1", "slow", (device,), 1.0, 0, 0)
    started = NOW - timedelta(hours=1)
    task = RunningTask(task_id, tenant, 1, TaskType.TRAINING, (allocation,), started, NOW + timedelta(hours=hours_left))
    return task, spec


def test_the_idle_fast_devices_go_round_robin_across_tenants_largest_gain_first() -> None:
    running = [_running("a1", "org/a", 0, 5), _running("a2", "org/a", 1, 9), _running("a3", "org/a", 2, 7), _running("b1", "org/b", 3, 2)]
    moves = plan_moves(_snapshot(fast_free=2), running, RULE, NOW)
    # Two idle H100s: tenant a's largest gain (a2) and tenant b's only one — not a's two best.
    assert sorted(m.task_id for m in moves) == ["a2", "b1"]
    a2 = next(m for m in moves if m.task_id == "a2")
    assert (a2.from_model, a2.to_model) == (SLOW, FAST)
    assert a2.remaining_after_s == 9 * 3600 / 2 + 60 + 60  # half the time on a device twice as fast, plus overhead and grace
    assert "min sooner than on nvidia-a100-80g" in a2.reason()


def test_nothing_moves_that_cannot_resume_or_would_gain_too_little() -> None:
    running = [_running("plain", "org/a", 0, 5, checkpoint=False), _running("nearly", "org/a", 1, 0.03)]
    assert plan_moves(_snapshot(), running, RULE, NOW) == []  # 108 s left: 54 s + 120 s overhead on the fast one


def test_devices_a_queued_task_waits_for_or_a_reservation_holds_are_left_alone() -> None:
    running = [_running("a1", "org/a", 0, 5)]
    assert plan_moves(_snapshot(), running, RULE, NOW, awaited_models=frozenset({FAST})) == []
    assert plan_moves(_snapshot(), running, RULE, NOW, reserved_nodes=frozenset({"fast-1"})) == []
    assert [m.task_id for m in plan_moves(_snapshot(), running, RULE, NOW)] == ["a1"]


def test_a_task_moves_only_where_it_may_run_and_only_to_a_faster_model() -> None:
    pinned = _running("pinned", "org/a", 0, 5, any_of=["slow"])  # its candidates name the slow pool only
    slower = _running("slower", "org/a", 1, 5, relative_performance={SLOW: 1.0, FAST: 0.5})
    gang = _running("gang", "org/a", 2, 5, workers=3)  # three workers, two idle fast devices
    assert plan_moves(_snapshot(fast_free=2), [pinned, slower, gang], RULE, NOW) == []


def test_without_an_estimate_the_time_run_so_far_is_the_remaining_guess() -> None:
    task, spec = _running("a1", "org/a", 0, 5)
    unknown = RunningTask(task.id, task.tenant, 1, TaskType.TRAINING, task.allocations, task.started_at, None)
    [move] = plan_moves(_snapshot(), [(unknown, spec)], RULE, NOW)
    assert move.remaining_s == 3600  # it has run an hour
