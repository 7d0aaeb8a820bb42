"""The audit trail: read with filters, verify the hash chain."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from hetpool.server.db.models import AuditEventRow
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.bodies import AuditVerifyResponse
from hetpool.server.services import audit as audit_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1/audit", tags=["audit"])


@router.get("", summary="Audit events, oldest first")
def list_events(
    object_id: str | None = Query(default=None, max_length=200),
    actor: str | None = Query(default=None, max_length=64),
    action: str | None = Query(default=None, max_length=64),
    after_id: int = Query(default=0, ge=0),
    limit: int = Query(default=500, ge=1, le=5000),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> list[dict]:
    stmt = select(AuditEventRow).where(AuditEventRow.id > after_id).order_by(AuditEventRow.id).limit(limit)
    if object_id:
        stmt = stmt.where(AuditEventRow.object_id == object_id)
    if actor:
        stmt = stmt.where(AuditEventRow.actor == actor)
    if action:
        stmt = stmt.where(AuditEventRow.action == action)
    with ctx.db.transaction() as session:
        return [audit_service.event_dict(e) for e in session.execute(stmt).scalars()]


@router.get("/verify", response_model=AuditVerifyResponse, summary="Check the hash chain")
def verify(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        broken = audit_service.verify(session)
        total = audit_service.count(session)
    if broken is None:
        return {"ok": True, "events": total}
    return {"ok": False, "events": total, "first_bad_event": broken.event_id, "problem": broken.problem}
