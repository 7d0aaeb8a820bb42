"""The incremental state the scheduling core keeps across cycles gives the decisions a cycle
from scratch would give.

Across cycles the server and the simulator keep one snapshot, changed by deltas (take on
admission, release on completion and eviction, node health flipped in place), and with it
the memos hung on it: compatibility verdicts, per-row performance, idle-estate placements
(Snapshot.idle_memo), the rotating scan's cursor and the preemptors' claims. Here random
sequences of events (arrivals, completions, evictions, nodes going down and coming back)
run on such a carried snapshot, and before every cycle a snapshot is built from scratch
from the inventory and the allocations of what runs; both must decide the same (the
cursor and the claims, which are the scheduler's memory rather than derived state, are
copied over)."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from estate_mix import honest_queues, honest_workload, inventory, team_quotas  # noqa: E402
from scheduler_throughput import Estate  # noqa: E402

from hetpool.catalog.compat import CompatibilityKB  # noqa: E402
from hetpool.catalog.devices import DeviceCatalog  # noqa: E402
from hetpool.core.policy import SchedulingPolicySpec  # noqa: E402
from hetpool.governance.quota import QuotaBook  # noqa: E402
from hetpool.scheduling.cycle import run_cycle  # noqa: E402
from hetpool.scheduling.parking import Parking  # noqa: E402
from hetpool.scheduling.snapshot import build_snapshot  # noqa: E402

T0 = datetime(2026, 1, 2, tzinfo=UTC)


def _decisions(result) -> list[tuple]:
    out = []
    for d in result.decisions:
        placements = tuple((p.node, p.pool, tuple(p.device_indices), p.device_fraction, p.cpu, p.memory_gb) for p in d.assignment.placements)
        facts = dict(d.explanation.facts)
        out.append((d.task_id, d.admit, tuple(d.victims), placements, d.explanation.reason, repr(sorted(facts.items()))))
    return sorted(out)


def _from_scratch(estate: Estate, inv, models, down: set[str]):
    clusters, nodes, pools = inv
    allocations = [a for r in estate.running.values() for a in r.allocations]
    fresh = build_snapshot(clusters, nodes, pools, models, allocations, unhealthy_nodes=down)
    fresh.scan_cursor[0] = estate.snapshot.scan_cursor[0]
    fresh.preemptors.update(estate.snapshot.preemptors)
    fresh.claims.update(estate.snapshot.claims)
    park = estate.snapshot.parking.get("state")
    if park is not None:  # the parked heads (their entries copied: each cycle changes them)
        after = tuple(a.copy() for a in park.after) if park.after is not None else None
        parked = {task_id: replace(p) for task_id, p in park.parked.items()}
        fresh.parking["state"] = Parking(parked, park.policy_key, after)
    return fresh


def _same_capacity(carried, fresh) -> None:
    assert np.allclose(carried.free_cpu, fresh.free_cpu) and np.allclose(carried.free_mem, fresh.free_mem)
    assert np.allclose(carried.dev_free.data, fresh.dev_free.data)
    assert (carried.row_free_whole == fresh.row_free_whole).all() and (carried.pool_free_whole == fresh.pool_free_whole).all()
    assert (carried.node_healthy == fresh.node_healthy).all()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_carried_snapshot_decides_as_one_built_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    catalog, kb = DeviceCatalog.builtin(), CompatibilityKB.builtin()
    models = {m.name: m for m in catalog.all()}
    inv = inventory(24)
    clusters, nodes, pools = inv
    snapshot = build_snapshot(clusters, nodes, pools, models)
    by_class: dict[str, int] = {}
    for p in snapshot.pools:
        by_class[p.model.device_class.value] = by_class.get(p.model.device_class.value, 0) + int(snapshot.device_totals()[p.rows].sum())
    # A small budget, so the rotating scan and the preemptors' claims are exercised.
    policy = SchedulingPolicySpec(max_heads_per_cycle=12, max_preemption_tries=4)
    estate = Estate(snapshot, models, kb, queues=honest_queues(), quotas=team_quotas(by_class), policy=policy)
    now, next_id, down = T0, 0, set()
    for item in honest_workload(60, rng, next_id, now):
        estate.queue[item.id] = item
    next_id += 60
    admitted = evicted = 0
    for _ in range(14):
        # From scratch first: the carried snapshot's cycle changes the cursor and the claims.
        fresh = _from_scratch(estate, inv, models, down)
        _same_capacity(estate.snapshot, fresh)
        quota = QuotaBook(estate.quotas, models, estate.pool_models)
        quota.charge_running(estate.running.values())
        options = {"running": list(estate.running.values()), "queues": estate.queues, "policy": policy, "models": models, "quota": quota}
        expected = run_cycle(fresh, list(estate.queue.values()), kb.check, now, **options)
        result, out = estate.cycle(now)
        assert _decisions(result) == _decisions(expected)
        admitted, evicted = admitted + len(result.admitted), evicted + out
        # Events before the next cycle: time passes, work ends, work arrives, health changes.
        now += timedelta(minutes=rng.choice([5, 30, 120]))
        for task_id in [t for t, end in estate.ends.items() if end <= now or rng.random() < 0.1]:
            estate.finish(task_id)
        for item in honest_workload(rng.randint(0, 15), rng, next_id, now):
            estate.queue[item.id] = item
        next_id += 15
        if rng.random() < 0.3:
            name = rng.choice([n.name for n in nodes])
            down ^= {name}  # goes down, or comes back
            estate.snapshot.node_healthy[estate.snapshot.node_by_name[name]] = name not in down
    assert admitted > 20  # the sequence really exercised admissions (and, with these seeds, more)
