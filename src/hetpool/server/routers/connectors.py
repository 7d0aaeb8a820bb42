"""Inventory connectors: sync a Slurm / Kubernetes / Ray cluster now, read the last sync."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy import select

from hetpool.core.errors import NotFoundError
from hetpool.server.db.models import ConnectorSyncRow
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.common import ENGINE_ERROR_RESPONSES, ERROR_RESPONSES
from hetpool.server.schemas.connectors import ConnectorSync, SyncResult
from hetpool.server.services import access, connector_sync
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1", tags=["connectors"], responses=ERROR_RESPONSES)


def _view(row: ConnectorSyncRow) -> dict:
    return {
        "cluster": row.cluster,
        "connector": row.connector,
        "ok": row.ok,
        "error": row.error,
        "last_attempt_at": row.last_attempt_at.isoformat(),
        "last_success_at": row.last_success_at.isoformat() if row.last_success_at else None,
        "summary": row.summary,
    }


@router.post(
    "/clusters/{name}/sync",
    response_model=SyncResult,
    responses=ENGINE_ERROR_RESPONSES,
    summary="Read the cluster's engine now and reconcile its nodes (502 if unreachable)",
)
def sync_now(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    access.require(user, "inventory.write")
    return connector_sync.sync_cluster(ctx, name)


@router.get("/clusters/{name}/sync", response_model=ConnectorSync, summary="The cluster's last sync: when, whether it worked, what changed")
def last_sync(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    access.require(user, "inventory.read")
    with ctx.db.transaction() as session:
        row = session.get(ConnectorSyncRow, name)
        if row is None:
            raise NotFoundError(f"cluster {name!r} has not been synced (is its backend slurm, kubernetes or ray?)")
        return _view(row)


@router.get("/connectors", response_model=list[ConnectorSync], summary="Last sync of every connector cluster")
def list_syncs(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    access.require(user, "inventory.read")
    with ctx.db.transaction() as session:
        return [_view(r) for r in session.execute(select(ConnectorSyncRow).order_by(ConnectorSyncRow.cluster)).scalars()]
