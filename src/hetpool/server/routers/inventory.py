"""Inventory objects: apply (atomic, several kinds at once), list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from hetpool.core.errors import SpecError
from hetpool.core.specs import parse_documents, resolve_kind
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.bodies import ApplyRequest, ApplyResponse
from hetpool.server.services import inventory as inventory_service
from hetpool.server.services import tasks as task_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1", tags=["inventory"])


@router.post("/apply", response_model=ApplyResponse, summary="Create or update objects; all or nothing")
def apply(body: ApplyRequest, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    sources = body.sources or []
    if sources and len(sources) != len(body.documents):
        raise SpecError("sources: must have one entry per document")
    labelled = [(sources[i] if sources else f"document {i + 1}", doc) for i, doc in enumerate(body.documents)]
    task_docs = [(where, doc) for where, doc in labelled if isinstance(doc, dict) and doc.get("kind") == "Task"]
    specs = parse_documents([item for item in labelled if item not in task_docs])
    with ctx.db.transaction() as session:
        results = inventory_service.apply_specs(ctx, session, specs, user.name)
        for _where, doc in task_docs:
            row = task_service.submit(ctx, session, {k: v for k, v in doc.items() if k != "kind"}, user.name)
            results.append({"kind": "Task", "name": row.name, "action": "submitted", "id": row.id})
    return {"results": results}


@router.get("/objects/{kind}", summary="List objects of a kind (clusters, nodes, pools, tenants, templates, devicemodels)")
def list_objects(kind: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    with ctx.db.transaction() as session:
        return inventory_service.list_objects(ctx, session, kind)


@router.get("/objects/{kind}/{name:path}", summary="One object")
def get_object(kind: str, name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return inventory_service.get_object(ctx, session, kind, name)


@router.delete("/objects/{kind}/{name:path}", status_code=204, summary="Delete an object that nothing uses")
def delete_object(kind: str, name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> Response:
    resolve_kind(kind)
    with ctx.db.transaction() as session:
        inventory_service.delete_object(ctx, session, kind, name, user.name)
    return Response(status_code=204)


@router.get("/pools/{name}/profile", summary="A pool's capability profile: features, device counts by status, task types, frameworks, substitutes")
def pool_profile(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    from hetpool.server.services.profiles import pool_profile as build_profile

    with ctx.db.transaction() as session:
        return build_profile(ctx, session, name)
