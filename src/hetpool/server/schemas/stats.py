"""Bodies of the dashboards' aggregates (services/stats.py defines the numbers)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hetpool.server.schemas.common import ApiModel, Number


class CapacityStats(ApiModel):
    now: str
    pools: list[dict[str, Any]] = Field(description="per pool: devices total, busy, idle, abnormal, offline")
    classes: list[dict[str, Any]] = Field(description="the same per device class")
    totals: dict[str, Number] = Field(description="all devices by status, and utilisation")
    nodes: dict[str, Any] = Field(description="total, and the nodes needing attention")
    backends: Any = Field(description="each backend's health")


class WorkloadStats(ApiModel):
    now: str
    window: str
    scoped: bool = Field(description="counts only the caller's tenants")
    states: dict[str, int] = Field(description="tasks per state")
    waiting: int
    pending_approval: int
    queues: dict[str, Any] = Field(description="queue lengths and p50/p90 waits by pool, task type and queue")
    longest_waiting: list[dict[str, Any]]
    deadlines_at_risk: list[dict[str, Any]] = Field(
        default=[], description="unfinished tasks whose deadline cannot be met, earliest deadline first: id, name, tenant, state, deadline, late_s"
    )
    utilisation: dict[str, Any] = Field(description="per pool and class over 24h and 7d, and the last 24 hours hourly")
