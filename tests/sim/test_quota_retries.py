"""Preemption plans refused by the quota are retried with fewer kinds of victims
(cycle_preempt.plan_preemption); the retries are skipped when the book would refuse the
head even with all the work any retry may evict released (`_retries_hopeless`), since a
retry evicts a subset of it. Skipping must change nothing: two estates run the same random
events, one with the skip and one without, and every decision — admissions, placements,
victims, reasons and facts — must be equal, while the skip really skipped retries."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling import cycle_preempt
from tests.sim.twin_estates import honest_workload, make_estate, same_events

T0 = datetime(2026, 1, 2, tzinfo=UTC)


def _decisions(result) -> list[tuple]:
    out = []
    for d in result.decisions:
        where = tuple((p.node, p.pool, tuple(p.device_indices), p.device_fraction) for p in d.assignment.placements) if d.admit else ()
        out.append((d.task_id, d.admit, where, tuple(d.victims), d.explanation.reason, repr(sorted(d.explanation.facts.items()))))
    return sorted(out)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_skipping_hopeless_retries_changes_no_decision(seed: int, monkeypatch) -> None:
    original = cycle_preempt._retries_hopeless
    state = {"skip": True, "skipped": 0}
    searches = {True: 0, False: 0}

    def retries_hopeless(*args):
        if not state["skip"]:
            return False
        hopeless = original(*args)
        state["skipped"] += hopeless
        return hopeless

    search = cycle_preempt.find_victims

    def counted(*args, **kwargs):
        searches[state["skip"]] += 1
        return search(*args, **kwargs)

    monkeypatch.setattr(cycle_preempt, "_retries_hopeless", retries_hopeless)
    monkeypatch.setattr(cycle_preempt, "find_victims", counted)
    policy = SchedulingPolicySpec()
    skipping, plain = make_estate(policy, nodes=30), make_estate(policy, nodes=30)
    rng = random.Random(seed)
    now, next_id = T0, 0
    for item in honest_workload(160, random.Random(seed + 100), next_id, now):
        skipping.queue[item.id] = item
        plain.queue[item.id] = item
    next_id += 160
    for _ in range(14):
        state["skip"] = True
        with_skip, _ = skipping.cycle(now)
        state["skip"] = False
        without, _ = plain.cycle(now)
        assert _decisions(with_skip) == _decisions(without)
        now, next_id = same_events((skipping, plain), rng, now, next_id, 25)
    assert state["skipped"] > 0 and searches[True] < searches[False]  # retries really were skipped
