"""Bodies of quota usage (governance/quota.py computes it)."""

from __future__ import annotations

from hetpool.server.schemas.common import ApiModel, Number


class QuotaUsage(ApiModel):
    quota: str
    tenant: str
    env: str | None
    type: str | None
    resource: str
    nominal: Number
    borrowing_limit: Number | None
    lending_limit: Number | None
    used: Number
    borrowed: Number
    lent: Number
    headroom: Number
