"""Preemption plans that came to nothing are reused while nothing they read changes
(scheduling/plan_memo.py): that must change no decision at all. Two estates run the same
random sequence of arrivals, completions and health flips — each step followed by a few
back-to-back cycles with nothing in between, as the server's passes see an estate — one
with the memo and one without; every cycle, both decide the same tasks the same way: the
same admissions in the same places, the same victims, the same reasons and facts."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pytest

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling import plan_memo
from tests.sim.twin_estates import Estate, make_estate, same_arrivals, same_events

T0 = datetime(2026, 1, 2, tzinfo=UTC)


def _decisions(result) -> list[tuple]:
    out = []
    for d in result.decisions:
        where = tuple((p.node, p.pool, tuple(p.device_indices), p.device_fraction) for p in d.assignment.placements)
        facts = json.dumps(d.explanation.facts, sort_keys=True, default=str)
        out.append((d.task_id, d.admit, where, d.explanation.reason.value, facts, tuple(d.victims), d.preemption_reason))
    return out


def _cycle(estate: Estate, now: datetime, memo: bool):
    plan_memo.ENABLED = memo
    try:
        result, _ = estate.cycle(now)
    finally:
        plan_memo.ENABLED = True
    return result


# Few nodes and many arrivals: a full estate where over-quota heads plan every cycle.
@pytest.mark.parametrize("seed", [1, 2, 3, 7])
def test_the_memo_changes_no_decision(seed: int) -> None:
    policy = SchedulingPolicySpec()
    with_memo, without = make_estate(policy), make_estate(policy)
    rng = random.Random(seed)
    now = T0
    next_id = same_arrivals((with_memo, without), 120, seed + 100, now)
    for _ in range(10):
        for _ in range(3):  # back-to-back passes: nothing changes in between
            a, b = _cycle(with_memo, now, True), _cycle(without, now, False)
            assert _decisions(a) == _decisions(b)
        now, next_id = same_events((with_memo, without), rng, now, next_id, 25)
    memo = with_memo.snapshot.parking[plan_memo.MEMO_KEY]
    assert memo.hits > 0  # it really reused plans
    assert plan_memo.MEMO_KEY not in without.snapshot.parking
