"""Parked heads that read the same (`Parked.key`: same queue, shape, tenant, estimate and
parking) are asked once per cycle whether they stay parked, not once each: on a busy
estate hundreds of such heads come up every cycle (cycle_parked.still_parked)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling import cycle_parked
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _estate():
    running = [running_task("busy", [alloc("g0", "h100", range(8))], priority="critical", preemptible=False)]
    nodes = [node("g0", "nvidia-h100", 8, stack=CUDA_STACK), node("g1", "nvidia-h100", 8, stack=CUDA_STACK)]
    return snapshot_with_running(nodes, [pool("h100", "nvidia-h100", ["g0", "g1"])], running), running


def _heads(n: int, tenant: str = "org/a") -> list[QueuedTask]:
    return [QueuedTask(f"w{i}", task(f"w{i}", devices={"class": "gpu", "count": 8}, tenant=tenant), T0 + timedelta(minutes=i)) for i in range(n)]


def _asked(monkeypatch) -> list[str]:
    asked: list[str] = []
    real = cycle_parked._stays_parked

    def counting(cx, st, q, item):
        asked.append(item.id)
        return real(cx, st, q, item)

    monkeypatch.setattr(cycle_parked, "_stays_parked", counting)
    return asked


@pytest.mark.parametrize("tenants", [1, 3])
def test_a_group_of_parked_heads_is_asked_once_a_cycle(monkeypatch, tenants: int) -> None:
    snap, running = _estate()
    heads = [h for t in range(tenants) for h in _heads(40 // tenants, tenant=f"org/t{t}")]
    heads = [QueuedTask(f"{h.id}-{i}", h.spec, h.queued_at) for i, h in enumerate(heads)]
    policy = SchedulingPolicySpec(park_waiting=True)
    now = T0 + timedelta(hours=1)
    first = run_cycle(snap, heads, CHECK, now, policy=policy, running=running, estimate=False)
    admitted = [d.task_id for d in first.decisions if d.admit]
    assert len(admitted) == 1  # g1 taken by the first head; the rest wait for g0
    queue = [h for h in heads if h.id not in admitted]
    asked = _asked(monkeypatch)
    second = run_cycle(snap, queue, CHECK, now + timedelta(seconds=5), policy=policy, running=running, estimate=False)
    # Nothing grew: every parked head stays passed over, its old explanation kept...
    parked = len(queue) - len(second.decisions)
    assert second.parked == parked and parked >= len(queue) - 2
    # ... and the question was asked about once per tenant (the tenant is part of the
    # shape; the first head after the reservation holder is let go and decided), not 37 times.
    assert len(asked) <= tenants + 1 < parked
