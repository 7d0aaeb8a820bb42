"""Cost (/cost): chargeback per team / project / environment / pool / … for a period, a bar
chart by group, a line of spend over the period's days (months for a year), the groups
table, budget status with exceeded budgets highlighted, and CSV exports.

Reads GET /api/v1/cost/report (groups and totals; its total is the ledger's), GET
/api/v1/cost/ledger (paged, for the daily line and the ledger export) and GET
/api/v1/budgets/status. A refused or malformed filter (unknown period, a tenant the user
may not read) shows the API's message above the filters instead of an error page.

Ids and data-attributes for browser tests:
  form#cost-filter             GET fields `by` (select), `period`, `tenant`
  #cost-error                  the API's refusal of the filters (data-status)
  #cost-period                 data-period, data-start, data-end of the report
  section#cost-summary         live (every 15 s): #cost-cards (.card[data-card=total|device_hours|…]),
                               #cost-by-group-chart (ECharts bar), #cost-table with rows
                               tr[data-group=<key>][data-currency] (td.cost, td.share, …) and tr.total
  #cost-by-day-chart           ECharts line of the period's days (or months)
  a#cost-export-csv            /cost/export.csv?by&period&tenant            (the groups)
  a#cost-export-ledger-csv     /cost/export.csv?…&rows=ledger                (the ledger rows)
  section#cost-budgets         live (every 15 s): #budgets-table rows tr[data-budget=<name>]
                               [data-exceeded=true|false] (class exceeded), #budgets-refused
CSV: `rows=groups` (default) columns GROUP_COLUMNS; `rows=ledger` columns LEDGER_COLUMNS;
costs are exact decimals of the ledger's micro-units.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import date, timedelta
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from hetpool.server.schemas.cost import BudgetStatus, CostReport, Ledger, LedgerRow
from hetpool.server.schemas.inventory import ObjectList
from hetpool.web.render import render, translator_for
from hetpool.web.session import ApiError, Viewer, viewer

router = APIRouter()

DIMENSIONS = ("team", "project", "tenant", "org", "env", "type", "pool", "cluster", "backend", "model")
LEDGER_PAGE = 10_000  # the API's largest page
CHART_MAX_ROWS = 50_000  # the daily line reads at most this much of the ledger per refresh
TOP_SERIES = 6  # lines for the largest groups; the rest is summed as "other"
GROUP_COLUMNS = ("period", "by", "group", "currency", "cost", "device_hours", "cpu_core_hours", "memory_gib_hours", "tasks", "rows")
LEDGER_COLUMNS = (
    "day",
    "task_id",
    "attempt",
    "rank",
    "tenant",
    "org",
    "team",
    "project",
    "env",
    "type",
    "pool",
    "cluster",
    "backend",
    "model",
    "node",
    "devices",
    "cpu",
    "memory_gb",
    "interval_start",
    "interval_end",
    "seconds",
    "device_hours",
    "cpu_core_hours",
    "memory_gib_hours",
    "cost",
    "currency",
)


@router.get("/cost", response_class=HTMLResponse)
async def cost_page(request: Request, by: str = "team", period: str = "", tenant: str = "", fragment: str = "") -> HTMLResponse:
    user = await viewer(request)
    filters = _filters(by, period, tenant)
    context: dict = {"filters": filters, "dimensions": DIMENSIONS, "qs": urlencode(filters), "money": money, "num": number}
    if fragment == "cost-budgets":
        context.update(await _budgets(user, filters["tenant"]))
        return render(request, "cost_budgets.html", user, active="/cost", **context)
    try:
        report = await user.api.get_as(CostReport, "/api/v1/cost/report", **filters)
    except ApiError as exc:
        if exc.status not in (403, 422):
            raise
        if fragment:
            return HTMLResponse("", status_code=204)  # keep what the page shows; the full page says why
        context.update(error=exc, tenants=await _tenant_choices(user))
        return render(request, "cost.html", user, status_code=exc.status, **context)
    context.update(_summary(report))
    if fragment == "cost-summary":
        return render(request, "cost_summary.html", user, active="/cost", **context)
    ledger = await _ledger_rows(user, filters, limit=CHART_MAX_ROWS)
    context.update(
        error=None,
        tenants=await _tenant_choices(user),
        daily_chart=_daily_chart(report, ledger["rows"], filters["by"], other_label=translator_for(request, user).gettext("other")),
        ledger_count=ledger["count"],
        ledger_read=len(ledger["rows"]),
        **await _budgets(user, filters["tenant"]),
    )
    return render(request, "cost.html", user, **context)


@router.get("/cost/export.csv")
async def export_csv(request: Request, by: str = "team", period: str = "", tenant: str = "", rows: str = "groups") -> Response:
    """The report's groups, or every ledger row of the period, as CSV (streamed page by page)."""
    user = await viewer(request)
    filters = _filters(by, period, tenant)
    report = await user.api.get_as(CostReport, "/api/v1/cost/report", **filters)  # refusals become the error page, before any byte is sent
    suffix = "-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", filters["tenant"]) if filters["tenant"] else ""
    if rows == "ledger":
        first = await user.api.get_as(Ledger, "/api/v1/cost/ledger", period=report.period, tenant=filters["tenant"], limit=LEDGER_PAGE)
        filename = f"hetpool-ledger-{report.period}{suffix}.csv"
        body = _ledger_csv(user, report.period, filters["tenant"], first)
    else:
        filename = f"hetpool-cost-{report.by}-{report.period}{suffix}.csv"
        body = _groups_csv(report)
    headers = {"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"}
    return StreamingResponse(body, media_type="text/csv; charset=utf-8", headers=headers)


