"""run_cycle with queues, policies, fair share, backfill reservations, preemption,
waiting for preferred devices and start-time estimates — with the real device catalog
and compatibility KB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hetpool.core.policy import ClassRule, QueueSpec, SchedulingPolicySpec
from hetpool.scheduling import backfill
from hetpool.scheduling.backfill import earliest_fit
from hetpool.scheduling.cycle import CycleResult, Decision, QueuedTask, run_cycle
from hetpool.scheduling.filters import REASON_DEVICES, REASON_QUEUE_POOLS, REASON_UNHEALTHY
from hetpool.scheduling.running import RunningTask
from tests.scheduling.factories import (
    CUDA_STACK,
    alloc,
    catalog_models,
    compat_check,
    node,
    pool,
    running_task,
    snapshot_with_running,
    task,
)

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "nvidia-h100"
A100 = "nvidia-a100-80g"
T4 = "nvidia-t4"
NOW_FAIR = T0 + timedelta(minutes=30)  # too little waiting for aging to change a rank


def _q(task_id: str, minutes: float = 0, **fields) -> QueuedTask:
    return QueuedTask(id=task_id, spec=task(task_id, **fields), queued_at=T0 + timedelta(minutes=minutes))


def _gpus(count: int = 8, **extra) -> dict:
    return {"class": "gpu", "count": count, **extra}


def _queue(name: str, **fields) -> QueueSpec:
    return QueueSpec.model_validate({"kind": "Queue", "name": name, **fields})


def _h100_nodes(names: list[str], running: list[RunningTask] = (), pool_name: str = "h100", **kw):
    nodes = [node(n, H100, 8, stack=CUDA_STACK) for n in names]
    return snapshot_with_running(nodes, [pool(pool_name, H100, names)], running, **kw)


def _by_id(result: CycleResult) -> dict[str, Decision]:
    return {d.task_id: d for d in result.decisions}


def _nodes_of(decision: Decision) -> set[str]:
    return {p.node for p in decision.assignment.placements}


# ------------------------------------------------------------------ fair share between tenants


def _busy_tenant_estate() -> tuple:
    """g0 idle; g1 fully held by org/busy; g2 has 2 devices held by org/idle.
    Only one more 8-device task fits (on g0)."""
    running = [
        running_task("busy-run", [alloc("g1", "h100", range(8))], tenant="org/busy"),
        running_task("idle-run", [alloc("g2", "h100", range(2))], tenant="org/idle"),
    ]
    return _h100_nodes(["g0", "g1", "g2"], running), running


def test_less_loaded_tenant_goes_first_at_equal_priority() -> None:
    snap, running = _busy_tenant_estate()
    queue = [_q("busy-task", 0, tenant="org/busy", devices=_gpus()), _q("idle-task", 10, tenant="org/idle", devices=_gpus())]
    decisions = _by_id(run_cycle(snap, queue, CHECK, NOW_FAIR, running=running))
    assert decisions["idle-task"].admit
    assert not decisions["busy-task"].admit


def test_without_running_usage_age_decides() -> None:
    # Control for the test above: the same queue on an estate without running usage.
    snap = _h100_nodes(["g0"])
    queue = [_q("busy-task", 0, tenant="org/busy", devices=_gpus()), _q("idle-task", 10, tenant="org/idle", devices=_gpus())]
    decisions = _by_id(run_cycle(snap, queue, CHECK, NOW_FAIR))
    assert decisions["busy-task"].admit
    assert not decisions["idle-task"].admit


def test_tenant_weight_changes_who_goes_first() -> None:
    snap, running = _busy_tenant_estate()
    queue = [_q("busy-task", 0, tenant="org/busy", devices=_gpus()), _q("idle-task", 10, tenant="org/idle", devices=_gpus())]
    result = run_cycle(snap, queue, CHECK, NOW_FAIR, running=running, tenant_weights={"org/busy": 10.0})
    decisions = _by_id(result)
    assert decisions["busy-task"].admit
    assert not decisions["idle-task"].admit


def test_tenant_weight_applies_through_the_parent_path() -> None:
    snap, running = _busy_tenant_estate()
    queue = [
        _q("busy-task", 0, tenant="org/busy/proj", devices=_gpus()),
        _q("idle-task", 10, tenant="org/idle", devices=_gpus()),
    ]
    running = [
        running_task("busy-run", running[0].allocations, tenant="org/busy/proj"),
        running[1],
    ]
    # The weight sits on the team; the project inherits it.
    decisions = _by_id(run_cycle(snap, queue, CHECK, NOW_FAIR, running=running, tenant_weights={"org/busy": 10.0}))
    assert decisions["busy-task"].admit
    assert not decisions["idle-task"].admit


def test_shares_are_updated_within_one_cycle() -> None:
    snap = _h100_nodes(["g0", "g1"])
    queue = [
        _q("a1", 0, tenant="org/a", devices=_gpus(2)),
        _q("a2", 1, tenant="org/a", devices=_gpus(2)),
        _q("a3", 2, tenant="org/a", devices=_gpus(2)),
        _q("b1", 3, tenant="org/b", devices=_gpus(2)),
        _q("b2", 4, tenant="org/b", devices=_gpus(2)),
    ]
    result = run_cycle(snap, queue, CHECK, T0 + timedelta(hours=1))
    # Without updates inside the cycle this would be a1, a2, a3, b1, b2.
    assert [d.task_id for d in result.decisions] == ["a1", "b1", "a2", "b2", "a3"]
    assert all(d.admit for d in result.decisions)


def test_shares_inside_the_cycle_decide_the_last_slot() -> None:
    # 8 devices; A has two 4-device tasks (older), B one (newer). A's second must lose to B.
    snap = _h100_nodes(["g0"])
    queue = [
        _q("a1", 0, tenant="org/a", devices=_gpus(4)),
        _q("a2", 1, tenant="org/a", devices=_gpus(4)),
        _q("b1", 2, tenant="org/b", devices=_gpus(4)),
    ]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0 + timedelta(hours=1)))
    assert decisions["a1"].admit and decisions["b1"].admit
    assert not decisions["a2"].admit


# ------------------------------------------------------------------ aging


def _aging_queue() -> list[QueuedTask]:
    return [_q("old-low", 0, priority="low", devices=_gpus()), _q("new-normal", 4 * 60, devices=_gpus())]


def test_aged_low_task_beats_a_newer_normal_task() -> None:
    now = T0 + timedelta(hours=4)  # old-low waited 4h: rank 0 + 4 * 0.5 = 2 > normal (1)
    decisions = _by_id(run_cycle(_h100_nodes(["g0"]), _aging_queue(), CHECK, now, policy=SchedulingPolicySpec(aging_per_hour=0.5)))
    assert decisions["old-low"].admit
    assert not decisions["new-normal"].admit


def test_without_aging_priority_wins() -> None:
    now = T0 + timedelta(hours=4)
    decisions = _by_id(run_cycle(_h100_nodes(["g0"]), _aging_queue(), CHECK, now, policy=SchedulingPolicySpec(aging_per_hour=0)))
    assert decisions["new-normal"].admit
    assert not decisions["old-low"].admit


def test_aging_below_one_step_does_not_reorder() -> None:
    now = T0 + timedelta(hours=1)  # 1h * 0.5 = 0.5: still rank 0
    queue = [_q("old-low", 0, priority="low", devices=_gpus()), _q("new-normal", 60, devices=_gpus())]
    decisions = _by_id(run_cycle(_h100_nodes(["g0"]), queue, CHECK, now, policy=SchedulingPolicySpec(aging_per_hour=0.5)))
    assert decisions["new-normal"].admit
    assert not decisions["old-low"].admit


# ------------------------------------------------------------------ fifo vs priority-fairshare queues


def _fifo_estate():
    """h100: g0 idle, g1 half used (a 2x8 gang fits only when idle); a100: a0 idle."""
    running = [running_task("r", [alloc("g1", "h100", range(4))], expected_end=T0 + timedelta(hours=5))]
    nodes = [node("g0", H100, 8, stack=CUDA_STACK), node("g1", H100, 8, stack=CUDA_STACK), node("a0", A100, 8, stack=CUDA_STACK)]
    pools = [pool("h100", H100, ["g0", "g1"]), pool("a100", A100, ["a0"])]
    return snapshot_with_running(nodes, pools, running), running


def _fifo_queue(queue_name: str) -> list[QueuedTask]:
    return [
        _q("head", 0, queue=queue_name, workers=2, devices=_gpus(8, models=[H100])),
        _q("small", 5, queue=queue_name, devices=_gpus(1, models=[A100])),
    ]


def test_fifo_head_that_does_not_fit_blocks_its_queue() -> None:
    snap, running = _fifo_estate()
    queues = [_queue("strict", ordering="fifo")]
    result = run_cycle(snap, _fifo_queue("strict"), CHECK, T0, running=running, queues=queues)
    decisions = _by_id(result)
    assert not decisions["head"].admit
    assert decisions["head"].explanation.to_dict()["fits_when_idle"] is True
    small = decisions["small"]
    assert not small.admit
    assert small.queue == "strict"
    assert small.explanation.to_dict()["summary"] == "waiting behind the head of fifo queue strict"


def test_priority_fairshare_queue_lets_smaller_tasks_through() -> None:
    snap, running = _fifo_estate()
    queues = [_queue("shared", ordering="priority-fairshare")]
    decisions = _by_id(run_cycle(snap, _fifo_queue("shared"), CHECK, T0, running=running, queues=queues))
    assert not decisions["head"].admit
    assert decisions["small"].admit
    assert _nodes_of(decisions["small"]) == {"a0"}


def test_fifo_block_does_not_stop_other_queues() -> None:
    snap, running = _fifo_estate()
    queues = [_queue("strict", ordering="fifo", order=1), _queue("other", order=2)]
    queue = [*_fifo_queue("strict"), _q("elsewhere", 10, queue="other", devices=_gpus(1, models=[A100]))]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running, queues=queues))
    assert decisions["elsewhere"].admit
    assert decisions["elsewhere"].queue == "other"
    assert not decisions["small"].admit


def test_fifo_keeps_arrival_order_over_priority() -> None:
    snap = _h100_nodes(["g0"])
    queues = [_queue("strict", ordering="fifo")]
    queue = [_q("first", 0, queue="strict", devices=_gpus(8)), _q("urgent", 5, queue="strict", priority="high", devices=_gpus(8))]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, queues=queues))
    assert decisions["first"].admit
    assert not decisions["urgent"].admit


def test_fifo_head_that_can_never_fit_does_not_block() -> None:
    snap = _h100_nodes(["g0"])
    queues = [_queue("strict", ordering="fifo")]
    queue = [
        _q("impossible", 0, queue="strict", workers=4, devices=_gpus(8)),  # 4 nodes needed, 1 exists
        _q("small", 5, queue="strict", devices=_gpus(1)),
    ]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, queues=queues))
    assert not decisions["impossible"].admit
    assert decisions["impossible"].explanation.to_dict()["fits_when_idle"] is False
    assert decisions["small"].admit


def test_fifo_queue_head_keeps_its_priority_across_queues() -> None:
    snap = _h100_nodes(["g0"])
    queues = [_queue("strict", ordering="fifo", order=1), _queue("other", order=2)]
    queue = [
        _q("critical", 0, queue="strict", priority="critical", devices=_gpus(8)),
        _q("normal", -10, queue="other", devices=_gpus(8)),
    ]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, queues=queues, policy=SchedulingPolicySpec(aging_per_hour=0)))
    assert decisions["critical"].admit
    assert not decisions["normal"].admit


# ------------------------------------------------------------------ queue pools


def _two_pool_estate(h100_used: int = 8):
    running = [running_task("r", [alloc("g0", "h100", range(h100_used))])] if h100_used else []
    nodes = [node("g0", H100, 8, stack=CUDA_STACK), node("a0", A100, 8, stack=CUDA_STACK), node("a1", A100, 8, stack=CUDA_STACK)]
    pools = [pool("h100", H100, ["g0"]), pool("a100", A100, ["a0", "a1"])]
    return snapshot_with_running(nodes, pools, running), running


@pytest.mark.parametrize("allowed", ["h100", H100])  # a pool name or a device model name
def test_queue_pools_keep_tasks_off_other_pools(allowed: str) -> None:
    snap, running = _two_pool_estate(h100_used=8)
    queues = [_queue("restricted", pools=[allowed])]
    queue = [_q("t", 0, queue="restricted", devices=_gpus(1))]
    decision = run_cycle(snap, queue, CHECK, T0, running=running, queues=queues).decisions[0]
    assert not decision.admit
    assert decision.assignment.placements == []
    assert decision.assignment.reasons[REASON_QUEUE_POOLS] == 2  # the two a100 nodes
    assert "pool not available to the task's queue" in decision.explanation.to_dict()["summary"]


def test_queue_pools_place_on_the_allowed_pool() -> None:
    snap, running = _two_pool_estate(h100_used=4)
    queues = [_queue("restricted", pools=["h100"])]
    queue = [_q(f"t{i}", i, queue="restricted", devices=_gpus(1)) for i in range(6)]
    result = run_cycle(snap, queue, CHECK, T0, running=running, queues=queues)
    admitted = result.admitted
    assert len(admitted) == 4  # only the 4 free h100s, although 16 a100s are idle
    assert {p.pool for d in admitted for p in d.assignment.placements} == {"h100"}


def test_unrestricted_queue_uses_any_pool() -> None:
    snap, running = _two_pool_estate(h100_used=8)
    decision = run_cycle(snap, [_q("t", 0, devices=_gpus(1))], CHECK, T0, running=running).decisions[0]
    assert decision.admit
    assert decision.assignment.placements[0].pool == "a100"


# ------------------------------------------------------------------ backfill and reservations


def _backfill_estate(extra_a100: bool = True):
    """g0, g1 (h100) half used until +2h / +3h; optionally a0 (a100, idle)."""
    running = [
        running_task("r0", [alloc("g0", "h100", range(4))], tenant="org/other", expected_end=T0 + timedelta(hours=2)),
        running_task("r1", [alloc("g1", "h100", range(4))], tenant="org/other", expected_end=T0 + timedelta(hours=3)),
    ]
    nodes = [node("g0", H100, 8, stack=CUDA_STACK), node("g1", H100, 8, stack=CUDA_STACK)]
    pools = [pool("h100", H100, ["g0", "g1"])]
    if extra_a100:
        nodes.append(node("a0", A100, 8, stack=CUDA_STACK))
        pools.append(pool("a100", A100, ["a0"]))
    return snapshot_with_running(nodes, pools, running), running


def _gang() -> QueuedTask:
    return _q("gang", 0, workers=2, devices=_gpus(8, models=[H100]))


def test_blocked_gang_gets_a_reservation() -> None:
    snap, running = _backfill_estate()
    result = run_cycle(snap, [_gang()], CHECK, T0, running=running)
    decision = result.decisions[0]
    assert not decision.admit
    assert decision.explanation.to_dict()["fits_when_idle"] is True
    assert len(result.reservations) == 1
    held = result.reservations[0]
    assert held.task_id == "gang"
    assert held.nodes == frozenset({"g0", "g1"})
    assert held.start_at == T0 + timedelta(hours=3)  # both running tasks must end
    assert decision.explanation.to_dict()["reservation"] == {"nodes": ["g0", "g1"], "start_at": (T0 + timedelta(hours=3)).isoformat()}


def test_small_task_without_estimate_stays_off_reserved_nodes() -> None:
    snap, running = _backfill_estate()
    queue = [_gang(), _q("small", 5, devices=_gpus(1))]  # any GPU
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    assert decisions["small"].admit
    assert _nodes_of(decisions["small"]) == {"a0"}


def test_small_task_without_estimate_waits_when_only_reserved_nodes_fit() -> None:
    snap, running = _backfill_estate()
    queue = [_gang(), _q("small", 5, devices=_gpus(1, models=[H100]))]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    assert not decisions["small"].admit
    # Without the gang the same task starts at once on the free h100s.
    alone = run_cycle(snap, [_q("small", 5, devices=_gpus(1, models=[H100]))], CHECK, T0, running=running)
    assert alone.decisions[0].admit


def test_small_task_ending_before_the_reservation_may_backfill() -> None:
    snap, running = _backfill_estate(extra_a100=False)
    # 1h on the reference device; ~22 minutes on an h100: ends long before +3h.
    queue = [_gang(), _q("short", 5, devices=_gpus(1, models=[H100]), runtime_estimate="1h")]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    assert decisions["short"].admit
    assert _nodes_of(decisions["short"]) <= {"g0", "g1"}


def test_small_task_ending_after_the_reservation_may_not_backfill() -> None:
    snap, running = _backfill_estate(extra_a100=False)
    # 10h on the reference device: ~3.7h on an h100, past the reserved start at +3h.
    queue = [_gang(), _q("long", 5, devices=_gpus(1, models=[H100]), runtime_estimate="10h")]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    assert not decisions["long"].admit


def test_reservation_holds_against_tasks_of_other_queues() -> None:
    snap, running = _backfill_estate(extra_a100=False)
    queues = [_queue("big", order=1), _queue("small", order=2)]
    queue = [
        _q("gang", 0, queue="big", workers=2, devices=_gpus(8, models=[H100])),
        _q("small", 5, queue="small", priority="low", devices=_gpus(1, models=[H100])),
    ]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running, queues=queues))
    assert "reservation" in decisions["gang"].explanation.facts
    assert not decisions["small"].admit


def test_backfill_judges_runtime_on_the_slowest_candidate_model() -> None:
    snap, running = _backfill_estate(extra_a100=False)
    queue = [_gang(), _q("any-gpu", 5, devices=_gpus(1), runtime_estimate="3h30m")]
    # Only h100s known to the cycle: 3.5h / 2.71 ≈ 1.3h, before the reserved start (+3h).
    assert _by_id(run_cycle(snap, queue, CHECK, T0, running=running))["any-gpu"].admit
    # With the whole catalog known, an any-GPU task is judged on the slowest GPU: too long.
    decision = _by_id(run_cycle(snap, queue, CHECK, T0, running=running, models=catalog_models()))["any-gpu"]
    assert not decision.admit


def test_reservation_without_known_ends_admits_no_backfill() -> None:
    running = [
        running_task("r0", [alloc("g0", "h100", range(4))], tenant="org/other"),
        running_task("r1", [alloc("g1", "h100", range(4))], tenant="org/other"),
    ]
    snap = _h100_nodes(["g0", "g1"], running)
    queue = [_gang(), _q("short", 5, devices=_gpus(1, models=[H100]), runtime_estimate="1m")]
    result = run_cycle(snap, queue, CHECK, T0, running=running)
    assert result.reservations[0].start_at is None
    assert _by_id(result)["gang"].explanation.to_dict()["reservation"]["start_at"] is None
    assert not _by_id(result)["short"].admit


# ------------------------------------------------------------------ preemption


def _one_node(running: list[RunningTask]):
    return _h100_nodes(["g0"], running)


def _high(task_id: str = "urgent", minutes: float = 0) -> QueuedTask:
    return _q(task_id, minutes, priority="high", devices=_gpus(8))


def test_high_priority_preempts_lower_priority_running_task() -> None:
    running = [running_task("victim", [alloc("g0", "h100", range(8))], priority="low")]
    decision = run_cycle(_one_node(running), [_high()], CHECK, T0, running=running).decisions[0]
    assert decision.victims == ["victim"]
    assert decision.admit is False
    assert decision.explanation.to_dict()["summary"].startswith("preempting")
    assert decision.explanation.to_dict()["preempting"] == ["victim"]
    assert decision.preemption_reason.startswith("preempted by urgent (priority high)")


def test_preemption_picks_only_the_needed_victim() -> None:
    running = [
        running_task("low-a", [alloc("g0", "h100", range(4))], priority="low"),
        running_task("low-b", [alloc("g0", "h100", range(4, 8))], priority="low"),
        running_task("other-node", [alloc("g1", "h100", range(8))], priority="low"),
    ]
    snap = _h100_nodes(["g0", "g1"], running)
    queue = [_q("urgent", 0, priority="high", devices=_gpus(4))]
    decision = run_cycle(snap, queue, CHECK, T0, running=running).decisions[0]
    assert len(decision.victims) == 1


def test_one_victim_is_not_claimed_twice_in_a_cycle() -> None:
    running = [running_task("victim", [alloc("g0", "h100", range(8))], priority="low")]
    decisions = _by_id(run_cycle(_one_node(running), [_high("u1", 0), _high("u2", 1)], CHECK, T0, running=running))
    assert decisions["u1"].victims == ["victim"]
    assert decisions["u2"].victims == []
    assert not decisions["u2"].admit


def test_class_policy_can_disable_preemption() -> None:
    running = [running_task("victim", [alloc("g0", "h100", range(8))], priority="low")]
    policy = SchedulingPolicySpec(classes={"gpu": ClassRule(preemption=False)})
    decision = run_cycle(_one_node(running), [_high()], CHECK, T0, running=running, policy=policy).decisions[0]
    assert decision.victims == []
    assert not decision.admit
    assert not decision.explanation.to_dict()["summary"].startswith("preempting")


def test_preemption_disabled_for_another_class_still_preempts_gpus() -> None:
    running = [running_task("victim", [alloc("g0", "h100", range(8))], priority="low")]
    policy = SchedulingPolicySpec(classes={"npu": ClassRule(preemption=False)})
    decision = run_cycle(_one_node(running), [_high()], CHECK, T0, running=running, policy=policy).decisions[0]
    assert decision.victims == ["victim"]


def test_non_preemptible_running_task_is_never_a_victim() -> None:
    running = [running_task("pinned", [alloc("g0", "h100", range(8))], priority="low", preemptible=False)]
    queue = [_q("urgent", 0, priority="critical", devices=_gpus(8))]
    decision = run_cycle(_one_node(running), queue, CHECK, T0, running=running).decisions[0]
    assert decision.victims == []
    assert not decision.admit


def test_equal_priority_never_preempts() -> None:
    running = [running_task("peer", [alloc("g0", "h100", range(8))], priority="high")]
    decision = run_cycle(_one_node(running), [_high()], CHECK, T0, running=running).decisions[0]
    assert decision.victims == []
    assert not decision.admit


def test_aged_task_does_not_preempt_by_its_aged_rank() -> None:
    # Aging reorders the queue but preemption uses the task's own priority class.
    running = [running_task("peer", [alloc("g0", "h100", range(8))], priority="normal")]
    queue = [_q("old-low", 0, priority="low", devices=_gpus(8))]
    decision = run_cycle(_one_node(running), queue, CHECK, T0 + timedelta(hours=100), running=running).decisions[0]
    assert decision.victims == []


def test_preemption_respects_the_queue_pools() -> None:
    running = [
        running_task("on-h100", [alloc("g0", "h100", range(8))], priority="low", started_at=T0),
        running_task("on-a100", [alloc("a0", "a100", range(8))], priority="low", started_at=T0 + timedelta(minutes=30)),
    ]
    nodes = [node("g0", H100, 8, stack=CUDA_STACK), node("a0", A100, 8, stack=CUDA_STACK)]
    snap = snapshot_with_running(nodes, [pool("h100", H100, ["g0"]), pool("a100", A100, ["a0"])], running)
    queues = [_queue("restricted", pools=["h100"])]
    queue = [_q("urgent", 0, queue="restricted", priority="high", devices=_gpus(8))]
    decision = run_cycle(snap, queue, CHECK, T0 + timedelta(hours=1), running=running, queues=queues).decisions[0]
    # Only evicting the h100 task helps a task that may only use h100.
    assert decision.victims == ["on-h100"]


# ------------------------------------------------------------------ wait for preferred vs substitute


def _fast_slow_estate(fast_ends_in: timedelta):
    running = [running_task("fast-busy", [alloc("g0", "h100", range(8))], priority="high", expected_end=T0 + fast_ends_in)]
    nodes = [node("g0", H100, 8, stack=CUDA_STACK), node("t0", T4, 8, stack=CUDA_STACK)]
    return snapshot_with_running(nodes, [pool("h100", H100, ["g0"]), pool("t4", T4, ["t0"])], running), running


def _ordered(runtime: str | None = "10h") -> QueuedTask:
    fields = {"runtime_estimate": runtime} if runtime else {}
    return _q("job", 0, devices=_gpus(8), fallback=[H100, T4], **fields)


def test_waits_for_the_preferred_device_when_that_finishes_earlier() -> None:
    snap, running = _fast_slow_estate(timedelta(minutes=10))
    decision = run_cycle(snap, [_ordered()], CHECK, T0, running=running).decisions[0]
    assert decision.admit is False
    assert decision.explanation.to_dict()["summary"].startswith("waiting for preferred")
    assert H100 in decision.explanation.to_dict()["summary"]
    assert decision.explanation.to_dict()["substitute_rejected"]["model"] == T4
    assert decision.victims == []


def test_takes_the_substitute_when_the_preferred_device_is_busy_for_long() -> None:
    snap, running = _fast_slow_estate(timedelta(hours=100))
    decision = run_cycle(snap, [_ordered()], CHECK, T0, running=running).decisions[0]
    assert decision.admit is True
    assert decision.assignment.fallback_used is True
    assert {p.model for p in decision.assignment.placements} == {T4}


def test_wait_for_preferred_can_be_switched_off() -> None:
    snap, running = _fast_slow_estate(timedelta(minutes=10))
    policy = SchedulingPolicySpec(wait_for_preferred=False)
    decision = run_cycle(snap, [_ordered()], CHECK, T0, running=running, policy=policy).decisions[0]
    assert decision.admit is True
    assert decision.assignment.fallback_used is True


def test_without_a_runtime_estimate_the_substitute_is_taken() -> None:
    snap, running = _fast_slow_estate(timedelta(minutes=10))
    decision = run_cycle(snap, [_ordered(runtime=None)], CHECK, T0, running=running).decisions[0]
    assert decision.admit is True
    assert decision.assignment.fallback_used is True


def test_waiting_for_preferred_leaves_the_substitute_to_others() -> None:
    snap, running = _fast_slow_estate(timedelta(minutes=10))
    queue = [_ordered(), _q("t4-user", 5, devices=_gpus(8, models=[T4]))]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    assert not decisions["job"].admit
    assert decisions["t4-user"].admit


# ------------------------------------------------------------------ estimates and explanations


def _estimate_estate():
    running = [running_task("r", [alloc("g0", "h100", range(8))], expected_end=T0 + timedelta(hours=1), preemptible=False)]
    return _h100_nodes(["g0"], running), running


def test_waiting_decisions_get_position_and_estimated_start() -> None:
    snap, running = _estimate_estate()
    queue = [_q("first", 0, devices=_gpus(8), runtime_estimate="2h"), _q("second", 5, devices=_gpus(4, models=[H100]))]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    first, second = decisions["first"].explanation.to_dict(), decisions["second"].explanation.to_dict()
    assert (first["position"], second["position"]) == (1, 2)
    assert first["estimated_start"] == (T0 + timedelta(hours=1)).isoformat()
    assert first["estimated_wait_s"] == pytest.approx(3600)
    # "second" starts when "first" ends: 2h on the reference device, 2h / 2.71 on an h100.
    second_start = datetime.fromisoformat(second["estimated_start"])
    assert second_start == T0 + timedelta(hours=1) + timedelta(seconds=2 * 3600 / 2.71)


def test_position_follows_hand_out_order_not_list_order() -> None:
    snap, running = _estimate_estate()
    queue = [_q("normal", 0, devices=_gpus(8)), _q("high", 30, priority="high", devices=_gpus(8))]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    assert decisions["high"].explanation.to_dict()["position"] == 1
    assert decisions["normal"].explanation.to_dict()["position"] == 2
    assert decisions["high"].explanation.to_dict()["estimated_start"] == (T0 + timedelta(hours=1)).isoformat()


def test_tasks_of_one_shape_keep_their_own_positions() -> None:
    snap, running = _estimate_estate()
    queue = [_q(f"w{i}", i, devices=_gpus(8)) for i in range(4)]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    assert [decisions[f"w{i}"].explanation.to_dict()["position"] for i in range(4)] == [1, 2, 3, 4]


def test_estimates_account_for_tasks_admitted_in_the_same_cycle() -> None:
    snap = _h100_nodes(["g0"])
    queue = [_q("admitted", 0, devices=_gpus(8)), _q("waiting", 5, devices=_gpus(8))]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0))
    assert decisions["admitted"].admit
    waiting = decisions["waiting"].explanation.to_dict()
    assert not decisions["waiting"].admit
    # The admitted task has no runtime estimate, so the start cannot be known: not "now".
    assert waiting["estimated_start"] != T0.isoformat()


def test_estimates_can_be_switched_off() -> None:
    snap, running = _estimate_estate()
    decision = run_cycle(snap, [_q("w", 0, devices=_gpus(8))], CHECK, T0, running=running, estimate=False).decisions[0]
    assert "position" not in decision.explanation.facts
    assert "estimated_start" not in decision.explanation.facts


def test_unknown_end_gives_no_estimated_start() -> None:
    running = [running_task("r", [alloc("g0", "h100", range(8))], expected_end=None, preemptible=False)]
    snap = _h100_nodes(["g0"], running)
    decision = run_cycle(snap, [_q("w", 0, devices=_gpus(8))], CHECK, T0, running=running).decisions[0]
    assert decision.explanation.to_dict()["position"] == 1
    assert decision.explanation.to_dict()["estimated_start"] is None


def test_waiting_summary_counts_nodes_per_reason() -> None:
    running = [running_task(f"r{i}", [alloc(f"g{i}", "h100", range(8))], preemptible=False) for i in range(2)]
    snap = _h100_nodes(["g0", "g1", "g2"], running, unhealthy_nodes={"g2"})
    decision = run_cycle(snap, [_q("w", 0, devices=_gpus(8))], CHECK, T0, running=running).decisions[0]
    summary = decision.explanation.to_dict()["summary"]
    assert summary.startswith("waiting for capacity, holding a reservation on 1 node(s) from unknown — ")
    assert f"0/3 nodes available: 2 {REASON_DEVICES}, 1 {REASON_UNHEALTHY};" in summary
    assert decision.explanation.to_dict()["reasons"] == {REASON_DEVICES: 2, REASON_UNHEALTHY: 1}


def test_impossible_summary_says_so() -> None:
    snap = _h100_nodes(["g0"])
    decision = run_cycle(snap, [_q("w", 0, workers=3, devices=_gpus(8))], CHECK, T0).decisions[0]
    assert decision.explanation.to_dict()["summary"].startswith("cannot run anywhere, even on idle capacity — 0/1 nodes available: ")
    assert decision.explanation.to_dict()["fits_when_idle"] is False


def test_backfill_switched_off_for_a_class_keeps_everything_behind_its_blocked_head() -> None:
    from hetpool.core.policy import ClassRule, SchedulingPolicySpec

    snap, running = _backfill_estate()
    queue = [_gang(), _q("small", 5, devices=_gpus(1))]
    on = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    assert on["small"].admit  # default: backfills onto the unreserved a0
    off_policy = SchedulingPolicySpec(classes={"gpu": ClassRule(backfill=False)})
    off = _by_id(run_cycle(snap, queue, CHECK, T0, running=running, policy=off_policy))
    assert not off["small"].admit
    assert off["small"].explanation.to_dict()["summary"] == "waiting behind gang: backfill is off for gpu pools"


def test_a_preemptor_waits_for_victims_already_stopping_instead_of_evicting_more() -> None:
    from dataclasses import replace

    stopping = replace(running_task("stopping", [alloc("g0", "h100", range(8))], priority="low", preemptible=False), being_preempted=True)
    other = running_task("other", [alloc("g1", "h100", range(8))], priority="low")
    running = [stopping, other]
    snap = _h100_nodes(["g0", "g1"], running)
    decision = run_cycle(snap, [_high()], CHECK, T0, running=running).decisions[0]
    assert decision.victims == []  # "other" keeps running
    assert decision.explanation.reason == "waiting_for_release"
    assert decision.explanation.summary.startswith("waiting for 1 preempted task(s) to release their devices; no start within")


def test_victims_on_a_class_without_preemption_are_spared() -> None:
    from hetpool.core.inventory import DeviceClass

    # A CPU-only preemptor could free CPU by evicting GPU work on the same node; the GPU
    # class forbids preemption, so that work stays.
    running = [running_task("gpu-work", [alloc("g0", "h100", range(8), cpu=120)], priority="low")]
    snap = _h100_nodes(["g0"], running)
    queue = [_q("cpu-job", 0, priority="high", per_worker={"cpu": 64, "memory_gb": 8})]
    policy = SchedulingPolicySpec(classes={DeviceClass.GPU: ClassRule(preemption=False)})
    allowed = run_cycle(snap, queue, CHECK, T0, running=running).decisions[0]
    spared = run_cycle(snap, queue, CHECK, T0, running=running, policy=policy).decisions[0]
    assert allowed.victims == ["gpu-work"]
    assert spared.victims == []


def test_reserved_nodes_are_reported_as_held_not_excluded() -> None:
    snap, running = _backfill_estate()
    queue = [_gang(), _q("small", 5, devices=_gpus(1, models=[H100]))]
    decisions = _by_id(run_cycle(snap, queue, CHECK, T0, running=running))
    reasons = decisions["small"].explanation.to_dict()["reasons"]
    assert reasons.get("node held for a blocked queue head") == 2
    assert "node excluded by the task" not in reasons


def test_tasks_do_not_all_bank_on_the_same_preferred_device() -> None:
    # Speeds from the tasks' own hints: 10 h of work is 5 h on the H100 node (free in
    # 10 minutes) and ~8.3 h on the idle T4 node. The first job waits for the H100. The
    # second would get it only after the first job's 5 h: 10.2 h > 8.3 h, so it takes
    # the T4 — it does not bank on the same soon-free device.
    hints = {"relative_performance": {H100: 2.0, T4: 1.2}, "runtime_estimate": "10h"}
    snap, running = _fast_slow_estate(timedelta(minutes=10))
    first = _q("job", 0, devices=_gpus(8), fallback=[H100, T4], **hints)
    second = _q("job2", 1, devices=_gpus(8), fallback=[H100, T4], **hints)
    decisions = _by_id(run_cycle(snap, [first, second], CHECK, T0, running=running))
    assert decisions["job"].explanation.to_dict()["summary"].startswith("waiting for preferred")
    assert decisions["job2"].admit and {p.model for p in decisions["job2"].assignment.placements} == {T4}
    # Alone, the second job would have waited for the H100 too.
    alone = run_cycle(snap, [second], CHECK, T0, running=running).decisions[0]
    assert alone.explanation.to_dict()["summary"].startswith("waiting for preferred")


def _shared_preferred_estate():
    """H100 node g0 (also in a CPU pool): one device free, four ending in 10 minutes, three in
    5 hours; two idle A100 nodes."""
    running = [
        running_task("soon", [alloc("g0", "h100", range(1, 5))], priority="high", expected_end=T0 + timedelta(minutes=10)),
        running_task("late", [alloc("g0", "h100", range(5, 8))], priority="high", expected_end=T0 + timedelta(hours=5)),
    ]
    nodes = [node("g0", H100, 8, stack=CUDA_STACK), node("a0", A100, 8, stack=CUDA_STACK), node("a1", A100, 8, stack=CUDA_STACK)]
    pools = [pool("h100", H100, ["g0"]), pool("cpu", "cpu-x86-64", ["g0"]), pool("a100", A100, ["a0", "a1"])]
    return snapshot_with_running(nodes, pools, running), running


def test_a_wait_for_preferred_is_asked_once_per_shape_until_the_preferred_capacity_changes(monkeypatch) -> None:
    """prefer_waiting keeps when the preferred devices would hold a shape (the cycle's
    wait_fits memo) only while nothing was taken on the preferred pool's capacity: here the
    first five-device task waits for g0 (1 free + 4 ending in 10 minutes); a CPU task then
    takes most of g0's cores through the CPU pool (g0's H100 pool and its work are
    untouched), and the second five-device task must see that g0 can no longer host it —
    so it takes the A100s. A memo keyed without the capacity version (Snapshot.pool_changes,
    shared_changes) would make it wait for a start that cannot come."""
    snap, running = _shared_preferred_estate()
    five = {"devices": _gpus(5), "fallback": [H100, A100], "runtime_estimate": "2h", "per_worker": {"cpu": 16, "memory_gb": 64}}
    cores = _q("cores", -2, type="preprocessing", per_worker={"cpu": 120, "memory_gb": 64})
    queue = [_q("first", -3, **five), cores, _q("second", -1, **five)]
    by_id = {d.task_id: d for d in run_cycle(snap, queue, CHECK, T0, running=running).decisions}
    assert by_id["first"].explanation.reason.value == "waiting_for_preferred"
    assert by_id["cores"].admit and by_id["cores"].assignment.placements[0].pool == "cpu"
    assert by_id["second"].admit and {p.model for p in by_id["second"].assignment.placements} == {A100}
    # Without the CPU task in between, the second asks the memo (no search of its own) and waits as well.
    searches = []
    monkeypatch.setattr(backfill, "earliest_fit", lambda *a, **k: searches.append(1) or earliest_fit(*a, **k))
    by_id = {d.task_id: d for d in run_cycle(snap, [queue[0], queue[2]], CHECK, T0, running=running).decisions}
    assert [by_id[t].explanation.reason.value for t in ("first", "second")] == ["waiting_for_preferred"] * 2
    assert len(searches) == 1
