"""Resources (/resources) and one pool (/pools/{name}).

/resources shows clusters → nodes → devices from GET /api/v1/resources/tree: each node's
capability profile (device models and counts, driver / runtime / frameworks, features,
labels) and status (its state from the agent or connector, every device idle, busy,
abnormal or offline), filtered by the GET form. /pools/{name} shows the pool's profile
(GET /api/v1/pools/{name}/profile) and its queue: the active tasks of GET /api/v1/tasks
placed on the pool, or queued with this pool among the candidates the scheduler tried
and did not rule out (the task list has no pool filter, so the page narrows it). Both
read only through the API, so its role and tenant rules hold: the queue lists only the
tasks the user may read.

Ids and data-attributes for browser tests:
  /resources
    form#resource-filters.filters  GET; fields class, model, cluster, status (selects),
                                   framework (text, e.g. "torch>=2.3"); button#filter-apply,
                                   a#filter-clear
    #resource-filter-error         the API's message when a filter is refused (422)
    section#resource-tree          live (every 5 s), keeps the filters
    #resource-totals               cards; each .card has data-count=total|idle|busy|abnormal|offline|nodes
                                   and the number in <b>
    table#resources-table          one tbody.cluster[data-cluster=<name>] per cluster
      tr.cluster-head              cluster line; li[data-pool=<name>] > a.pool-link (href /pools/<name>)
      tr.node-row[data-node=<name>][data-state=<state>]   id node-<name>
        .group[data-model=<model>][data-class=<class>]    one per device model of the node;
                                   .fw[data-ok=true|false] the framework verdict when filtered
        span.dev[data-device=<node>/<index>][data-status=idle|busy|abnormal|offline]
        .stack, .features, .labels cells
    #resources-empty               shown when nothing matches
  /pools/{name}
    #pool-name[data-pool], #pool-model[data-model][data-class], #pool-cluster
    section#pool-status            live (every 5 s): #pool-counts .card[data-count=...] > b,
                                   #pool-chart (ECharts), table#pool-nodes tr[data-node][data-state]
    table#pool-features-missing    tr[data-feature]; ul#pool-features li[data-feature]
    table#pool-task-types          tr[data-task-type][data-ok=true|false]
    table#pool-frameworks          tr[data-framework][data-installed-ok][data-with-image-ok]
    table#pool-substitutes         tr[data-model] with td[data-task-type] relative performance
    section#pool-queue             live (every 5 s): table#pool-queue-table tr[data-task][data-state]
                                   with a.task-link (href /tasks/<id>); #pool-queue-denied when
                                   the user may not list tasks; #pool-queue-empty
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from hetpool.server.schemas.inventory import ObjectList, PoolProfile
from hetpool.server.schemas.resources import ResourceTree
from hetpool.server.schemas.tasks import TaskResponse
from hetpool.web.labels import label
from hetpool.web.render import render, translator_for
from hetpool.web.session import ApiError, Viewer, viewer

router = APIRouter()

FILTER_FIELDS = ("class", "model", "cluster", "status", "framework")
DEVICE_STATUSES = ("idle", "busy", "abnormal", "offline")
# Tasks that hold or wait for capacity; pending_approval ones have not reached a pool yet.
ACTIVE_STATES = ("running", "dispatched", "admitted", "unknown", "queued")
TASK_PAGE = 1000  # GET /api/v1/tasks' largest page
STATUS_COLOURS = {"idle": "#1f8a4c", "busy": "#2357c6", "abnormal": "#c53030", "offline": "#9aa5b1"}


def when(iso: str | None) -> str:
    """'2026-11-30T14:09:35.258313Z' → '2026-11-30 14:09:35' (UTC, as the API gives it)."""
    if not iso:
        return "-"
    return iso.replace("T", " ")[:19]


def number(value: float | int | None) -> str:
    """4.0 → 4, 1.125 → 1.13, None → '-'."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


# ---------------------------------------------------------------- /resources


