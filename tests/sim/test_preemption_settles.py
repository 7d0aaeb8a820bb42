"""On a full estate with three priorities, preemption settles: at a fixed moment, cycles
end in one that admits and evicts nothing, and no preemptor evicts twice.

The flat benchmark mix (bench/estate_mix.flat_workload: no quotas, one queue, priorities
low/normal/high) on 30 nodes, 300 tasks, every cycle at the same instant (nothing ends).
Before the preemptors' claims (scheduling/claims.py) and the hopeless-plan check
(cycle_preempt._hopeless) it evicted ~200 tasks in 80 cycles and never settled: work that
took the place a preemption had planned was evicted by the next preemptor, preemptors
turned their placement down to wait for their preferred model and evicted again later,
and the cycle's preemption tries went to heads no plan could help."""

from __future__ import annotations

import random
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from estate_mix import flat_workload, inventory  # noqa: E402
from scheduler_throughput import Estate  # noqa: E402

from hetpool.catalog.compat import CompatibilityKB  # noqa: E402
from hetpool.catalog.devices import DeviceCatalog  # noqa: E402
from hetpool.core.policy import SchedulingPolicySpec  # noqa: E402
from hetpool.scheduling.snapshot import build_snapshot  # noqa: E402


def _estate(policy: SchedulingPolicySpec) -> Estate:
    catalog, kb = DeviceCatalog.builtin(), CompatibilityKB.builtin()
    models = {m.name: m for m in catalog.all()}
    clusters, nodes, pools = inventory(30, 0.1)
    estate = Estate(build_snapshot(clusters, nodes, pools, models), models, kb, policy=policy)
    for item in flat_workload(300, random.Random(0), 0):
        estate.queue[item.id] = item
    return estate


def test_preemption_on_a_full_estate_settles_and_no_preemptor_evicts_twice() -> None:
    estate = _estate(SchedulingPolicySpec())
    now = datetime(2026, 1, 2, tzinfo=UTC)
    evictions_by: Counter = Counter()
    evicted = 0
    for _ in range(30):
        before = {task_id: r.priority_rank for task_id, r in estate.running.items()}
        result, out = estate.cycle(now)
        evicted += out
        for d in result.decisions:
            if d.victims:
                evictions_by[d.task_id] += 1
                rank = d.spec.priority.rank if d.spec else estate.queue[d.task_id].spec.priority.rank
                assert all(before[v] < rank for v in d.victims)  # only lower-priority work gives way
        if not result.admitted and not out and not result.carried:
            break
    else:
        raise AssertionError(f"still admitting or evicting after 30 cycles ({evicted} evictions)")
    assert evicted > 0  # preemption was exercised
    assert max(evictions_by.values()) == 1, [t for t, n in evictions_by.items() if n > 1]


def test_with_an_exempt_time_work_just_started_is_never_evicted() -> None:
    """policy.preempt_exempt_time: every cycle here is at the instant the work started, so
    nothing may be evicted, and the same drain settles without an eviction."""
    estate = _estate(SchedulingPolicySpec(preempt_exempt_time="10m"))
    now = datetime(2026, 1, 2, tzinfo=UTC)
    for _ in range(30):
        result, out = estate.cycle(now)
        assert out == 0 and not any(d.victims for d in result.decisions)
        if not result.admitted and not result.carried:
            break
    else:
        raise AssertionError("still admitting after 30 cycles")
    assert estate.running
