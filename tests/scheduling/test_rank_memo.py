"""Ranks with aging kept across cycles (queueing.RankMemo) are the ranks computed afresh,
whatever the sequence of cycle times — forward in small and large steps, backwards (a
what-if cycle at an earlier time), across a change of the aging rate or of the task."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hetpool.scheduling.queueing import RankMemo, effective_rank

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_kept_ranks_equal_fresh_ones_on_random_clocks() -> None:
    rng = random.Random(3)
    memo: dict = {}
    tasks = {f"t{i}": (rng.randint(0, 3), T0 + timedelta(minutes=rng.randint(-600, 600))) for i in range(50)}
    now, asked = T0, 0
    for _ in range(400):
        now += timedelta(seconds=rng.choice([-7200, -1, 0, 1, 59, 3599, 3600, 3601, 7200, 36000]))
        aging = rng.choice([0.5, 0.5, 0.5, 1.0, 0.0, 1 / 3])
        ranks = RankMemo(memo, now, aging)
        for task_id, (base, queued_at) in rng.sample(sorted(tasks.items()), 20):
            if rng.random() < 0.05:
                base = rng.randint(0, 3)  # the task was changed
                tasks[task_id] = (base, queued_at)
            assert ranks.rank(task_id, base, queued_at) == effective_rank(base, queued_at, now, aging)
            asked += 1
    assert asked == 8000


def test_a_rank_is_recomputed_exactly_at_its_step() -> None:
    memo: dict = {}
    step = T0 + timedelta(hours=2)  # 0.5 ranks an hour: normal (1) → high (2) after two hours
    assert RankMemo(memo, step - timedelta(milliseconds=2), 0.5).rank("t", 1, T0) == 1
    assert RankMemo(memo, step, 0.5).rank("t", 1, T0) == 2


def test_an_earlier_clock_is_not_given_a_later_rank() -> None:
    memo: dict = {}
    assert RankMemo(memo, T0 + timedelta(hours=5), 0.5).rank("t", 0, T0) == 2
    assert RankMemo(memo, T0 + timedelta(hours=1), 0.5).rank("t", 0, T0) == 0  # a what-if cycle at an earlier time
