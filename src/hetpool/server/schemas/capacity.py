"""Bodies of the capacity what-if (services/capacity_whatif.py)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from hetpool.core.limits import MAX_QUOTA_AMOUNT, bounded
from hetpool.server.schemas.common import ApiModel, Number, RequestModel


class ChangeIn(RequestModel):
    count: int = Field(ge=1, le=4096, description="devices")
    model: str = Field(min_length=1, max_length=100, description="device model id, display name or alias (GET /api/v1/objects/devicemodels)")


class WhatIfIn(RequestModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    days: float = Field(default=30, gt=0, le=3650, description="replay the finished tasks of this many days back")
    add: list[ChangeIn] = Field(default_factory=list, max_length=16, description="devices to add, e.g. {count: 16, model: ascend-910b2}")
    remove: list[ChangeIn] = Field(default_factory=list, max_length=16, description="devices to remove (whole nodes, at least count devices)")
    quotas: dict[str, bounded(0, le=MAX_QUOTA_AMOUNT)] | None = Field(
        default=None, max_length=64, description="team → devices; flags teams demanding more on average"
    )
    wait_target_hours: float = Field(default=1.0, gt=0, le=8760, description="a pool whose p90 wait exceeds it is saturated")
    idle_below: float = Field(default=0.3, ge=0, le=1, description="utilisation under which a pool is idle")


class WhatIfHistory(ApiModel):
    days: Number
    since: str
    finished_tasks: int
    replayed_tasks: int
    truncated: bool = Field(description="more tasks finished than are replayed (the newest max_tasks are)")
    max_tasks: int


class WhatIfResponse(ApiModel):
    history: WhatIfHistory
    changes: Any = Field(description="the devices added and removed, as applied")
    totals: dict[str, dict[str, Any]] = Field(description="baseline and changed: tasks, waits, JCT, utilisation, cost")
    pools: Any = Field(description="per pool, baseline and changed")
    cost_per_team: Any
    delta: Any = Field(description="changed minus baseline")
    recommendations: Any
    baseline: Any = Field(description="the simulator's full summary of today's inventory")
    changed: Any = Field(description="the simulator's full summary of the changed inventory")
    settings: dict[str, Any]
    elapsed_s: Number
