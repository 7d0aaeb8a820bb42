"""Two estates driven through the same random events, for tests that compare a scheduling
feature on and off (parking, settling): the benchmark's honest mix on a small inventory."""

from __future__ import annotations

import random
import sys
from datetime import datetime, timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from estate_mix import honest_queues, honest_workload, inventory, team_quotas  # noqa: E402
from scheduler_throughput import Estate  # noqa: E402

from hetpool.catalog.compat import CompatibilityKB  # noqa: E402
from hetpool.catalog.devices import DeviceCatalog  # noqa: E402
from hetpool.core.policy import SchedulingPolicySpec  # noqa: E402
from hetpool.scheduling.snapshot import build_snapshot  # noqa: E402

__all__ = ["Estate", "honest_workload", "make_estate", "same_arrivals", "same_events"]


def make_estate(policy: SchedulingPolicySpec, nodes: int = 24) -> Estate:
    """A small estate of the honest mix (quotas with borrowing, four queues) under `policy`."""
    catalog, kb = DeviceCatalog.builtin(), CompatibilityKB.builtin()
    models = {m.name: m for m in catalog.all()}
    clusters, node_specs, pools = inventory(nodes)
    snapshot = build_snapshot(clusters, node_specs, pools, models)
    by_class: dict[str, int] = {}
    for p in snapshot.pools:
        by_class[p.model.device_class.value] = by_class.get(p.model.device_class.value, 0) + int(snapshot.device_totals()[p.rows].sum())
    return Estate(snapshot, models, kb, queues=honest_queues(), quotas=team_quotas(by_class), policy=policy)


def same_events(estates: tuple[Estate, ...], rng: random.Random, now: datetime, next_id: int, most_arrivals: int) -> tuple[datetime, int]:
    """The same events for every estate: time passes, work ends (its end came, or by
    chance), up to `most_arrivals` tasks arrive, and now and then a node flips health."""
    first = estates[0]
    now += timedelta(minutes=rng.choice([5, 30, 120]))
    ending = sorted(t for t, end in first.ends.items() if end <= now or rng.random() < 0.1)
    arrivals = honest_workload(rng.randint(0, most_arrivals), rng, next_id, now)
    flip = rng.choice(sorted(first.snapshot.node_by_name)) if rng.random() < 0.3 else None
    for e in estates:
        for task_id in ending:
            e.finish(task_id)
        for item in arrivals:
            e.queue[item.id] = item
        if flip is not None:
            index = e.snapshot.node_by_name[flip]
            e.snapshot.node_healthy[index] = not e.snapshot.node_healthy[index]
    return now, next_id + most_arrivals


def same_arrivals(estates: tuple[Estate, ...], count: int, seed: int, now: datetime) -> int:
    """The same `count` tasks of the honest mix queued in every estate (ids from 0); the next free id."""
    for item in honest_workload(count, random.Random(seed), 0, now):
        for e in estates:
            e.queue[item.id] = item
    return count
