"""Tenants & quotas (/tenants): the tenant tree, indented, with per quota and resource the
nominal amount, use (bar), borrowed, lent, headroom and the borrowing / lending limits.

Reads GET /api/v1/objects/tenants (the tree) and GET /api/v1/quotas/usage (which the API
scopes to the quotas in or above the caller's subtrees). The tree is narrowed to the same
subtrees (plus their ancestors, whose quotas count them too), so a tenant user sees its
own part of the organisation, not its siblings'.

Ids and data-attributes for browser tests:
  form#tenants-filter          GET filter, field `tenant` (a subtree)
  section#tenant-quotas        live (every 5 s)
  #tenant-cards                summary cards (.card[data-card=tenants|quotas|borrowing|lending|full])
  #tenant-tree                 the table; one tr.tenant-row[data-tenant=<path>][data-depth=<n>]
                               per tenant, then one tr.quota-row[data-tenant][data-quota][data-resource]
                               per quota limit with td.nominal/.used/.borrowed/.lent/.headroom/
                               .borrowing-limit/.lending-limit and .bar[data-used-pct]
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from hetpool.server.schemas.inventory import ObjectList
from hetpool.server.schemas.quotas import QuotaUsage
from hetpool.web.i18n import Translator
from hetpool.web.labels import label
from hetpool.web.render import render, translator_for
from hetpool.web.session import ApiError, Viewer, viewer

router = APIRouter()

CLASSES = ("gpu", "npu", "dpu", "cpu")


@router.get("/tenants", response_class=HTMLResponse)
async def tenants_page(request: Request, tenant: str = "", fragment: str = "") -> HTMLResponse:
    user = await viewer(request)
    tenant = tenant.strip()
    context = await _load(user, tenant)
    tr = translator_for(request, user)
    context.update(tenant=tenant, num=number, resource_label=lambda resource: resource_label(tr, resource))
    if fragment == "tenant-quotas":
        return render(request, "tenants_quotas.html", user, active="/tenants", **context)
    return render(request, "tenants.html", user, **context)


async def _load(user: Viewer, focus: str) -> dict:
    usage = await user.api.get_as(list[QuotaUsage], "/api/v1/quotas/usage")
    inventory_readable = True
    try:
        specs = await user.api.get_as(ObjectList, "/api/v1/objects/tenants")
    except ApiError as exc:
        if exc.status != 403:
            raise
        specs, inventory_readable = [], False  # e.g. an auditor: show the tenants the quotas name
    scopes = user.actions.get("task.read")
    known = {s["name"]: s for s in specs if _visible(s["name"], scopes)}
    for row in usage:
        known.setdefault(row.tenant, {"name": row.tenant, "display_name": "", "weight": None})
    choices = sorted(known)
    if focus:
        # The subtree and the ancestors above it, whose quotas also count its use.
        known = {name: s for name, s in known.items() if _covers(focus, name) or _covers(name, focus)}
        usage = [r for r in usage if _covers(focus, r.tenant) or _covers(r.tenant, focus)]
    return {
        "tree": _tree(known, usage),
        "choices": choices,
        "cards": _cards(known, usage),
        "inventory_readable": inventory_readable,
        "scoped": scopes != "*",
    }


def _covers(root: str, tenant: str) -> bool:
    return tenant == root or tenant.startswith(root + "/")


def _visible(name: str, scopes) -> bool:
    """In one of the caller's subtrees, or above one (an ancestor gives the tree its shape)."""
    if scopes == "*":
        return True
    return any(_covers(scope, name) or _covers(name, scope) for scope in scopes or [])


def _tree(tenants: dict[str, dict], usage: list[QuotaUsage]) -> list[dict]:
    """Tenants depth first (children under their parent, by name), each with its own
    quota rows and, when it has none, the ancestors whose quotas count it."""
    by_tenant: dict[str, list[dict]] = {}
    for row in usage:
        by_tenant.setdefault(row.tenant, []).append(_with_bar(row))
    nodes = []
    for name in sorted(tenants, key=lambda n: n.split("/")):
        spec = tenants[name]
        ancestors = ["/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1)]
        nodes.append(
            {
                "name": name,
                "leaf": name.rsplit("/", 1)[-1],
                "depth": name.count("/"),
                "display_name": spec.get("display_name") or "",
                "weight": spec.get("weight"),
                "quotas": sorted(by_tenant.get(name, []), key=lambda r: (r["quota"], r["resource"])),
                "within": [a for a in ancestors if a in by_tenant],
            }
        )
    return nodes


def _with_bar(row: QuotaUsage) -> dict:
    """Bar widths on a scale of max(nominal, used): use within nominal, then the borrowed part."""
    nominal, used, borrowed = float(row.nominal), float(row.used), float(row.borrowed)
    scale = max(nominal, used) or 1.0
    within = min(used, nominal)
    return {
        **row.model_dump(),
        "used_pct": round(100 * used / nominal, 1) if nominal else (100.0 if used else 0.0),
        "bar_within_pct": round(100 * within / scale, 2),
        "bar_borrowed_pct": round(100 * borrowed / scale, 2),
    }


def _cards(tenants: dict[str, dict], usage: list[QuotaUsage]) -> dict[str, int]:
    return {
        "tenants": len(tenants),
        "quotas": len({r.quota for r in usage}),
        "borrowing": sum(1 for r in usage if r.borrowed > 0),
        "lending": sum(1 for r in usage if r.lent > 0),
        "full": sum(1 for r in usage if r.headroom <= 0),
    }


def resource_label(tr: Translator, resource: str) -> str:
    """A device class (gpu → GPU), a named unit (cpu-cores → CPU cores), else the model or pool name."""
    if resource in CLASSES:
        return label(tr, "device_class", resource)
    return label(tr, "quota_resource", resource)


def number(value: float | int | None) -> str:
    """4.0 → 4, 0.5 → 0.5, 1234.5678 → 1234.57; None → '-'."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")