@router.get("/resources", response_class=HTMLResponse)
async def resources_page(request: Request, fragment: str = "") -> Response:
    user = await viewer(request)
    filters = {k: request.query_params.get(k, "").strip() for k in FILTER_FIELDS}
    chosen = {k: v for k, v in filters.items() if v}
    error = ""
    try:
        tree = await user.api.get_as(ResourceTree, "/api/v1/resources/tree", **chosen)
    except ApiError as exc:
        if exc.status != 422:
            raise
        # A refused filter (unknown cluster, bad version spec): say why, show nothing
        # rather than an unfiltered list that looks like an answer.
        error = exc.message
        tree = await user.api.get_as(ResourceTree, "/api/v1/resources/tree")
        tree.clusters = []
        tree.totals = {"total": 0, "nodes": 0, "clusters": 0, **dict.fromkeys(DEVICE_STATUSES, 0)}
    context = {
        "tree": tree,
        "filters": filters,
        "filter_error": error,
        "live_url": request.url.path + "?" + urlencode({**chosen, "fragment": "resource-tree"}),
        "statuses": DEVICE_STATUSES,
        "when": when,
        "num": number,
    }
    if fragment == "resource-tree":
        return render(request, "resources_tree.html", user, active="/resources", **context)
    return render(request, "resources.html", user, **context)


# ---------------------------------------------------------------- /pools/{name}


@router.get("/pools/{name}", response_class=HTMLResponse)
async def pool_page(request: Request, name: str, fragment: str = "") -> Response:
    user = await viewer(request)
    # An unknown pool: the API's 404 message becomes the error page.
    profile = await user.api.get_as(PoolProfile, f"/api/v1/pools/{quote(name, safe='')}/profile")
    context: dict = {"p": profile, "when": when, "num": number, "statuses": DEVICE_STATUSES}
    if fragment == "pool-queue":
        context.update(await _queue(user, profile.pool))
        return render(request, "pool_queue.html", user, active="/resources", **context)
    context["chart"] = _status_chart(request, user, profile)
    if fragment == "pool-status":
        return render(request, "pool_status.html", user, active="/resources", **context)
    context.update(await _queue(user, profile.pool))
    context["model_pools"] = await _pools_by_model(user)
    return render(request, "pool.html", user, active="/resources", **context)


async def _pools_by_model(user: Viewer) -> dict[str, list[str]]:
    """Which pools hold each device model (the substitutes table links to them)."""
    out: dict[str, list[str]] = {}
    for pool in await user.api.get_as(ObjectList, "/api/v1/objects/pools"):
        out.setdefault(pool["model"], []).append(pool["name"])
    return out


def _waits_for(task: TaskResponse, pool: str) -> dict | None:
    """The scheduler's attempt that tried `pool` for a queued task, unless it ruled the pool
    out (an incompatible stack is reported as a '<pool>: why' detail)."""
    for attempt in (task.pending or {}).get("attempts", []):
        if pool in attempt.get("pools", []) and not any(str(d).startswith(pool + ": ") for d in attempt.get("details", [])):
            return attempt
    return None


async def _queue(user: Viewer, pool: str) -> dict:
    """Tasks on or waiting for `pool`, as far as the user may see them."""
    running, waiting, truncated = [], [], False
    try:
        for state in ACTIVE_STATES:
            tasks = await user.api.get_as(list[TaskResponse], "/api/v1/tasks", state=state, limit=TASK_PAGE)
            truncated = truncated or len(tasks) >= TASK_PAGE
            for task in tasks:
                here = [p.model_dump() for p in task.placements if p.pool == pool]
                # The template's rows: the task as the API sent it, and what concerns this pool.
                if here and state != "queued":
                    running.append({**task.model_dump(exclude_unset=True), "here": here})
                elif state == "queued":
                    attempt = _waits_for(task, pool)
                    if attempt is not None:
                        waiting.append({**task.model_dump(exclude_unset=True), "attempt": attempt})
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        return {"queue": [], "queue_denied": exc.message, "queue_truncated": False}
    waiting.sort(key=lambda t: ((t.get("pending") or {}).get("position") or 10**9, t["created_at"]))
    return {"queue": running + waiting, "queue_denied": "", "queue_truncated": truncated}


def _status_chart(request: Request, user: Viewer, profile: PoolProfile) -> dict:
    """A stacked bar per node: its devices by status (ECharts option)."""
    tr = translator_for(request, user)
    nodes = profile.nodes
    return {
        "tooltip": {"trigger": "axis", "axisPointer": {"type": "shadow"}},
        "legend": {"top": 0},
        "grid": {"left": 40, "right": 16, "top": 36, "bottom": 28, "containLabel": True},
        "xAxis": {"type": "category", "data": [n["node"] for n in nodes]},
        "yAxis": {"type": "value", "minInterval": 1, "name": tr.pgettext("devices", "Devices")},
        "series": [
            {
                "name": label(tr, "device_status", status),
                "type": "bar",
                "stack": "devices",
                "data": [n["devices"].get(status, 0) for n in nodes],
                "itemStyle": {"color": STATUS_COLOURS[status]},
            }
            for status in DEVICE_STATUSES
        ],
    }
