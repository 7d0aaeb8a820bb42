"""Settling (cycle_parked.settle): once a cycle has no preemption try left and every queue
owed a reservation holds one, the parked heads that can no longer be let go are passed over
in one step instead of one at a time. It must change nothing but the cost: two estates run
the same random sequence of arrivals, completions and health flips with parking on and a
small preemption budget (so that tries run out), one settling and one not; every cycle both
decide the same tasks, the same way, and admit and evict the same ones — while the settling
one passes parked heads over in bulk."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling import cycle as cycle_module
from tests.sim.twin_estates import Estate, honest_workload, make_estate, same_arrivals, same_events

T0 = datetime(2026, 1, 2, tzinfo=UTC)


def _estate() -> Estate:
    return make_estate(SchedulingPolicySpec(max_heads_per_cycle=0, max_preemption_tries=2))


def _decided(result) -> list[tuple]:
    out = []
    for d in result.decisions:
        where = tuple((p.node, p.pool, tuple(p.device_indices), p.device_fraction) for p in d.assignment.placements) if d.admit else ()
        out.append((d.task_id, d.admit, d.explanation.reason.value, where, tuple(d.victims)))
    return sorted(out)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_settling_changes_no_decision(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    settling, plain = _estate(), _estate()
    rng = random.Random(seed)
    now = T0
    next_id = same_arrivals((settling, plain), 160, seed + 100, now)
    skipped = 0
    for _ in range(14):
        result, _ = settling.cycle(now)
        with monkeypatch.context() as patch:
            patch.setattr(cycle_module, "settle", lambda cx, st: None)
            reference, _ = plain.cycle(now)
        assert _decided(result) == _decided(reference)
        assert result.parked == reference.parked  # passed over in bulk or one by one: the same heads
        skipped += result.parked
        now, next_id = same_events((settling, plain), rng, now, next_id, 25)
    assert skipped > 0


def test_settling_passes_parked_heads_over_without_a_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy estate some cycles settle: they pass over more parked heads than were asked
    at their turn (cycle_parked.still_parked) — the rest went in one step."""
    estate = _estate()
    for item in honest_workload(240, random.Random(7), 0, T0):
        estate.queue[item.id] = item
    kept: list[str] = []
    original = cycle_module.still_parked

    def asked(cx, st, q, item) -> bool:
        stays = original(cx, st, q, item)
        if stays:
            kept.append(item.id)
        return stays

    monkeypatch.setattr(cycle_module, "still_parked", asked)
    in_bulk = 0
    for step in range(6):
        kept.clear()
        result, _ = estate.cycle(T0 + timedelta(minutes=step))
        assert result.parked >= len(kept)
        in_bulk += result.parked - len(kept)
    assert in_bulk > 0
