"""Charging a fresh book with the running work each pass reuses what each placement charges
(governance.quota._RunningCharges) while the configuration is the same: the books must
agree with charges computed from scratch, whatever changes between passes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import TaskType
from hetpool.core.specs import parse_spec
from hetpool.governance import quota as quota_module
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation

MODELS = {m.name: m for m in DeviceCatalog.builtin()}
POOLS = {"a100": "nvidia-a100-80g", "910b": "ascend-910b3"}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _quotas(nominal: float = 8) -> list:
    """Other amounts charge alike; 4 also changes what is charged (no normalised limit)."""
    limits = [{"resource": "gpu", "nominal": nominal}, {"resource": "npu", "nominal": nominal}]
    if nominal != 4:
        limits.append({"resource": "a100-equivalent", "nominal": 2 * nominal})
    return [parse_spec({"kind": "Quota", "name": f"q-{team}", "tenant": f"org/{team}", "limits": limits}) for team in ("a", "b", "c")]


def _task(rng: random.Random, i: int) -> RunningTask:
    pool = rng.choice(list(POOLS))
    allocations = tuple(Allocation(f"n{rng.randrange(9)}", pool, tuple(range(rng.randint(1, 4))), 1.0, 4, 16) for _ in range(rng.randint(1, 2)))
    ttype = rng.choice([TaskType.TRAINING, TaskType.INFERENCE])
    return RunningTask(f"t{i}", f"org/{rng.choice('abc')}", 1, ttype, allocations, T0 + timedelta(seconds=rng.randrange(3600)), None, env="dev")


def _from_scratch(quotas, running) -> QuotaBook:
    quota_module._RunningCharges._current = None  # nothing kept
    book = QuotaBook(quotas, MODELS, POOLS)
    book.charge_running(running)
    quota_module._RunningCharges._current = None
    return book


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_books_of_successive_passes_agree_with_books_charged_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    quotas = _quotas()
    running = {f"t{i}": _task(rng, i) for i in range(40)}
    next_id = 40
    for _ in range(30):
        event = rng.random()
        if event < 0.3 and running:  # a task ends
            running.pop(rng.choice(sorted(running)))
        elif event < 0.6:  # one starts
            running[f"t{next_id}"] = _task(rng, next_id)
            next_id += 1
        elif event < 0.8 and running:  # one is placed elsewhere (a new attempt, a new allocations tuple)
            task_id = rng.choice(sorted(running))
            running[task_id] = _task(rng, int(task_id[1:]))
        else:  # the quotas are applied again with other amounts (new objects)
            quotas = _quotas(rng.choice([4, 8, 16]))
        book = QuotaBook(quotas, MODELS, POOLS)
        book.charge_running(list(running.values()))
        fresh = _from_scratch(quotas, list(running.values()))
        assert book.used == pytest.approx(fresh.used)
        assert {t: (c.amounts, c.borrowing) for t, c in book.charged.items()} == {t: (c.amounts, c.borrowing) for t, c in fresh.charged.items()}
        # The next pass keeps what this one computed only under the same configuration.
        book = QuotaBook(quotas, MODELS, POOLS)
        book.charge_running(list(running.values()))


def test_a_placement_is_charged_once_while_the_configuration_stays(monkeypatch) -> None:
    rng = random.Random(5)
    quotas = _quotas()
    running = [_task(rng, i) for i in range(20)]
    quota_module._RunningCharges._current = None
    computed = []
    original = QuotaBook._compute_amounts
    monkeypatch.setattr(QuotaBook, "_compute_amounts", lambda self, *a: computed.append(a) or original(self, *a))
    QuotaBook(quotas, MODELS, POOLS).charge_running(running)
    first = len(computed)
    assert first > 0
    QuotaBook(quotas, MODELS, POOLS).charge_running(running)
    assert len(computed) == first  # the second pass computed nothing
    QuotaBook(_quotas(), MODELS, POOLS).charge_running(running)  # same amounts, but new quota objects
    assert len(computed) > first


def test_placements_of_finished_work_are_forgotten() -> None:
    """A long-lived server charges a book per pass; what finished must not stay held."""
    rng = random.Random(11)
    quotas = _quotas()
    quota_module._RunningCharges._current = None
    running = [_task(rng, i) for i in range(20)]
    for wave in range(1, 200):  # every pass, all running work replaced by new placements
        running = [_task(rng, 20 * wave + i) for i in range(20)]
        QuotaBook(quotas, MODELS, POOLS).charge_running(running)
        QuotaBook(quotas, MODELS, POOLS).charge_running([])  # a what-if book forgets nothing
    assert len(quota_module._RunningCharges._current.amounts) <= 2 * 20 + 1024 + 20


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_book_of_the_same_work_plus_newcomers_charges_only_them_and_agrees_exactly(seed: int, monkeypatch) -> None:
    """Back-to-back passes: mostly work that starts after everything charged (charged alone,
    on top of the last book's charges), now and then work that ends, is re-placed, started
    earlier than the latest (a late-recorded start), or a what-if book charged with nothing
    in between. Every book equals one charged from scratch — sums and borrowing flags
    exactly, charging order included — and the passes with only newcomers charge only them."""
    rng = random.Random(seed)
    quotas = _quotas()
    clock = T0 + timedelta(hours=2)
    running = {f"t{i}": _task(rng, i) for i in range(30)}
    next_id, charged = 30, []
    real_charge = QuotaBook._charge_in_order
    monkeypatch.setattr(
        QuotaBook,
        "_charge_in_order",
        lambda self, memo, ordered, used: (charged.extend(r.id for r in ordered), real_charge(self, memo, ordered, used)),
    )
    quota_module._RunningCharges._current = None
    QuotaBook(quotas, MODELS, POOLS).charge_running(list(running.values()))  # the first pass: all from scratch
    fast = 0
    for _ in range(60):
        event, newcomers = rng.random(), []
        if event < 0.6:
            for _ in range(rng.randint(0, 3)):
                clock += timedelta(seconds=rng.choice([0, 1, 5]))  # ties on the clock: the id orders them
                task = _task(rng, next_id)
                running[task.id] = RunningTask(task.id, task.tenant, 1, task.task_type, task.allocations, clock, None, env="dev")
                newcomers.append(task.id)
                next_id += 1
        elif event < 0.65 and running:
            running.pop(rng.choice(sorted(running)))
        elif event < 0.7 and running:  # placed elsewhere under the same start (only the placement differs)
            r = running[rng.choice(sorted(running))]
            other = _task(rng, 0).allocations
            running[r.id] = RunningTask(r.id, r.tenant, 1, r.task_type, other, r.started_at, None, env="dev")
        elif event < 0.8 and running:
            task_id = rng.choice(sorted(running))
            running[task_id] = _task(rng, int(task_id[1:]))
        elif event < 0.9:  # started before the latest charged
            running[f"t{next_id}"] = _task(rng, next_id)
            next_id += 1
        else:
            QuotaBook(quotas, MODELS, POOLS).charge_running([])  # a what-if book
        charged.clear()
        book = QuotaBook(quotas, MODELS, POOLS)
        book.charge_running(list(running.values()))
        if event < 0.6:
            assert sorted(charged) == sorted(newcomers)  # only they were charged
            fast += 1
            # The next pass sees the same placements rebuilt (new objects, equal values): still only newcomers.
            running = {
                t: RunningTask(
                    r.id, r.tenant, 1, r.task_type, tuple(Allocation(*vars(a).values()) for a in r.allocations), r.started_at, None, env="dev"
                )
                for t, r in running.items()
            }
        kept = quota_module._RunningCharges._current
        fresh = _from_scratch(quotas, list(running.values()))
        quota_module._RunningCharges._current = kept
        assert book.used == fresh.used  # the same sums, bit for bit
        assert {t: (c.amounts, c.borrowing) for t, c in book.charged.items()} == {t: (c.amounts, c.borrowing) for t, c in fresh.charged.items()}
        assert list(book.charged) == list(fresh.charged)  # the same charging order
        book.charge("admitted-now", ("org/a", "dev", "training"), [])  # a cycle's own charges stay its own
        assert "admitted-now" not in QuotaBook(quotas, MODELS, POOLS).charged
    assert fast > 20
