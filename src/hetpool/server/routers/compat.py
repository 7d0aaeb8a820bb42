"""The compatibility tables: check a device + stack + framework without a pool, the
matrices (`hetpool compat matrix`), and the rows with their sources. Read-only and
inventory.read: the rows are the same for every tenant, and operators change them with
CompatibilityRule objects (inventory.write) or table files, never through these."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.compat_data import TABLES
from hetpool.catalog.compat_matrix import device_matrix, framework_matrix, parse_framework
from hetpool.core.errors import SpecError
from hetpool.server.deps import get_ctx, requires
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.compat import CompatCheckQuery, CompatCheckResponse, CompatMatrixResponse, CompatRowResponse
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory

router = APIRouter(prefix="/api/v1/compat", tags=["compat"], responses=ERROR_RESPONSES)


def _inventory(ctx: ServiceContext):
    with ctx.db.transaction() as session:
        return load_inventory(ctx, session)  # also brings ctx.compat up to the applied rules


@router.post(
    "/check",
    response_model=CompatCheckResponse,
    dependencies=[Depends(requires("inventory.read"))],
    summary="Can device D with stack S run framework F?",
)
def compat_check(query: CompatCheckQuery, ctx: ServiceContext = Depends(get_ctx)) -> dict:
    inv = _inventory(ctx)
    verdict = ctx.compat.check(inv.catalog.get(query.device), query.stack, query.framework, has_image=query.has_image)
    return {
        "status": verdict.status,
        "ok": verdict.ok,
        "reason": verdict.reason,
        "detail": verdict.detail,
        "notes": list(verdict.notes),
        "rows": list(verdict.rows),
        "nearest": list(verdict.nearest),
        "policy": ctx.compat.unknown_policy,
        "kb_version": ctx.compat.version,
    }


@router.get(
    "/matrix",
    response_model=CompatMatrixResponse,
    dependencies=[Depends(requires("inventory.read"))],
    summary="What a device model can run per runtime release, or which models run a framework version",
)
def compat_matrix(
    ctx: ServiceContext = Depends(get_ctx),
    device: str | None = Query(default=None, max_length=256, description="a device model"),
    framework: str | None = Query(default=None, max_length=256, description="e.g. pytorch==2.8"),
) -> dict:
    if bool(device) == bool(framework):
        raise SpecError("give exactly one of device or framework", details=[{"loc": "query", "msg": "give exactly one of device or framework"}])
    inv = _inventory(ctx)
    kb = ctx.compat
    if device:
        rows = device_matrix(kb, inv.catalog.get(device))
        by_runtime = [{"runtime": r.runtime.label, "supported": r.supported, "why_not": r.why_not, "frameworks": r.frameworks} for r in rows]
        return {"device": device, "by_runtime": by_runtime, "kb_version": kb.version}
    request = kb.as_request(parse_framework(framework))
    if kb.canonical_framework(request.name) is None:
        raise SpecError(f"framework: unknown framework {request.name!r}; known: {', '.join(kb.framework_names())}")
    models = [m for m in inv.catalog.all() if m.runtime.value != "none"]
    rows = framework_matrix(kb, models, request)
    by_device = [{"device": r.model, "runtime": r.family, "status": r.status, "releases": r.releases, "detail": r.detail} for r in rows]
    return {"framework": framework, "by_device": by_device, "kb_version": kb.version}


@router.get(
    "/rows",
    response_model=list[CompatRowResponse],
    dependencies=[Depends(requires("inventory.read"))],
    summary="The rows of the tables, with sources",
)
def compat_rows(
    ctx: ServiceContext = Depends(get_ctx),
    table: str | None = Query(default=None, max_length=64, description=f"one of: {', '.join(sorted(TABLES))}"),
    origin: str | None = Query(default=None, max_length=256, description="'built-in', or only rows from this CompatibilityRule / file"),
) -> list[dict]:
    if table is not None and table not in TABLES:
        raise SpecError(f"table: unknown table {table!r} (allowed: {', '.join(sorted(TABLES))})")
    _inventory(ctx)
    rows = ctx.compat.tables.rows(table) if table else ctx.compat.tables.all_rows()
    if origin == "built-in":
        rows = [r for r in rows if r.builtin]
    elif origin:
        rows = [r for r in rows if r.origin == origin]
    builtin = CompatibilityKB.builtin().tables

    def replaced(row) -> list[str]:
        return [] if row.builtin else [b.cite() for b in builtin.rows(row.table) if b.key == row.key]

    return [
        {
            "replaces": replaced(r),
            "table": r.table,
            "values": dict(r.values),
            "source": r.source,
            "checked": r.checked,
            "verified": r.verified,
            "note": r.note,
            "origin": r.origin,
        }
        for r in rows
    ]
