"""Read-only aggregate views of the estate (the dashboard's Resources page)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query

from hetpool.core.inventory import DeviceClass
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.resources import ResourceTree
from hetpool.server.services import access
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.resources_view import TreeFilters, resource_tree

router = APIRouter(prefix="/api/v1/resources", tags=["resources"], responses=ERROR_RESPONSES)

StatusFilter = Literal["idle", "busy", "abnormal", "offline", "ready", "draining", "drained", "down", "unknown"]


@router.get("/tree", response_model=ResourceTree, summary="Clusters → nodes → devices with capability profiles and status; filterable")
def tree(
    device_class: DeviceClass | None = Query(default=None, alias="class", description="gpu, npu, dpu or cpu"),
    model: str | None = Query(default=None, max_length=200, description="a catalog device model"),
    cluster: str | None = Query(default=None, max_length=200),
    status: StatusFilter | None = Query(default=None, description="a node state, or a device status some device of the node is in"),
    framework: str | None = Query(default=None, max_length=100, description="framework the installed stack must run: 'torch>=2.3', 'mindspore'"),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    # The inventory is shared by every tenant: the same rule as /objects and /nodes/status.
    access.require(user, "inventory.read")
    filters = TreeFilters(
        device_class=device_class.value if device_class else None,
        model=model or None,
        cluster=cluster or None,
        status=status,
        framework=(framework or "").strip() or None,
    )
    with ctx.db.transaction() as session:
        return resource_tree(ctx, session, filters)