# ----------------------------------------------------------------------------- reads
def _filters(by: str, period: str, tenant: str) -> dict[str, str]:
    return {"by": by.strip() or "team", "period": period.strip(), "tenant": tenant.strip()}


async def _ledger_rows(user: Viewer, filters: dict[str, str], *, limit: int) -> dict:
    """Ledger rows of the period, page after page, up to `limit` rows."""
    rows: list[LedgerRow] = []
    count = 0
    while len(rows) < limit:
        page = await user.api.get_as(
            Ledger,
            "/api/v1/cost/ledger",
            period=filters["period"],
            tenant=filters["tenant"],
            limit=min(LEDGER_PAGE, limit - len(rows)),
            offset=len(rows),
        )
        count = page.count
        rows.extend(page.rows)
        if not page.rows or len(rows) >= count:
            break
    return {"rows": rows, "count": count}


async def _budgets(user: Viewer, tenant: str) -> dict:
    try:
        budgets = await user.api.get_as(list[BudgetStatus], "/api/v1/budgets/status", tenant=tenant)
    except ApiError as exc:
        if exc.status not in (403, 404, 422):
            raise
        return {"budgets": [], "budgets_error": exc}
    return {"budgets": budgets, "budgets_error": None}


async def _tenant_choices(user: Viewer) -> list[str]:
    """Tenants the user may read cost of, for the filter's suggestions (none without inventory.read)."""
    try:
        specs = await user.api.get_as(ObjectList, "/api/v1/objects/tenants")
    except ApiError:
        return []
    scopes = user.actions.get("cost.read")
    names = sorted(s["name"] for s in specs)
    if scopes == "*":
        return names
    return [n for n in names if any(n == s or n.startswith(s + "/") for s in scopes or [])]


# -------------------------------------------------------------------------- shaping
def _summary(report: CostReport) -> dict:
    """Cards, the bar chart and the table rows of a report (groups per currency when mixed)."""
    totals = report.totals
    groups = []
    for g in report.groups:
        whole = totals.get(g["currency"], {}).get("cost_micros") or 0
        groups.append({**g, "share": round(100 * g["cost_micros"] / whole, 1) if whole else 0.0})
    keys = list(dict.fromkeys(g["key"] for g in report.groups))
    series = []
    for currency in totals:
        costs = {g["key"]: g["cost"] for g in report.groups if g["currency"] == currency}
        series.append({"name": currency, "type": "bar", "data": [round(costs.get(k, 0.0), 2) for k in keys], "barMaxWidth": 48})
    bar = {
        "tooltip": {"trigger": "axis"},
        "legend": {"show": len(series) > 1},
        "grid": {"left": 60, "right": 20, "top": 30, "bottom": 70},
        "xAxis": {"type": "category", "data": keys, "axisLabel": {"rotate": 30 if len(keys) > 5 else 0, "interval": 0}},
        "yAxis": {"type": "value", "name": report.currency if report.currency not in (None, "mixed") else ""},
        "series": series,
    }
    return {"report": report, "groups": groups, "totals": list(totals.values()), "bar_chart": bar}


