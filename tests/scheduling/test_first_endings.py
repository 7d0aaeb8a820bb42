"""backfill.first_endings: the first MAX_RELEASES endings of the running work and this
cycle's admissions, merged from the running work sorted once per cycle — equal, task for
task and in order (ties included), to sorting the concatenation as reservations did before."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from hetpool.scheduling.backfill import MAX_RELEASES, by_end, first_endings
from tests.scheduling.factories import alloc, running_task

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _work(rng: random.Random, prefix: str, count: int) -> list:
    ends = [None, *(T0 + timedelta(minutes=m) for m in range(0, 40, 5))]  # few distinct ends: many ties
    return [running_task(f"{prefix}{i}", [alloc("n0", "p", [0])], expected_end=rng.choice(ends)) for i in range(count)]


@pytest.mark.parametrize("seed", range(6))
def test_merged_endings_equal_the_sorted_concatenation(seed: int) -> None:
    rng = random.Random(seed)
    running = _work(rng, "r", rng.choice([0, 3, 40, MAX_RELEASES + 100]))
    admitted = _work(rng, "a", rng.choice([0, 1, 7, 30]))
    expected = by_end(running + admitted)[:MAX_RELEASES]
    got = first_endings(by_end(running), admitted)
    assert [r.id for r in got] == [r.id for r in expected]
