"""The audit trail: read and export with filters, verify the hash chain."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from hetpool.server.deps import get_ctx, get_principal, requires
from hetpool.server.schemas.bodies import AuditVerifyResponse
from hetpool.server.services import audit as audit_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1/audit", tags=["audit"], dependencies=[Depends(requires("audit.read"))])  # platform-admin, auditor


def event_filter(
    object_id: str | None = Query(default=None, max_length=200),
    object_kind: str | None = Query(default=None, max_length=32),
    actor: str | None = Query(default=None, max_length=64),
    action: str | None = Query(default=None, max_length=64, description="exact, or a prefix ending in '*' (task.reclaim*)"),
    since: str | None = Query(default=None, max_length=64, description="ISO time (UTC if no zone) or a duration back from now (2h)"),
    until: str | None = Query(default=None, max_length=64, description="ISO time or a duration back from now; exclusive"),
    ctx: ServiceContext = Depends(get_ctx),
) -> audit_service.EventFilter:
    now = ctx.clock.now()
    return audit_service.EventFilter(
        actor=actor,
        object_kind=object_kind,
        object_id=object_id,
        action=action,
        since=audit_service.parse_time(since, now, "since"),
        until=audit_service.parse_time(until, now, "until"),
    )


@router.get("", summary="Audit events, oldest first")
def list_events(
    after_id: int = Query(default=0, ge=0),
    limit: int = Query(default=500, ge=1, le=5000),
    flt: audit_service.EventFilter = Depends(event_filter),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> list[dict]:
    with ctx.db.transaction() as session:
        return audit_service.list_events(session, flt, after_id=after_id, limit=limit)


_MEDIA = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8"}


@router.get("/export", summary="Every matching event as JSON lines or CSV (streamed)")
def export(
    format: Literal["jsonl", "csv"] = Query(default="jsonl"),
    flt: audit_service.EventFilter = Depends(event_filter),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> StreamingResponse:
    headers = {"Content-Disposition": f'attachment; filename="hetpool-audit.{format}"'}
    return StreamingResponse(audit_service.export_lines(ctx.db, flt, format), media_type=_MEDIA[format], headers=headers)


@router.get("/verify", response_model=AuditVerifyResponse, summary="Check the hash chain")
def verify(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        broken = audit_service.verify(session)
        total = audit_service.count(session)
    if broken is None:
        return {"ok": True, "events": total}
    return {"ok": False, "events": total, "first_bad_event": broken.event_id, "problem": broken.problem}
