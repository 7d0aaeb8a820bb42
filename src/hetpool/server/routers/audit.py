"""The audit trail: read and export with filters, verify the hash chain and its checkpoints,
take a checkpoint (platform-admin and auditor: it attests what is there, changes nothing)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from hetpool.server.deps import get_ctx, get_principal, requires
from hetpool.server.routers.params import AfterId
from hetpool.server.schemas.audit import AnchoredVerifyResponse, AuditEvent, CheckpointResponse
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.services import audit as audit_service
from hetpool.server.services import audit_anchor
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(
    prefix="/api/v1/audit", tags=["audit"], dependencies=[Depends(requires("audit.read"))], responses=ERROR_RESPONSES
)  # platform-admin, auditor


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


@router.get("", response_model=list[AuditEvent], summary="Audit events, oldest first")
def list_events(
    after_id: AfterId = 0,
    limit: int = Query(default=500, ge=1, le=5000),
    flt: audit_service.EventFilter = Depends(event_filter),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> list[dict]:
    with ctx.db.transaction() as session:
        return audit_service.list_events(session, flt, after_id=after_id, limit=limit)


_MEDIA = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8"}


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"description": "JSON lines or CSV", "content": {m.split(";")[0]: {"schema": {"type": "string"}} for m in _MEDIA.values()}}},
    summary="Every matching event as JSON lines or CSV (streamed)",
)
def export(
    format: Literal["jsonl", "csv"] = Query(default="jsonl"),
    flt: audit_service.EventFilter = Depends(event_filter),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> StreamingResponse:
    headers = {"Content-Disposition": f'attachment; filename="hetpool-audit.{format}"'}
    return StreamingResponse(audit_service.export_lines(ctx.db, flt, format), media_type=_MEDIA[format], headers=headers)


@router.get("/verify", response_model=AnchoredVerifyResponse, summary="Check the hash chain and the checkpoints")
def verify(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    # Checkpoints first: every one read was taken of a head the trail read next must contain.
    checkpoints, problem = ctx.audit_anchor.read()
    with ctx.db.transaction() as session:
        return audit_anchor.verify(session, checkpoints, problem, key=ctx.audit_anchor.key, now=ctx.clock.now())


@router.post("/checkpoints", response_model=CheckpointResponse, summary="Checkpoint the chain head now (409 if the trail broke since the last one)")
def checkpoint(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    result = ctx.audit_anchor.checkpoint(ctx.db, ctx.clock.now())
    cp = result.checkpoint
    info = {"seq": cp.seq, "ts": cp.ts, "event_id": cp.event_id, "event_hash": cp.event_hash, "events": cp.events}
    return {**info, "written": result.written, "file": str(ctx.audit_anchor.checkpoint_file)}
