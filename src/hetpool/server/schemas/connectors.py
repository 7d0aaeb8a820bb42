"""Bodies of the inventory connectors' syncs."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hetpool.server.schemas.common import ApiModel


class ConnectorSync(ApiModel):
    """A cluster's last sync."""

    cluster: str
    connector: str
    ok: bool
    error: str | None
    last_attempt_at: str
    last_success_at: str | None
    summary: dict[str, Any] | None = Field(description="what the sync saw and changed (as SyncResult)")


class SyncResult(ApiModel):
    connector: str
    sees: list[str] = Field(description="what the engine showed (nodes, partitions, …)")
    nodes: int
    states: dict[str, int] = Field(description="nodes per state")
    devices: dict[str, Any]
    changes: list[dict[str, Any]] = Field(description="objects created or configured")
    removed: list[str]
    kept_down: list[str] = Field(description="gone from the engine, kept (down) until hetpool's work on them ends")
    warnings: list[str]
