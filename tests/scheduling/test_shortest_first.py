"""A `shortest-first` queue: each tenant's own tasks smallest estimated work first
(runtime × devices), tasks without an estimate last; priority and fair share between
tenants still come first — run_cycle with the real catalog and compatibility KB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.estimate import with_progress
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running
from tests.scheduling.factories import task as make_task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "nvidia-h100"
NOW = T0 + timedelta(minutes=30)  # too little waiting for aging to change a rank


def _q(task_id: str, minutes: float, gpus: int = 8, estimate: str | None = None, **fields) -> QueuedTask:
    extra = {"runtime_estimate": estimate} if estimate else {}
    spec = make_task(task_id, devices={"class": "gpu", "count": gpus}, queue="line", **extra, **fields)
    return QueuedTask(id=task_id, spec=spec, queued_at=T0 + timedelta(minutes=minutes))


def _admitted(queue: list[QueuedTask], ordering: str, nodes: int = 1, running=(), now: datetime = NOW, **options) -> list[str]:
    names = [f"g{i}" for i in range(nodes)]
    snap = snapshot_with_running([node(n, H100, 8, stack=CUDA_STACK) for n in names], [pool("h100", H100, names)], list(running))
    queues = [QueueSpec(name="line", ordering=ordering)]
    result = run_cycle(snap, queue, CHECK, now, running=list(running), queues=queues, **options)
    return sorted(d.task_id for d in result.decisions if d.admit)


def test_the_shortest_estimate_goes_first_where_age_would_not() -> None:
    queue = [_q("long-oldest", 0, estimate="5h"), _q("unknown", 1), _q("short", 2, estimate="1h"), _q("middle", 3, estimate="2h")]
    assert _admitted(queue, "shortest-first") == ["short"]
    assert _admitted(queue, "priority-fairshare") == ["long-oldest"]


def test_work_is_runtime_times_devices() -> None:
    # 8 GPUs x 1 h = 8 device-hours is more work than 2 GPUs x 3 h = 6: the narrow task goes
    # first, and the wide one no longer fits on the node's 6 free GPUs.
    queue = [_q("wide-short", 0, gpus=8, estimate="1h"), _q("narrow-long", 0, gpus=2, estimate="3h")]
    assert _admitted(queue, "shortest-first", now=T0) == ["narrow-long"]


def test_tasks_without_an_estimate_come_last_in_age_order() -> None:
    queue = [_q("unknown-old", 0, gpus=4), _q("unknown-new", 1, gpus=4), _q("estimated", 2, gpus=4, estimate="9h")]
    assert _admitted(queue, "shortest-first") == ["estimated", "unknown-old"]


def test_a_long_wide_task_is_not_starved_by_a_backlog_of_short_ones() -> None:
    """Without aging (or once every waiter is critical) the size alone would keep a wide task
    last for ever. 8 GPUs x 2 h = 16 device-hours against 1-GPU 10-minute tasks that waited
    half an hour: its work counts 1/(1 + waited/2 h)^2, so it leads after about
    2 h x (sqrt(16 / (1/6 / (1 + 3)^2)) - 1) = 76 h, and not before."""
    no_aging = SchedulingPolicySpec(aging_per_hour=0)

    def line(hours: float) -> tuple[datetime, list[QueuedTask]]:
        fresh = [_q(f"short-{i}", hours * 60 - 30, gpus=1, estimate="10m") for i in range(3)]
        return T0 + timedelta(hours=hours), [_q("wide", 0, gpus=8, estimate="2h"), *fresh]

    now, queue = line(70)
    assert _admitted(queue, "shortest-first", now=now, policy=no_aging) == ["short-0", "short-1", "short-2"]
    now, queue = line(80)
    assert _admitted(queue, "shortest-first", now=now, policy=no_aging) == ["wide"]


def test_aging_lifts_a_long_waiter_above_fresh_short_tasks() -> None:
    now = T0 + timedelta(hours=6)  # 6 h x 0.5 ranks/h: critical
    queue = [_q("wide", 0, gpus=8, estimate="2h"), _q("short", 6 * 60 - 1, gpus=1, estimate="10m")]
    assert _admitted(queue, "shortest-first", now=now) == ["wide"]


def test_priority_still_comes_before_shortness() -> None:
    queue = [_q("short", 0, estimate="10m"), _q("urgent-long", 1, estimate="8h", priority="high")]
    assert _admitted(queue, "shortest-first") == ["urgent-long"]


def test_a_resumed_task_counts_only_the_work_left() -> None:
    # 10 h estimated, 9 h of it done before a checkpoint: 1 h left beats a fresh 2 h task.
    resumed = _q("resumed", 1, estimate="10h")
    resumed = QueuedTask(id=resumed.id, spec=with_progress(resumed.spec, 9 * 3600.0), queued_at=resumed.queued_at)
    assert _admitted([_q("fresh", 0, estimate="2h"), resumed], "shortest-first") == ["resumed"]


@pytest.mark.parametrize("ordering", ["shortest-first", "priority-fairshare"])
def test_short_estimates_never_overtake_another_tenant(ordering: str) -> None:
    """A tenant that states tiny estimates reorders only its own line: between tenants the
    lower fair share goes first, whatever the estimates."""
    running = [running_task("busy-run", [alloc("g1", "h100", range(8))], tenant="org/busy")]
    queue = [
        _q("busy-tiny", 0, estimate="1m", tenant="org/busy"),
        _q("busy-tiny-2", 0.5, estimate="1m", tenant="org/busy"),
        _q("idle-long", 1, estimate="20h", tenant="org/idle"),
    ]
    assert _admitted(queue, ordering, nodes=2, running=running) == ["idle-long"]


def test_the_queue_ordering_is_validated() -> None:
    with pytest.raises(ValueError, match="shortest-first"):
        QueueSpec(name="line", ordering="shortest")
