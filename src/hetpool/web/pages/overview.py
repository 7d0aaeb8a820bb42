"""Overview (/): capacity by device class and pool, utilisation now / 24 h / 7 d, queues
and waits, hot spots, idle resources and alerts. Every section refreshes itself with
htmx (`?fragment=<section id>`), the utilisation charts less often than the numbers.

Reads GET /api/v1/stats/capacity (inventory readers: the same for everyone),
GET /api/v1/stats/workload (tasks narrowed to the tenants the user may read),
GET /api/v1/budgets/status and GET /api/v1/approvals?state=pending. A panel the user may
not read shows the API's refusal in that panel; the rest of the page still works.

Ids and data-attributes for browser tests:
  section#summary                 cards #card-devices, #card-busy, #card-idle, #card-abnormal,
                                  #card-offline, #card-utilisation, #card-waiting,
                                  #card-running, #card-approvals (the number is in <b>)
  section#alerts
    #node-health                  table of nodes needing attention, rows tr[data-node][data-state]
                                  (td.abnormal: the abnormal device indices); a p.note with the
                                  same id when every reported node is ready
    #backend-health               rows tr[data-cluster][data-backend] of unreachable backends
                                  (p#backends-ok when all answer)
    #budget-alerts                rows tr[data-budget][data-tenant][data-exceeded=true|false]
                                  (p#budgets-none; p#budgets-denied when the user may not read costs)
    #approvals-waiting            rows tr[data-approval][data-kind] with links to /approvals and
                                  /tasks/<id> (p#approvals-none; a#approvals-more past 8)
    #deadline-alerts              rows tr[data-task][data-state] of tasks whose deadline is at
                                  risk, earliest deadline first, with a.task-link → /tasks/<id>,
                                  td.deadline, td.late (p#deadlines-none; p#deadlines-more past 8)
  section#hotspots
    #saturated-pools              rows tr[data-pool] with td.idle, td.waiting (p#saturated-none)
    #longest-waiting              rows tr[data-task] with a.task-link → /tasks/<id>, td.wait (p#longest-none)
    #idle-pools                   rows tr[data-pool] with td.idle (p#idle-none)
  section#capacity
    #capacity-classes             rows tr[data-class]; cells td[data-field=total|busy|idle|abnormal|offline]
    #capacity-pools               rows tr[data-pool][data-class]; the same cells
  section#utilisation             (every 30 s) charts #utilisation-chart (bar per pool: now,
                                  24 h, 7 d) and #utilisation-trend (line per class, last 24 h);
                                  table #utilisation-pools rows tr[data-pool] with
                                  td[data-field=now|24h|7d] (percent)
  section#queues                  form#window-form (GET /, select#window name=window: 24h | 7d,
                                  button#window-apply; changing it swaps the section live);
                                  #window-error for an unknown window;
                                  #queue-by-pool rows tr[data-pool], #queue-by-type rows
                                  tr[data-task-type], #queue-by-queue rows tr[data-queue];
                                  cells td[data-field=waiting|oldest|admitted|p50|p90]
  p.scoped-note                   #scoped-note-queues, #scoped-note-utilisation: shown when
                                  task numbers are narrowed to the user's tenants
Panels the API refuses show p.error.denied with the API's message.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from hetpool.server.schemas.approvals import ApprovalResponse
from hetpool.server.schemas.cost import BudgetStatus
from hetpool.server.schemas.stats import CapacityStats, WorkloadStats
from hetpool.web.i18n import Translator
from hetpool.web.labels import label
from hetpool.web.render import render, translator_for
from hetpool.web.session import ApiError, Viewer, viewer

router = APIRouter()

WINDOWS = ("24h", "7d")
# Which API reads each live section needs (the full page makes each read once).
SECTIONS: dict[str, tuple[str, frozenset[str]]] = {
    "summary": ("overview_summary.html", frozenset({"capacity", "workload", "approvals"})),
    "alerts": ("overview_alerts.html", frozenset({"capacity", "budgets", "approvals", "workload"})),
    "hotspots": ("overview_hotspots.html", frozenset({"capacity", "workload"})),
    "capacity": ("overview_capacity.html", frozenset({"capacity"})),
    "utilisation": ("overview_utilisation.html", frozenset({"capacity", "workload"})),
    "queues": ("overview_queues.html", frozenset({"workload"})),
}
READS = {
    "capacity": lambda api, window: api.get_as(CapacityStats, "/api/v1/stats/capacity"),
    "workload": lambda api, window: api.get_as(WorkloadStats, "/api/v1/stats/workload", window=window),
    "budgets": lambda api, window: api.get_as(list[BudgetStatus], "/api/v1/budgets/status"),
    "approvals": lambda api, window: api.get_as(list[ApprovalResponse], "/api/v1/approvals", state="pending", limit=50),
}
APPROVALS_SHOWN = 8
DEADLINES_SHOWN = 8  # tasks whose deadline is at risk, in the alerts
# A pool counts as saturated when its idle devices are below this share of its usable ones
# (on a big pool a handful of idle devices cannot take a multi-device task anyway).
SATURATED_IDLE_SHARE = 0.05


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request, window: str = "24h", fragment: str = "") -> HTMLResponse:
    user = await viewer(request)
    window_error = "" if window in WINDOWS else window
    window = window if window in WINDOWS else "24h"
    if fragment:
        if fragment not in SECTIONS:
            raise ApiError(404, {"code": "not_found", "message": f"no section {fragment!r} on the overview"})
        template, needs = SECTIONS[fragment]
        context = await _context(request, user, needs, window)
        return render(request, template, user, active="/", window_error=window_error, **context)
    needs = frozenset().union(*(n for _, n in SECTIONS.values()))
    context = await _context(request, user, needs, window)
    return render(request, "overview.html", user, status_code=422 if window_error else 200, window_error=window_error, **context)


async def _context(request: Request, user: Viewer, needs: frozenset[str], window: str) -> dict[str, Any]:
    """The API reads the sections need (concurrently), their refusals, and what is derived."""
    names = sorted(needs)
    results = await asyncio.gather(*(READS[n](user.api, window) for n in names), return_exceptions=True)
    data: dict[str, Any] = {"window": window, "windows": WINDOWS}
    for name, result in zip(names, results, strict=True):
        if isinstance(result, ApiError):
            data[name], data[f"{name}_error"] = None, result.message
        elif isinstance(result, BaseException):
            raise result
        else:
            data[name], data[f"{name}_error"] = result, ""
    tr = translator_for(request, user)
    data["dur"] = lambda seconds: duration_text(tr, seconds)
    data["pct"] = percent
    data.update(hot_spots(data.get("capacity"), data.get("workload")))
    if data.get("capacity") and data.get("workload"):
        data["charts"] = utilisation_charts(tr, data["capacity"], data["workload"])
        data["util_now"] = {p["pool"]: p["utilisation"] for p in data["capacity"].pools}
    if data.get("budgets") is not None:
        data["budgets_crossed"] = [b for b in data["budgets"] if b.exceeded or b.alerts]
    if data.get("approvals") is not None:
        data["approvals_shown"] = data["approvals"][:APPROVALS_SHOWN]
    if data.get("workload") is not None:
        data["deadlines_shown"] = data["workload"].deadlines_at_risk[:DEADLINES_SHOWN]
    return data


def hot_spots(capacity: CapacityStats | None, workload: WorkloadStats | None) -> dict[str, list]:
    """Saturated pools (no idle devices to speak of, tasks waiting for them) and idle ones
    (idle devices, nothing waiting). Both need capacity and the user's queue."""
    if not capacity or not workload:
        return {"saturated": [], "idle_pools": [], "waiting_by_pool": {}}
    waiting = {q["name"]: q["waiting"] for q in workload.queues["by_pool"]}
    saturated, idle = [], []
    for pool in capacity.pools:
        usable = pool["total"] - pool["abnormal"] - pool["offline"]
        queued = waiting.get(pool["pool"], 0)
        entry = {**pool, "waiting": queued}
        if queued and (pool["idle"] == 0 or pool["idle"] < SATURATED_IDLE_SHARE * usable):
            saturated.append(entry)
        elif pool["idle"] and not queued:
            idle.append(entry)
    saturated.sort(key=lambda p: (-p["waiting"], p["pool"]))
    idle.sort(key=lambda p: (-p["idle"], p["pool"]))
    return {"saturated": saturated, "idle_pools": idle, "waiting_by_pool": waiting}