def _period_buckets(report: CostReport) -> tuple[list[str], int]:
    """The x axis: every day of the period, or its months for a year. Returns (labels, key length)."""
    start, end = date.fromisoformat(report.start), date.fromisoformat(report.end)
    if report.kind == "year":
        return [f"{start.year:04d}-{m:02d}" for m in range(1, 13)], 7
    return [(start + timedelta(days=i)).isoformat() for i in range((end - start).days)], 10


def _daily_chart(report: CostReport, rows: list[LedgerRow], by: str, *, other_label: str) -> dict:
    """Stacked lines of the largest groups (the rest as "other") over the period; stacked per
    currency, so the top of each stack is that currency's total."""
    labels, width = _period_buckets(report)
    top = [(g["key"], g["currency"]) for g in report.groups[:TOP_SERIES]]
    mixed = len(report.totals) > 1
    micros: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    other = "…"
    for row in rows:
        key = getattr(row, by, None) or "-"  # `by` is one of DIMENSIONS: the API refused any other
        series_key = (key, row.currency) if (key, row.currency) in top else (other, row.currency)
        micros[series_key][row.day[:width]] += row.cost_micros
    series = []
    for key, currency in [*top, *sorted(k for k in micros if k[0] == other)]:
        if (key, currency) not in micros:
            continue
        name = key if key != other else other_label
        series.append(
            {
                "name": f"{name} ({currency})" if mixed else name,
                "type": "line",
                "stack": currency,
                "areaStyle": {"opacity": 0.25},
                "symbol": "none" if len(labels) > 40 else "circle",
                "data": [round(micros[(key, currency)].get(day, 0) / 1e6, 2) for day in labels],
            }
        )
    return {
        "tooltip": {"trigger": "axis"},
        "legend": {"type": "scroll", "top": 0},
        "grid": {"left": 60, "right": 20, "top": 40, "bottom": 40},
        "xAxis": {"type": "category", "boundaryGap": False, "data": labels},
        "yAxis": {"type": "value", "name": report.currency if not mixed and report.currency else ""},
        "series": series,
    }


# ----------------------------------------------------------------------------- CSV
def micros_text(micros: int) -> str:
    """Exact decimal of an amount in micro-units: 146110000 → '146.110000'."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(int(micros)), 1_000_000)
    return f"{sign}{whole}.{frac:06d}"


def _csv_line(values) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow(values)
    return out.getvalue()


async def _groups_csv(report: CostReport) -> AsyncIterator[str]:
    yield _csv_line(GROUP_COLUMNS)
    for g in report.groups:
        yield _csv_line(
            [
                report.period,
                report.by,
                g["key"],
                g["currency"],
                micros_text(g["cost_micros"]),
                g["device_hours"],
                g["cpu_core_hours"],
                g["memory_gib_hours"],
                g["tasks"],
                g["rows"],
            ]
        )


async def _ledger_csv(user: Viewer, period: str, tenant: str, first: Ledger) -> AsyncIterator[str]:
    """Every ledger row of the period, a page of the API at a time (memory stays flat)."""
    yield _csv_line(LEDGER_COLUMNS)
    page, sent = first, 0
    while page.rows:
        chunk = io.StringIO()
        writer = csv.writer(chunk, lineterminator="\r\n")
        for row in page.rows:
            writer.writerow([micros_text(row.cost_micros) if col == "cost" else getattr(row, col) for col in LEDGER_COLUMNS])
        yield chunk.getvalue()
        sent += len(page.rows)
        if sent >= page.count:
            break
        page = await user.api.get_as(Ledger, "/api/v1/cost/ledger", period=period, tenant=tenant, limit=LEDGER_PAGE, offset=sent)


# ------------------------------------------------------------------------ formatting
def money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def number(value: float | int | None) -> str:
    """4.0 → 4, 0.5 → 0.5, 1234.5678 → 1234.57, 0.004 → <0.01 (small use is not nothing); None → '-'."""
    if value is None:
        return "-"
    if 0 < abs(value) < 0.005:
        return "<0.01"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")
