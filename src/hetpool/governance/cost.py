"""Cost rules as pure functions: which price applies, what an allocation costs over an
interval, how intervals split into days, which period a report covers, how ledger rows
group, and which budget alerts a spend crosses.

Money is counted in integer micro-units (1e-6 of the currency) so that sums of ledger
rows and of report groups are exact, whatever the order of addition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from hetpool.core.clock import as_utc
from hetpool.core.governance import BudgetSpec, PriceListSpec
from hetpool.core.inventory import PoolSpec

DEFAULT_CURRENCY = "CNY"
MICROS = 1_000_000

# Report dimensions → ledger field. Tenant levels truncate the task's tenant path; a task
# billed to a shorter path (an org's own task, by team) stays under that path.
DIMENSIONS = {
    "tenant": "tenant",
    "org": "org",
    "team": "team",
    "project": "project",
    "env": "env",
    "type": "task_type",
    "pool": "pool",
    "cluster": "cluster",
    "backend": "backend",
    "model": "model",
}


def to_micros(amount: float) -> int:
    return int(round(amount * MICROS))


def from_micros(micros: int) -> float:
    return round(micros / MICROS, 6)


def tenant_levels(path: str) -> tuple[str, str, str]:
    """'a/b/c' → ('a', 'a/b', 'a/b/c'); shorter paths fill the deeper levels with themselves."""
    parts = path.split("/")
    org = parts[0]
    team = "/".join(parts[:2])
    return org, team, path


# ---------------------------------------------------------------------------- prices
@dataclass(frozen=True)
class Rates:
    """What one hour costs: per device (whole-device equivalent), per CPU core, per GiB."""

    per_device_hour: float
    per_cpu_core_hour: float
    per_memory_gib_hour: float
    currency: str
    device_source: str  # "pool", "pricelist/<name>" or "none": why this device price


class PriceBook:
    """The applied price lists, resolved per (pool, cluster, model).

    Device price: the pool's own `price_per_hour` (when > 0) > the cluster's PriceList >
    the global PriceList (no cluster) > 0. CPU and memory prices: the cluster's list when
    it sets them > the global list > 0. Currency: the cluster's list, else the global
    one, else CNY. Several lists for one scope: the first by name wins."""

    def __init__(self, price_lists: Iterable[PriceListSpec]) -> None:
        self.global_list: PriceListSpec | None = None
        self.by_cluster: dict[str, PriceListSpec] = {}
        for spec in sorted(price_lists, key=lambda s: s.name):
            if spec.cluster is None:
                self.global_list = self.global_list or spec
            else:
                self.by_cluster.setdefault(spec.cluster, spec)

    def rates(self, *, pool: PoolSpec | None, cluster: str | None, model: str, recorded_device_price: float = 0.0) -> Rates:
        """`recorded_device_price`: the per-device price stored with the placement, used
        when the pool no longer exists (so a deleted pool's work is still charged)."""
        lists = [s for s in (self.by_cluster.get(cluster or ""), self.global_list) if s is not None]
        currency = lists[0].currency if lists else DEFAULT_CURRENCY
        pool_price = pool.price_per_hour if pool is not None else recorded_device_price
        if pool_price > 0:
            device, source = pool_price, "pool"
        else:
            device, source = 0.0, "none"
            for spec in lists:
                price = next((p.per_device_hour for p in spec.devices if p.model == model), None)
                if price is not None:
                    device, source = price, f"pricelist/{spec.name}"
                    break
        cpu = next((s.per_cpu_core_hour for s in lists if s.per_cpu_core_hour is not None), 0.0)
        memory = next((s.per_memory_gib_hour for s in lists if s.per_memory_gib_hour is not None), 0.0)
        return Rates(device, cpu, memory, currency, source)


# ---------------------------------------------------------------------------- charges
@dataclass(frozen=True)
class Allocation:
    """What one worker holds: device equivalents (devices × fraction), CPU cores, GiB."""

    devices: float
    cpu: float
    memory_gb: float


@dataclass(frozen=True)
class Charge:
    seconds: float
    device_hours: float
    cpu_core_hours: float
    memory_gib_hours: float
    cost_micros: int


def charge(alloc: Allocation, rates: Rates, start: datetime, end: datetime) -> Charge:
    seconds = max(0.0, (end - start).total_seconds())
    hours = seconds / 3600
    device_h, cpu_h, mem_h = alloc.devices * hours, alloc.cpu * hours, alloc.memory_gb * hours
    cost = device_h * rates.per_device_hour + cpu_h * rates.per_cpu_core_hour + mem_h * rates.per_memory_gib_hour
    return Charge(seconds, device_h, cpu_h, mem_h, to_micros(cost))


def split_days(start: datetime, end: datetime) -> list[tuple[date, datetime, datetime]]:
    """[start, end) cut at UTC midnights: (day, piece start, piece end) in order."""
    start, end = as_utc(start), as_utc(end)
    pieces = []
    while start < end:
        midnight = datetime.combine(start.date() + timedelta(days=1), time(), tzinfo=UTC)
        piece_end = min(end, midnight)
        pieces.append((start.date(), start, piece_end))
        start = piece_end
    return pieces


# ---------------------------------------------------------------------------- periods
@dataclass(frozen=True)
class Period:
    """A half-open range of UTC days [start, end) with the name a user wrote."""

    name: str
    kind: str  # year | month | week | day
    start: date
    end: date

    def contains(self, day: date) -> bool:
        return self.start <= day < self.end

    def to_dict(self) -> dict:
        return {"period": self.name, "kind": self.kind, "start": self.start.isoformat(), "end": self.end.isoformat()}


_PERIOD_FORMS = "'2026' (year), '2026-11' (month), '2026-W48' (ISO week) or '2026-11-30' (day)"


def parse_period(text: str) -> Period:
    value = text.strip()
    try:
        if re.fullmatch(r"\d{4}", value):
            year = int(value)
            return Period(value, "year", date(year, 1, 1), date(year + 1, 1, 1))
        if m := re.fullmatch(r"(\d{4})-(\d{2})", value):
            year, month = int(m.group(1)), int(m.group(2))
            start = date(year, month, 1)
            return Period(value, "month", start, date(year + month // 12, month % 12 + 1, 1))
        if m := re.fullmatch(r"(\d{4})-[Ww](\d{2})", value):
            start = date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)
            return Period(f"{m.group(1)}-W{m.group(2)}", "week", start, start + timedelta(days=7))
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            day = date.fromisoformat(value)
            return Period(value, "day", day, day + timedelta(days=1))
    except ValueError as exc:
        raise ValueError(f"invalid period {text!r}: {exc}") from None
    raise ValueError(f"invalid period {text!r}: use {_PERIOD_FORMS}")


def current_period(kind: str, now: datetime) -> Period:
    """The month, ISO week or day (UTC) that contains `now` — what a budget counts."""
    day = as_utc(now).date()
    if kind == "month":
        return parse_period(f"{day.year:04d}-{day.month:02d}")
    if kind == "week":
        year, week, _ = day.isocalendar()
        return parse_period(f"{year:04d}-W{week:02d}")
    if kind == "day":
        return parse_period(day.isoformat())
    if kind == "year":
        return parse_period(f"{day.year:04d}")
    raise ValueError(f"unknown period kind {kind!r}")


# ---------------------------------------------------------------------------- reports
@dataclass
class Sums:
    """Sums over ledger rows of one group (or of a whole period, per currency)."""

    key: str
    currency: str
    cost_micros: int = 0
    device_hours: float = 0.0
    cpu_core_hours: float = 0.0
    memory_gib_hours: float = 0.0
    rows: int = 0
    tasks: int = 0

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "currency": self.currency,
            "cost": from_micros(self.cost_micros),
            "cost_micros": self.cost_micros,
            "device_hours": round(self.device_hours, 6),
            "cpu_core_hours": round(self.cpu_core_hours, 6),
            "memory_gib_hours": round(self.memory_gib_hours, 6),
            "tasks": self.tasks,
            "rows": self.rows,
        }


def check_dimension(by: str) -> str:
    if by not in DIMENSIONS:
        raise ValueError(f"cannot group by {by!r}; use one of {', '.join(DIMENSIONS)}")
    return DIMENSIONS[by]


def group_key(row, by: str) -> str:
    return getattr(row, check_dimension(by)) or "-"


def assemble_report(by: str, groups: Iterable[Sums], totals: Iterable[Sums]) -> dict:
    """Groups (largest cost first) and totals per currency. `currency` is the one currency
    of the period, "mixed" when rows differ (then compare groups per currency), or None."""
    ordered = sorted(groups, key=lambda s: (-s.cost_micros, s.key, s.currency))
    per_currency = {t.currency: t for t in sorted(totals, key=lambda t: t.currency)}
    currency = next(iter(per_currency)) if len(per_currency) == 1 else ("mixed" if per_currency else None)
    single = per_currency[currency] if len(per_currency) == 1 else None
    return {
        "by": by,
        "currency": currency,
        "groups": [g.to_dict() for g in ordered],
        "total": single.to_dict() if single else None,
        "totals": {c: t.to_dict() for c, t in per_currency.items()},
    }


def aggregate(rows: Iterable, by: str) -> dict:
    """Ledger rows (objects with the ledger's fields) → the report, in memory. The server
    sums in SQL with the same keys; this is the reference the tests compare against."""
    check_dimension(by)
    groups: dict[tuple[str, str], tuple[Sums, set]] = {}
    totals: dict[str, tuple[Sums, set]] = {}
    for row in rows:
        for sums, tasks in (
            groups.setdefault((group_key(row, by), row.currency), (Sums(group_key(row, by), row.currency), set())),
            totals.setdefault(row.currency, (Sums("total", row.currency), set())),
        ):
            sums.cost_micros += row.cost_micros
            sums.device_hours += row.device_hours
            sums.cpu_core_hours += row.cpu_core_hours
            sums.memory_gib_hours += row.memory_gib_hours
            sums.rows += 1
            tasks.add(row.task_id)
            sums.tasks = len(tasks)
    return assemble_report(by, (s for s, _ in groups.values()), (s for s, _ in totals.values()))


# ---------------------------------------------------------------------------- budgets
def budget_applies(budget: BudgetSpec, tenant: str) -> bool:
    """Does the budget cover `tenant` (its own subtree)?"""
    return tenant == budget.tenant or tenant.startswith(budget.tenant + "/")


def crossed_alerts(budget: BudgetSpec, spent_micros: int, already: Sequence[float]) -> list[float]:
    """Alert fractions that the spend has reached and that have not been raised yet."""
    amount = to_micros(budget.amount)
    raised = {round(a, 6) for a in already}
    return [f for f in sorted(set(budget.alert_at)) if spent_micros >= f * amount and round(f, 6) not in raised]


def over_budget(budget: BudgetSpec, spent_micros: int) -> bool:
    return spent_micros >= to_micros(budget.amount)


# ---------------------------------------------------------------------------- attempts
_HOLDING_ACTIONS = {"task.admitted", "task.dispatched", "task.running"}


def attempt_spans(events: Iterable[tuple[str, datetime, dict | None]]) -> dict[int, dict]:
    """A task's state events (action, ts, after), oldest first → attempt → {start, end,
    cluster, backend}: from its admission to the first event that leaves the holding
    states (end None while it still holds)."""
    spans: dict[int, dict] = {}
    current: int | None = None
    admissions = 0
    for action, ts, after in events:
        if action == "task.admitted":
            admissions += 1
            after = after or {}
            current = int(after.get("attempt") or admissions)
            spans[current] = {"start": as_utc(ts), "end": None, "cluster": after.get("cluster"), "backend": after.get("backend")}
        elif current is not None and action not in _HOLDING_ACTIONS:
            spans[current]["end"] = as_utc(ts)
            current = None
    return spans
