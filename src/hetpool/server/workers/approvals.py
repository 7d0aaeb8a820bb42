"""Expiry worker: pending approval requests past their deadline expire and their tasks are
cancelled; requests whose task was cancelled meanwhile are closed."""

from __future__ import annotations

from hetpool.server.services import approvals as approval_service
from hetpool.server.services.context import ServiceContext


def expire_approvals(ctx: ServiceContext) -> int:
    with ctx.db.transaction() as session:
        return approval_service.expire_due(ctx, session)
