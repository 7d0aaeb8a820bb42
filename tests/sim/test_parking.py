"""Parking (scheduling/parking.py) passes over waiting heads whose wait nothing changed:
it must change no admission and no eviction. Two estates run the same random sequence of
arrivals, completions and health flips, one with `park_waiting` on and one with it off
(unbounded cycles and preemption tries, the two bounds that parking does change: a parked
head costs no budget and no preemption try); each cycle both admit the same tasks, in the
same places, and evict the same victims — while the parked one decides far fewer heads."""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from estate_mix import honest_queues, honest_workload, inventory, team_quotas  # noqa: E402
from scheduler_throughput import Estate  # noqa: E402

from hetpool.catalog.compat import CompatibilityKB  # noqa: E402
from hetpool.catalog.devices import DeviceCatalog  # noqa: E402
from hetpool.core.policy import SchedulingPolicySpec  # noqa: E402
from hetpool.scheduling.snapshot import build_snapshot  # noqa: E402

T0 = datetime(2026, 1, 2, tzinfo=UTC)


def _estate(park: bool) -> Estate:
    catalog, kb = DeviceCatalog.builtin(), CompatibilityKB.builtin()
    models = {m.name: m for m in catalog.all()}
    clusters, nodes, pools = inventory(24)
    snapshot = build_snapshot(clusters, nodes, pools, models)
    by_class: dict[str, int] = {}
    for p in snapshot.pools:
        by_class[p.model.device_class.value] = by_class.get(p.model.device_class.value, 0) + int(snapshot.device_totals()[p.rows].sum())
    policy = SchedulingPolicySpec(max_heads_per_cycle=0, max_preemption_tries=10_000, park_waiting=park)
    return Estate(snapshot, models, kb, queues=honest_queues(), quotas=team_quotas(by_class), policy=policy)


def _actions(result) -> list[tuple]:
    where = {d.task_id: tuple((p.node, p.pool, tuple(p.device_indices), p.device_fraction) for p in d.assignment.placements) for d in result.admitted}
    placed = list(where.items())
    evicted = [(d.task_id, tuple(d.victims)) for d in result.decisions if d.victims]
    return sorted(placed) + sorted(evicted)


@pytest.mark.parametrize("seed", [4, 5, 6, 41, 42, 43])  # 41 and 42 caught a growth test that forgot preemption
def test_parking_changes_no_admission_and_no_eviction(seed: int) -> None:
    parked, plain = _estate(True), _estate(False)
    rng = random.Random(seed)
    now, next_id, decided = T0, 0, {True: 0, False: 0}
    for item in honest_workload(80, random.Random(seed + 100), next_id, now):
        parked.queue[item.id] = item
        plain.queue[item.id] = item
    next_id += 80
    passed_over = 0
    for _ in range(16):
        results = {}
        for estate, on in ((parked, True), (plain, False)):
            results[on], _ = estate.cycle(now)
            decided[on] += len(results[on].decisions)
        assert _actions(results[True]) == _actions(results[False])
        passed_over += results[True].parked
        assert results[False].parked == 0
        # The same events for both: time passes, work ends, work arrives, a node flips.
        now += timedelta(minutes=rng.choice([5, 30, 120]))
        ending = sorted(t for t, end in parked.ends.items() if end <= now or rng.random() < 0.1)
        arrivals = honest_workload(rng.randint(0, 15), rng, next_id, now)
        next_id += 15
        flip = rng.choice(sorted(parked.snapshot.node_by_name)) if rng.random() < 0.3 else None
        for estate in (parked, plain):
            for task_id in ending:
                estate.finish(task_id)
            for item in arrivals:
                estate.queue[item.id] = item
            if flip is not None:
                index = estate.snapshot.node_by_name[flip]
                estate.snapshot.node_healthy[index] = not estate.snapshot.node_healthy[index]
    assert passed_over > 0 and decided[True] < decided[False]  # parking really passed heads over
