"""policy.preempt_exempt_time (Slurm's PreemptExemptTime): work that has run less than it
is evicted by nothing — priority, quota reclaim or the backfill bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.explain import Reason
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _cycle(started_min_ago: float, exempt: str):
    low = running_task("low", [alloc("g0", "h100", range(8))], priority="low", started_at=T0 - timedelta(minutes=started_min_ago))
    snap = snapshot_with_running([node("g0", "nvidia-h100", 8, stack=CUDA_STACK)], [pool("h100", "nvidia-h100", ["g0"])], [low])
    high = QueuedTask("high", task("high", priority="high", devices={"class": "gpu", "count": 8}), T0)
    policy = SchedulingPolicySpec(preempt_exempt_time=exempt)
    return run_cycle(snap, [high], CHECK, T0, running=[low], policy=policy).decisions[0]


def test_work_younger_than_the_exempt_time_is_not_preempted() -> None:
    young = _cycle(started_min_ago=5, exempt="10m")
    assert young.victims == [] and not young.admit
    assert young.explanation.reason is Reason.HOLDS_RESERVATION  # it waits for the node, holding it


def test_work_older_than_the_exempt_time_is_preempted_as_before() -> None:
    assert _cycle(started_min_ago=11, exempt="10m").victims == ["low"]
    assert _cycle(started_min_ago=0, exempt="0s").victims == ["low"]  # the default: no exemption


def test_the_exempt_time_is_validated() -> None:
    with pytest.raises(ValidationError, match="preempt_exempt_time"):
        SchedulingPolicySpec(preempt_exempt_time="-5m")
