"""Inventory objects: apply (atomic, several kinds at once), list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse

from hetpool.core.errors import ConflictError, NotFoundError, SpecError
from hetpool.core.specs import parse_documents, resolve_kind
from hetpool.governance.access import write_action
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.routers.tasks import doc_tenant
from hetpool.server.schemas.common import ERROR_RESPONSES, Document
from hetpool.server.schemas.inventory import ApplyRequest, ApplyResponse, HeldChange, PoolProfile
from hetpool.server.services import access
from hetpool.server.services import approvals as approval_service
from hetpool.server.services import inventory as inventory_service
from hetpool.server.services import tasks as task_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.profiles import pool_profile as build_profile

router = APIRouter(prefix="/api/v1", tags=["inventory"], responses=ERROR_RESPONSES)


def require_write(user: Principal, inv: inventory_service.Inventory | None, kind: str, name: str, tenant: str | None = None) -> None:
    """Applying or deleting shapes the shared platform (inventory.write, platform-admin);
    Quotas (quota.write) and Budgets (budget.write) are checked on their tenant, both the
    new one and the one the object has now, so an object cannot be moved out of or into
    a subtree the user does not administer. (Quota changes may then wait for approval.)
    `tenant` is None for a delete."""
    action, field = write_action(kind)
    if action == "inventory.write":
        access.require(user, action)
        return
    existing = inv.by_kind(kind).get(name) if inv is not None else None
    if existing is not None and not access.sees_object(user, kind, existing):
        # Another tenant's object: deleting it answers as for a name that does not exist;
        # applying over its name is refused without saying whose it is.
        if tenant is None:
            raise NotFoundError(f"{kind} {name!r} not found")
        raise ConflictError(f"{kind} {name!r}: the name is taken by an object you may not change; choose another name")
    for scope in {tenant, getattr(existing, field, None) if existing is not None else None} - {None}:
        access.require(user, action, scope)
    if tenant is None and existing is None:
        access.require(user, action)


@router.post("/apply", response_model=ApplyResponse, summary="Create or update objects; all or nothing")
def apply(body: ApplyRequest, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    sources = body.sources or []
    if sources and len(sources) != len(body.documents):
        raise SpecError("sources: must have one entry per document")
    labelled = [(sources[i] if sources else f"document {i + 1}", doc) for i, doc in enumerate(body.documents)]
    task_docs = [(where, doc) for where, doc in labelled if isinstance(doc, dict) and doc.get("kind") == "Task"]
    specs = parse_documents([item for item in labelled if item not in task_docs])
    for _where, doc in task_docs:
        access.require(user, "task.submit", doc_tenant(doc))
    scoped = [s for s in specs if write_action(s.kind)[1] is not None]  # Quota, Budget: checked per tenant below
    if len(scoped) < len(specs):
        access.require(user, "inventory.write")
    with ctx.db.transaction() as session:
        inv = inventory_service.load_inventory(ctx, session) if scoped else None
        for spec in scoped:
            require_write(user, inv, spec.kind, spec.name, getattr(spec, write_action(spec.kind)[1]))
        specs, held = approval_service.hold_governed_changes(ctx, session, specs, user)  # changes a policy holds for approval
        results = inventory_service.apply_specs(ctx, session, specs, user.name) + held
        for _where, doc in task_docs:
            row = task_service.submit(ctx, session, {k: v for k, v in doc.items() if k != "kind"}, user.name)
            results.append({"kind": "Task", "name": row.name, "action": "submitted", "id": row.id})
    return {"results": results}


@router.get(
    "/objects/{kind}", response_model=list[Document], summary="List objects of a kind (clusters, nodes, pools, tenants, templates, devicemodels)"
)
def list_objects(kind: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    access.require(user, "inventory.read")
    resolved = resolve_kind(kind)
    with ctx.db.transaction() as session:
        return [doc for doc in inventory_service.list_objects(ctx, session, kind) if access.sees_object(user, resolved, doc)]


@router.get("/objects/{kind}/{name:path}", response_model=Document, summary="One object")
def get_object(kind: str, name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    access.require(user, "inventory.read")
    resolved = resolve_kind(kind)
    with ctx.db.transaction() as session:
        document = inventory_service.get_object(ctx, session, kind, name)
    if not access.sees_object(user, resolved, document):
        raise NotFoundError(f"{resolved} {name!r} not found")  # as for a name that does not exist
    return document


@router.delete(
    "/objects/{kind}/{name:path}",
    status_code=204,
    summary="Delete an object that nothing uses; 202 with the request when an approval policy holds the delete",
    responses={202: {"model": HeldChange, "description": "held for approval: the approval request to follow"}},
)
def delete_object(kind: str, name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> Response:
    resolved = resolve_kind(kind)
    with ctx.db.transaction() as session:
        writes_inventory = write_action(resolved)[0] == "inventory.write"
        require_write(user, None if writes_inventory else inventory_service.load_inventory(ctx, session), resolved, name)
        held = approval_service.hold_delete(ctx, session, resolved, name, user)  # deleting loosens: a policy may hold it
        if held is None:
            inventory_service.delete_object(ctx, session, kind, name, user.name)
    return Response(status_code=204) if held is None else JSONResponse(held, status_code=202)


@router.get(
    "/pools/{name}/profile",
    response_model=PoolProfile,
    summary="A pool's capability profile: features, device counts by status, task types, frameworks, substitutes",
)
def pool_profile(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    access.require(user, "inventory.read")
    with ctx.db.transaction() as session:
        return build_profile(ctx, session, name)
