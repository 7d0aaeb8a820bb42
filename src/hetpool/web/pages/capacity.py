"""Capacity planning page: the simulator's what-if form and its report.

The form is a GET form (the what-if changes nothing, and a report can be bookmarked or
shared as a link); running it calls POST /api/v1/capacity/what-if, which replays the
server's recent finished tasks on today's inventory and on the changed one. Model choices
come from GET /api/v1/objects/devicemodels (add) and the pools' models (remove).

Stable ids, names and data attributes for browser tests:
- #whatif-form (GET /capacity): #days (name days), repeated rows div.change-row[data-kind=
  add|remove] with add_count/add_model or remove_count/remove_model (a select of model
  ids), #add-rows / #remove-rows, #add-row-more / #remove-row-more (htmx: append a row from
  /capacity/row/add|remove), #whatif-advanced with wait_target (hours), idle_below (%),
  quotas (TEAM=DEVICES lines), and the submit button #whatif-run (name run)
- #whatif-error: the API's (or the form's) reason a run was refused, e.g. an unknown model
- #whatif-report: #whatif-history (data-replayed, data-finished, data-truncated),
  #whatif-devices rows tr[data-model], #whatif-summary rows tr[data-metric] (cells
  td.baseline / td.changed / td.delta), #whatif-baseline and #whatif-changed (per pool,
  rows tr[data-pool] with td.wait-p90 etc.), #whatif-chart (p90 wait per pool, ECharts),
  #whatif-util-chart, #whatif-cost rows tr[data-team], #whatif-recs li[data-kind][data-name]
- #capacity-denied: the user may not read the inventory (answered 403)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from starlette.datastructures import QueryParams

from hetpool.server.schemas.capacity import WhatIfResponse
from hetpool.server.schemas.inventory import ObjectList
from hetpool.web.i18n import N_, Translator
from hetpool.web.render import render, translator_for
from hetpool.web.session import ApiError, Viewer, viewer

router = APIRouter()

SUMMARY_METRICS = (
    "wait_avg_hours",
    "wait_p50_hours",
    "wait_p90_hours",
    "jct_avg_hours",
    "jct_p90_hours",
    "makespan_hours",
    "never_started",
    "preemptions",
    "cost",
)
CHANGE_KINDS = ("add", "remove")


@dataclass
class WhatIfForm:
    """The form as submitted (raw text, so a bad value is shown back as typed)."""

    days: str = "30"
    rows: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: {kind: [] for kind in CHANGE_KINDS})
    wait_target: str = "1"
    idle_below: str = "30"
    quotas: str = ""

    @classmethod
    def of(cls, params: QueryParams) -> WhatIfForm:
        rows = {
            kind: [(c.strip(), m.strip()) for c, m in zip_longest(params.getlist(f"{kind}_count"), params.getlist(f"{kind}_model"), fillvalue="")]
            for kind in CHANGE_KINDS
        }
        return cls(
            days=params.get("days", "30").strip(),
            rows={kind: [r for r in found if r != ("", "")] for kind, found in rows.items()},
            wait_target=params.get("wait_target", "1").strip(),
            idle_below=params.get("idle_below", "30").strip(),
            quotas=params.get("quotas", "").strip(),
        )

    def shown_rows(self, kind: str) -> list[tuple[str, str]]:
        return self.rows[kind] or [("", "")]

    def body(self, tr: Translator) -> dict:
        """The API request; ValueError with a translated reason for what only the page parses.
        Counts and models go to the API as typed: it names the bad field itself."""
        numbers = {}
        for name, raw, label in (
            ("days", self.days, N_("History (days)")),
            ("wait_target", self.wait_target, N_("Wait target, p90 (hours)")),
            ("idle_below", self.idle_below, N_("Idle below (utilisation %%)")),
        ):
            try:
                numbers[name] = float(raw)
            except ValueError:
                raise ValueError(tr.gettext("%(field)s: expected a number, got %(value)r", field=tr.gettext(label), value=raw)) from None
        quotas = {}
        for line in self.quotas.replace(",", "\n").splitlines():
            if not line.strip():
                continue
            team, sep, devices = line.partition("=")
            try:
                quotas[team.strip()] = float(devices)
            except ValueError:
                sep = ""
            if not sep or not team.strip():
                raise ValueError(tr.gettext("quotas: expected TEAM=DEVICES such as ai-lab/nlp=16, got %(value)r", value=line.strip()))
        body = {"days": numbers["days"], "wait_target_hours": numbers["wait_target"], "idle_below": numbers["idle_below"] / 100}
        for kind in CHANGE_KINDS:
            body[kind] = [{"count": int(c) if c.isdigit() else c, "model": m} for c, m in self.rows[kind]]
        if quotas:
            body["quotas"] = quotas
        return body


# ---------------------------------------------------------------------------- formatting
def hours(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def pct(value) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def money(value) -> str:
    return "—" if value is None else f"{value:,.2f}"


def signed(value, unit: str = "") -> str:
    if value is None:
        return "—"
    if unit == "%":
        return f"{value * 100:+.0f} pp"
    return f"{value:+,.2f}" if isinstance(value, float) else f"{value:+d}"


def trend(value) -> str:
    """CSS class of a change where less is better (waits, times, cost)."""
    if not value:
        return ""
    return "ok" if value < 0 else "bad"


def _summary_rows(totals: dict) -> list[dict]:
    rows = []
    for metric in SUMMARY_METRICS:
        before, after = totals["baseline"][metric], totals["changed"][metric]
        delta = None if before is None or after is None else after - before
        if isinstance(delta, float):
            delta = round(delta, 4)
        as_count = metric in ("never_started", "preemptions")
        show = str if as_count else (money if metric == "cost" else hours)
        rows.append(
            {
                "metric": metric,
                "baseline": "—" if before is None else show(before),
                "changed": "—" if after is None else show(after),
                "delta": signed(delta),
                "trend": trend(delta),
            }
        )
    return rows


def _device_rows(devices: dict) -> list[dict]:
    models = sorted(set(devices["baseline"]) | set(devices["changed"]))
    rows = [{"model": m, "baseline": devices["baseline"].get(m, 0), "changed": devices["changed"].get(m, 0)} for m in models]
    return [{**r, "delta": f"{r['changed'] - r['baseline']:+d}"} for r in rows if r["baseline"] != r["changed"]]


def _charts(report: WhatIfResponse, tr: Translator) -> tuple[dict, dict]:
    pools = report.pools
    busy = [p for p in pools if any(p[run] and p[run]["tasks"] for run in ("baseline", "changed"))] or pools
    legend = [tr.gettext("Baseline (today)"), tr.gettext("Changed")]

    def series(rows, key, scale=1.0):
        return [
            {
                "name": legend[i],
                "type": "bar",
                "data": [None if not p[run] or p[run][key] is None else round(p[run][key] * scale, 3) for p in rows],
            }
            for i, run in enumerate(("baseline", "changed"))
        ]

    def option(rows, key, scale=1.0):
        return {
            "tooltip": {"trigger": "axis"},
            "legend": {"data": legend, "top": 0},
            "grid": {"left": 48, "right": 16, "top": 36, "bottom": 80},
            "xAxis": {"type": "category", "data": [p["name"] for p in rows], "axisLabel": {"rotate": 25, "interval": 0}},
            "yAxis": {"type": "value"},
            "series": series(rows, key, scale),
        }

    return option(busy, "wait_p90_hours"), option(pools, "utilisation", 100.0)


def report_view(report: WhatIfResponse, tr: Translator) -> dict:
    wait_chart, util_chart = _charts(report, tr)
    changed_p90 = {p["name"]: (p["changed"] or {}).get("wait_p90_hours") for p in report.pools}
    return {
        "summary": _summary_rows(report.totals),
        "devices": _device_rows(report.changes["devices"]),
        "wait_chart": wait_chart,
        "util_chart": util_chart,
        "changed_p90": changed_p90,
    }


# ------------------------------------------------------------------------------- routes
async def _choices(user: Viewer) -> dict[str, list[dict]]:
    """Models to add (every catalog model, grouped by class) and to remove (those in pools)."""
    models = await user.api.get_as(ObjectList, "/api/v1/objects/devicemodels")
    pools = await user.api.get_as(ObjectList, "/api/v1/objects/pools")
    in_pools = {p.get("model") for p in pools}
    ordered = sorted(models, key=lambda m: (m.get("class") or "", m["name"]))
    groups: dict[str, list[dict]] = {}
    for m in ordered:
        groups.setdefault(m.get("class") or "", []).append({"id": m["name"], "text": f"{m.get('display_name') or m['name']} ({m['name']})"})
    removable = [{"id": m["name"], "text": f"{m.get('display_name') or m['name']} ({m['name']})"} for m in ordered if m["name"] in in_pools]
    return {"add": groups, "remove": removable}


def _denied(request: Request, user: Viewer, exc: ApiError) -> HTMLResponse:
    return render(request, "capacity_denied.html", user, status_code=403, error=exc)


@router.get("/capacity", response_class=HTMLResponse)
async def capacity_page(request: Request) -> HTMLResponse:
    user = await viewer(request)
    try:
        choices = await _choices(user)
    except ApiError as exc:
        if exc.status == 403:
            return _denied(request, user, exc)
        raise
    tr = translator_for(request, user)
    form = WhatIfForm.of(request.query_params)
    report, view, error, status = None, None, "", 200
    if "run" in request.query_params:
        try:
            report = await user.api.post_as(WhatIfResponse, "/api/v1/capacity/what-if", json=form.body(tr))
            view = report_view(report, tr)
        except ValueError as exc:
            error, status = str(exc), 422
        except ApiError as exc:
            if exc.status not in (403, 409, 422):
                raise
            error, status = exc.message, exc.status
    return render(
        request,
        "capacity.html",
        user,
        status_code=status,
        form=form,
        choices=choices,
        report=report,
        view=view,
        error=error,
        hours=hours,
        pct=pct,
        money=money,
        signed=signed,
        trend=trend,
    )


@router.get("/capacity/row/{kind}", response_class=HTMLResponse)
async def change_row(request: Request, kind: str) -> HTMLResponse:
    """One more empty add/remove row for the form (htmx appends it)."""
    user = await viewer(request)
    if kind not in CHANGE_KINDS:
        raise ApiError(404, {"code": "not_found", "message": f"row kind {kind!r}: must be add or remove"})
    return render(request, "capacity_row.html", user, kind=kind, row=("", ""), choices=await _choices(user))