def utilisation_charts(tr: Translator, capacity: CapacityStats, workload: WorkloadStats) -> dict[str, dict]:
    """ECharts options: a bar per pool (now, 24 h, 7 d) and an hourly line per class."""
    now = {p["pool"]: p["utilisation"] for p in capacity.pools}
    pools = workload.utilisation["pools"]
    names = [p["pool"] for p in pools]
    series = [
        {"name": tr.gettext("Now"), "type": "bar", "data": [round(100 * now.get(n, 0.0), 1) for n in names]},
        {"name": tr.gettext("Last 24 h"), "type": "bar", "data": [round(100 * p["24h"], 1) for p in pools]},
        {"name": tr.gettext("Last 7 days"), "type": "bar", "data": [round(100 * p["7d"], 1) for p in pools]},
    ]
    by_pool = {
        "tooltip": {"trigger": "axis"},
        "legend": {"top": 0},
        "grid": {"left": 40, "right": 10, "top": 36, "bottom": 70},
        "xAxis": {"type": "category", "data": names, "axisLabel": {"rotate": 30, "interval": 0}},
        "yAxis": {"type": "value", "min": 0, "max": 100},
        "series": series,
    }
    hourly = workload.utilisation["hourly"]
    hours = [h[11:16] for h in hourly["hours"]]  # HH:MM (UTC) of each hour's start
    class_names = {c: label(tr, "device_class", c) for c in hourly["classes"]}
    trend = {
        "tooltip": {"trigger": "axis"},
        "legend": {"top": 0},
        "grid": {"left": 40, "right": 10, "top": 36, "bottom": 30},
        "xAxis": {"type": "category", "data": hours},
        "yAxis": {"type": "value", "min": 0, "max": 100},
        "series": [
            {"name": class_names[c], "type": "line", "showSymbol": False, "data": [round(100 * v, 1) for v in values]}
            for c, values in hourly["classes"].items()
        ],
    }
    return {"by_pool": by_pool, "trend": trend}


def percent(ratio: float | None) -> str:
    return "–" if ratio is None else f"{100 * ratio:.0f}%"


def duration_text(tr: Translator, seconds: float | None) -> str:
    """A wait as people say it: 45s, 12m, 3h 20m, 2d 4h (translated)."""
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    if seconds < 60:
        return tr.gettext("%(n)ss", n=seconds)
    if seconds < 3600:
        return tr.gettext("%(n)sm", n=seconds // 60)
    if seconds < 86400:
        return tr.gettext("%(h)sh %(m)sm", h=seconds // 3600, m=seconds % 3600 // 60)
    return tr.gettext("%(d)sd %(h)sh", d=seconds // 86400, h=seconds % 86400 // 3600)
