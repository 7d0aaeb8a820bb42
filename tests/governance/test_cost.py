"""Cost rules (hetpool.governance.cost): prices, charges, day splits, periods, reports, budgets."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace

import pytest

from hetpool.core.governance import BudgetSpec, ModelPrice, PriceListSpec
from hetpool.core.inventory import PoolSpec
from hetpool.governance.cost import (
    Allocation,
    PriceBook,
    Rates,
    aggregate,
    attempt_spans,
    budget_applies,
    charge,
    crossed_alerts,
    current_period,
    from_micros,
    over_budget,
    parse_period,
    split_days,
    tenant_levels,
    to_micros,
)

A100_AT_7 = ModelPrice(model="nvidia-a100-80g", per_device_hour=7)
T0 = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)


def pool(price: float = 0.0) -> PoolSpec:
    return PoolSpec(name="p", cluster="c1", model="nvidia-a100-80g", nodes=["n1"], price_per_hour=price)


def book() -> PriceBook:
    return PriceBook(
        [
            PriceListSpec(
                name="global",
                devices=[ModelPrice(model="nvidia-a100-80g", per_device_hour=10), ModelPrice(model="ascend-910b3", per_device_hour=6)],
                per_cpu_core_hour=0.1,
                per_memory_gib_hour=0.01,
            ),
            PriceListSpec(name="c1", cluster="c1", currency="USD", devices=[A100_AT_7], per_cpu_core_hour=0.2),
        ]
    )


def test_price_resolution_order_pool_then_cluster_list_then_global_then_zero() -> None:
    prices = book()
    assert prices.rates(pool=pool(18.0), cluster="c1", model="nvidia-a100-80g").per_device_hour == 18.0  # the pool's own price wins
    cluster = prices.rates(pool=pool(), cluster="c1", model="nvidia-a100-80g")
    assert (cluster.per_device_hour, cluster.device_source, cluster.currency) == (7, "pricelist/c1", "USD")
    # The cluster list sets CPU but not memory: memory falls through to the global list.
    assert (cluster.per_cpu_core_hour, cluster.per_memory_gib_hour) == (0.2, 0.01)
    # A model the cluster list does not price falls through to the global list.
    assert prices.rates(pool=pool(), cluster="c1", model="ascend-910b3").per_device_hour == 6
    other = prices.rates(pool=pool(), cluster="c2", model="nvidia-a100-80g")
    assert (other.per_device_hour, other.per_cpu_core_hour, other.currency) == (10, 0.1, "CNY")
    nothing = PriceBook([]).rates(pool=None, cluster="c1", model="x")
    assert nothing == Rates(0.0, 0.0, 0.0, "CNY", "none")
    # A deleted pool: the price recorded with the placement still applies.
    assert PriceBook([]).rates(pool=None, cluster="c1", model="x", recorded_device_price=4.0).per_device_hour == 4.0


def test_charge_of_an_allocation_over_an_interval() -> None:
    rates = Rates(per_device_hour=10, per_cpu_core_hour=0.1, per_memory_gib_hour=0.01, currency="CNY", device_source="pool")
    c = charge(Allocation(devices=8, cpu=16, memory_gb=64), rates, T0, T0 + timedelta(minutes=90))
    assert (c.seconds, c.device_hours, c.cpu_core_hours, c.memory_gib_hours) == (5400, 12, 24, 96)
    assert c.cost_micros == to_micros(12 * 10 + 24 * 0.1 + 96 * 0.01) == 123_360_000
    assert charge(Allocation(1, 1, 1), rates, T0, T0 - timedelta(hours=1)).cost_micros == 0  # a backwards clock charges nothing
    assert from_micros(123_360_000) == 123.36


def test_intervals_split_at_utc_midnight_and_keep_their_length() -> None:
    pieces = split_days(T0, T0 + timedelta(hours=27))
    assert [(d, s.hour, e.hour) for d, s, e in pieces] == [(date(2026, 11, 30), 22, 0), (date(2026, 12, 1), 0, 0), (date(2026, 12, 2), 0, 1)]
    assert sum((e - s).total_seconds() for _, s, e in pieces) == 27 * 3600
    assert split_days(T0, T0) == []
    # Naive timestamps (SQLite) are UTC.
    assert split_days(T0.replace(tzinfo=None), T0.replace(tzinfo=None) + timedelta(hours=1))[0][1] == T0


@pytest.mark.parametrize(
    ("text", "kind", "start", "end"),
    [
        ("2026-11", "month", date(2026, 11, 1), date(2026, 12, 1)),
        ("2026-12", "month", date(2026, 12, 1), date(2027, 1, 1)),
        ("2026-W48", "week", date(2026, 11, 23), date(2026, 11, 30)),
        ("2026-w01", "week", date(2025, 12, 29), date(2026, 1, 5)),
        ("2026-11-30", "day", date(2026, 11, 30), date(2026, 12, 1)),
        ("2026", "year", date(2026, 1, 1), date(2027, 1, 1)),
    ],
)
def test_periods(text: str, kind: str, start: date, end: date) -> None:
    period = parse_period(text)
    assert (period.kind, period.start, period.end) == (kind, start, end)
    assert period.contains(start) and not period.contains(end)


@pytest.mark.parametrize("text", ["2026-13", "2026-W54", "2026-02-30", "last month", "11-2026", ""])
def test_invalid_periods_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="invalid period"):
        parse_period(text)


def test_current_period_of_each_budget_kind() -> None:
    assert current_period("month", T0).name == "2026-11"
    assert current_period("week", T0).name == "2026-W49"  # Monday 30 November 2026 starts ISO week 49
    assert current_period("day", T0).name == "2026-11-30"


def _row(task: str, tenant: str, micros: int, *, currency: str = "CNY", pool: str = "p1") -> SimpleNamespace:
    org, team, project = tenant_levels(tenant)
    return SimpleNamespace(
        task_id=task,
        tenant=tenant,
        org=org,
        team=team,
        project=project,
        env="dev",
        task_type="training",
        pool=pool,
        cluster="c1",
        backend="local",
        model="m",
        cost_micros=micros,
        device_hours=1.0,
        cpu_core_hours=2.0,
        memory_gib_hours=3.0,
        currency=currency,
    )


def test_report_groups_by_tenant_level_and_the_total_is_the_sum_of_the_rows() -> None:
    rows = [
        _row("t1", "ai-lab/nlp/llm-sft", 1_000_001),
        _row("t1", "ai-lab/nlp/llm-sft", 2_000_000, pool="p2"),
        _row("t2", "ai-lab/cv/detection", 500_000),
        _row("t3", "ai-lab", 7),  # the org's own task: under "ai-lab" at every level below org
        _row("t4", "infra/data/etl", 3),
    ]
    by_team = aggregate(rows, "team")
    assert [(g["key"], g["cost_micros"], g["tasks"], g["rows"]) for g in by_team["groups"]] == [
        ("ai-lab/nlp", 3_000_001, 1, 2),
        ("ai-lab/cv", 500_000, 1, 1),
        ("ai-lab", 7, 1, 1),
        ("infra/data", 3, 1, 1),
    ]
    assert by_team["currency"] == "CNY" and by_team["total"]["cost_micros"] == sum(r.cost_micros for r in rows)
    assert by_team["total"]["tasks"] == 4 and by_team["total"]["device_hours"] == 5
    by_org = aggregate(rows, "org")
    assert {g["key"]: g["cost_micros"] for g in by_org["groups"]} == {"ai-lab": 3_500_008, "infra": 3}
    assert sum(g["cost_micros"] for g in by_org["groups"]) == by_org["total"]["cost_micros"]
    assert {g["key"] for g in aggregate(rows, "pool")["groups"]} == {"p1", "p2"}
    with pytest.raises(ValueError, match="cannot group by"):
        aggregate(rows, "colour")


def test_report_with_several_currencies_totals_each() -> None:
    report = aggregate([_row("t1", "a/b", 10), _row("t2", "a/b", 20, currency="USD")], "team")
    assert report["currency"] == "mixed" and report["total"] is None
    assert {c: t["cost_micros"] for c, t in report["totals"].items()} == {"CNY": 10, "USD": 20}
    assert aggregate([], "team")["currency"] is None


def test_budgets_cover_their_subtree_and_alert_once_per_fraction() -> None:
    budget = BudgetSpec(name="nlp", tenant="ai-lab/nlp", amount=100, alert_at=[1.0, 0.5, 0.8, 0.5])
    assert budget.alert_at == [0.5, 0.8, 1.0]
    assert budget_applies(budget, "ai-lab/nlp/llm-sft") and budget_applies(budget, "ai-lab/nlp")
    assert not budget_applies(budget, "ai-lab") and not budget_applies(budget, "ai-lab/nlp-other")
    assert crossed_alerts(budget, to_micros(49.99), []) == []
    assert crossed_alerts(budget, to_micros(85), []) == [0.5, 0.8]
    assert crossed_alerts(budget, to_micros(85), [0.5]) == [0.8]
    assert crossed_alerts(budget, to_micros(100), [0.5, 0.8]) == [1.0]
    assert not over_budget(budget, to_micros(99.999999)) and over_budget(budget, to_micros(100))
    with pytest.raises(ValueError, match="alert_at"):
        BudgetSpec(name="x", tenant="a", amount=1, alert_at=[0])


def test_attempt_spans_from_state_events() -> None:
    def ev(action: str, minutes: int, **after) -> tuple:
        return (action, (T0 + timedelta(minutes=minutes)).replace(tzinfo=None), after or None)

    events = [
        ev("task.queued", 0),
        ev("task.admitted", 1, attempt=1, cluster="c1", backend="local"),
        ev("task.dispatched", 2),
        ev("task.running", 3),
        ev("task.preempted", 10),
        ev("task.queued", 10),
        ev("task.admitted", 20, attempt=2, cluster="c2", backend="slurm"),
        ev("task.running", 21),
    ]
    spans = attempt_spans(events)
    assert spans[1] == {"start": T0 + timedelta(minutes=1), "end": T0 + timedelta(minutes=10), "cluster": "c1", "backend": "local"}
    assert spans[2]["start"] == T0 + timedelta(minutes=20) and spans[2]["end"] is None
    spans = attempt_spans([*events, ev("task.succeeded", 30), ev("task.cancelled", 40)])
    assert spans[2]["end"] == T0 + timedelta(minutes=30)
