"""Bodies of cost reports, the usage ledger and budget status (services/cost.py)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hetpool.server.schemas.common import ApiModel, Number


class _PeriodBody(ApiModel):
    period: str = Field(description="'2026-11', '2026-W48', '2026-11-30' or '2026'")
    kind: str = Field(description="month, week, day or year")
    start: str
    end: str
    tenant: str | None


class CostReport(_PeriodBody):
    by: str = Field(description="the grouping dimension")
    currency: str | None = Field(description="the one currency of the report, null when several")
    groups: list[dict[str, Any]] = Field(description="per group: key, currency, device hours, CPU and memory hours, cost")
    total: dict[str, Any] | None = Field(description="the total when there is one currency")
    totals: dict[str, dict[str, Any]] = Field(description="total per currency")


class LedgerRow(ApiModel):
    id: int
    task_id: str
    attempt: int
    rank: int
    day: str
    interval_start: str
    interval_end: str
    tenant: str
    org: str | None
    team: str | None
    project: str | None
    env: str | None
    type: str | None
    pool: str | None
    cluster: str | None
    backend: str | None
    model: str | None
    node: str | None
    devices: Number
    cpu: Number
    memory_gb: Number
    seconds: Number
    device_hours: Number
    cpu_core_hours: Number
    memory_gib_hours: Number
    cost: Number
    cost_micros: int
    currency: str


class Ledger(_PeriodBody):
    count: int = Field(description="all matching rows, not only this page")
    cost_by_currency: dict[str, Number]
    offset: int
    rows: list[LedgerRow]


class BudgetAlert(ApiModel):
    threshold: Number
    spent: Number
    raised_at: str


class BudgetStatus(ApiModel):
    name: str
    tenant: str
    period: str
    period_start: str | None
    period_end: str | None
    amount: Number
    currency: str
    spent: Number
    spent_micros: int
    fraction: Number
    exceeded: bool
    hard_stop: bool
    alert_at: list[Number]
    alerts: list[BudgetAlert]
    invalid: str | None = Field(default=None, description="only on a stored budget that no longer validates: why it counts nothing")
