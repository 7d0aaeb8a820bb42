"""Bodies of liveness, readiness and leadership (GET /healthz, /readyz, /api/v1/leader)."""

from __future__ import annotations

from pydantic import Field

from hetpool.server.schemas.common import ApiModel


class HealthResponse(ApiModel):
    ok: bool
    version: str
    database: str = Field(description="sqlite or postgresql")


class ReadyResponse(ApiModel):
    ready: bool
    leader: bool = Field(description="this replica runs the scheduling workers now")
    database: str
    revisions: list[str] = Field(description="the database's migration heads")
    reason: str | None = Field(default=None, description="only when not ready: why")


class LeaseView(ApiModel):
    group: str
    holder: str | None = Field(description="the replica leading now; null when the lease has lapsed")
    since: str | None
    token: int = Field(description="fencing token: grows with each new holder")
    renewed_at: str | None
    expires_at: str | None
    last_holder: str | None


class ReplicaLease(ApiModel):
    holder: str
    leader: bool


class LeaderResponse(ApiModel):
    groups: list[LeaseView]
    this_replica: dict[str, ReplicaLease] = Field(description="the lease groups this replica takes part in")
