"""Tasks pages: the task list and submitting a task from a template (plan first, then
confirm). One task's page is pages/tasks_detail.py; what both show is web/task_views.py.
Every read and write goes through /api/v1/tasks… with the user's own token.

This module's router is included before tasks_detail's (routes.py includes pages in name
order), so /tasks/new is matched before /tasks/{id}.

Routes
  GET  /tasks               the list. ?state= and ?tenant= are passed to GET /api/v1/tasks;
                            ?type=, ?pool=, ?template= and ?q= (name or id contains) are
                            filtered here because the API has no such parameters.
                            ?fragment=task-table answers only the table (live refresh, 5 s).
  GET  /tasks/new           step 1: ?type= narrows the templates, ?template= preselects one;
                            ?fragment=template-defaults answers only the template's presets.
  POST /tasks/new/plan      step 2: POST /api/v1/tasks/plan; the plan beside the kept form.
  POST /tasks/new/submit    POST /api/v1/tasks, then 303 to /tasks/{id}; a refusal shows the
                            API's message on the form, with what the user typed.

Form fields (POST /tasks/new/plan and /tasks/new/submit): csrf, template, name, tenant,
env, priority, workers, device_class, device_count, runtime_estimate, command, advanced
(YAML mapping of any other Task field; the fields above win over it).

Ids and data-attributes for browser tests
  list    #task-filters (fields state, tenant, type, pool, template, q), #new-task (link),
          #task-table (the live section), rows tr[data-task-id][data-state], a.task-link,
          span.deadline-risk (a task whose deadline is at risk; title: the deadline),
          #task-count (data-count), #task-empty, #task-search-window, #task-list-error,
          #filter-apply, #filter-clear
  new     #type-filter (select name=type), #template-groups with cards
          [data-template][data-type] and links a.use-template, #new-task-form with fields
          #template #name #tenant #env #priority #workers #device_class #device_count
          #runtime_estimate #command #advanced, #template-defaults (data-template),
          #templates-error, #no-templates, #plan-button, #form-error, #plan-result
          (data-feasible, data-fits-when-idle), #plan-outcome (data-outcome: fits_now, waits
          or impossible), #plan-summary, #plan-fallback, #plan-candidates rows
          tr[data-candidate][data-outcome][data-chosen], #plan-placements rows tr[data-rank],
          #plan-limits, #plan-start, #plan-wait, #plan-cost, #plan-estimated-cost,
          #plan-backend (data-kind), #plan-approval (data-needed), #confirm-form (the same
          fields, hidden), #confirm-submit, #plan-cannot-submit (instead of the button when
          the task fits nowhere)
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from hetpool.core.inventory import DeviceClass, TaskType
from hetpool.core.tasks import Priority
from hetpool.core.tenancy import Environment
from hetpool.server.schemas.tasks import PlacementView, PlanResponse, TaskResponse
from hetpool.web.i18n import C_, N_, Message
from hetpool.web.render import render
from hetpool.web.session import ApiError, Viewer, check_csrf, viewer
from hetpool.web.task_views import (
    STATES,
    attempt_rows,
    devices_text,
    duration,
    framework_text,
    host_text,
    num,
    objects,
    short_ts,
    tenants_for,
    wait_seconds,
)

router = APIRouter()

TASK_TYPES = [t.value for t in TaskType]
DEVICE_CLASSES = [DeviceClass.GPU.value, DeviceClass.NPU.value, DeviceClass.DPU.value, DeviceClass.CPU.value]
ENVIRONMENTS = [e.value for e in Environment]
PRIORITIES = [p.value for p in Priority]
FORM_FIELDS = ("template", "name", "tenant", "env", "priority", "workers", "device_class", "device_count", "runtime_estimate", "command", "advanced")

REFUSED = N_("The task was not accepted: %(message)s")  # the API's message, on the form
LIST_LIMIT = 200  # what the API is asked for when it does all the filtering
SEARCH_LIMIT = 1000  # the API's maximum: filters applied here search this many newest tasks


# ---------------------------------------------------------------------------- the list
def _placed_devices(placements: list[PlacementView]) -> str:
    by_model: dict[str, float] = {}
    for p in placements:
        # Whole devices count once each; a slice (fraction < 1) counts as its share.
        share = len(p.devices) * min(p.device_fraction or 0, 1)
        if share:
            by_model[p.model] = by_model.get(p.model, 0) + share
    return ", ".join(f"{num(n)} × {model}" for model, n in by_model.items()) or "—"


def _list_row(task: TaskResponse, now: datetime) -> dict:
    pending = task.pending or {}
    placements = task.placements
    return {
        "id": task.id,
        "name": task.name,
        "state": task.state,
        "tenant": task.tenant,
        "type": task.type,
        "template": task.template or "",
        "devices": _placed_devices(placements),
        "pools": sorted({p.pool for p in placements}),
        "nodes": sorted({p.node for p in placements}),
        "position": pending.get("position"),
        "pending": pending,  # why it waits: explain() in the template
        "eta": short_ts(pending.get("estimated_start")) if pending.get("estimated_start") else "",
        "wait": duration(wait_seconds(task, now)),
        "created": short_ts(task.created_at),
        "deadline": short_ts(task.deadline) if task.deadline else "",
        "deadline_at_risk": bool(task.deadline_at_risk),
    }


def _matches(task: TaskResponse, *, task_type: str, pool: str, template: str, q: str) -> bool:
    if task_type and task.type != task_type:
        return False
    if template and task.template != template:
        return False
    if pool and not any(p.pool == pool for p in task.placements):
        return False
    needle = q.strip().lower()
    return not needle or needle in task.name.lower() or needle in task.id.lower()


@router.get("/tasks", response_class=HTMLResponse)
async def task_list(
    request: Request, state: str = "", tenant: str = "", type: str = "", pool: str = "", template: str = "", q: str = "", fragment: str = ""
) -> HTMLResponse:
    user = await viewer(request)
    filters = {"state": state, "tenant": tenant.strip(), "type": type, "pool": pool, "template": template, "q": q.strip()}
    filtered_here = bool(type or pool or template or filters["q"])
    limit = SEARCH_LIMIT if filtered_here else LIST_LIMIT
    error = ""
    try:
        tasks = await user.api.get_as(list[TaskResponse], "/api/v1/tasks", state=state, tenant=filters["tenant"], limit=limit)
    except ApiError as exc:  # e.g. a viewer-less role, or a bad state in a hand-made URL
        tasks, error = [], exc.message
    fetched = len(tasks)
    now = datetime.now(UTC)
    rows = [_list_row(t, now) for t in tasks if _matches(t, task_type=type, pool=pool, template=template, q=filters["q"])]
    context = {
        "rows": rows,
        "filters": filters,
        "query": urlencode({k: v for k, v in filters.items() if v}),
        "error": error,
        "window_note": filtered_here and fetched >= limit,
        "limit": limit,
    }
    if fragment == "task-table":
        return render(request, "tasks_table.html", user, **context)
    pools, _ = await objects(user, "pools")
    templates, _ = await objects(user, "templates")
    return render(
        request,
        "tasks_list.html",
        user,
        active="/tasks",
        states=STATES,
        task_types=TASK_TYPES,
        pools=sorted(p["name"] for p in pools),
        templates=sorted(t["name"] for t in templates),
        tenants=await tenants_for(user, "task.read"),
        may_submit=user.may("task.submit"),
        **context,
    )


# ---------------------------------------------------------------------------- the form
class FormProblem(Exception):
    """Input the page itself can tell is wrong (before asking the API): an English text
    (marked N_, translated when shown) and the values it names."""

    def __init__(self, text: str, **params: Any) -> None:
        super().__init__(text)
        self.text, self.params = text, params


def _form_values(form: dict[str, str]) -> dict[str, str]:
    # Browsers send textarea lines with CRLF; a shell command must not carry the CRs.
    return {k: form.get(k, "").replace("\r\n", "\n") for k in FORM_FIELDS}


def _number(text: str) -> Any:
    """'4' → 4, '0.5' → 0.5; anything else goes to the API as typed so that its message
    names the field and what it accepts."""
    text = text.strip()
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def template_devices(template: dict | None) -> dict:
    """The device request a template presets, without the fields it leaves unset."""
    per_worker = ((template or {}).get("defaults") or {}).get("per_worker") or {}
    devices = per_worker.get("devices") or {}
    return {k: v for k, v in devices.items() if v is not None and v != []}


def task_document(values: dict[str, str], templates: dict[str, dict]) -> dict:
    """The Task document the form describes: the advanced YAML, then the form's fields on top.

    A device count or class is written as a whole `per_worker.devices` (the template's
    request with the change): the API merges a template's per_worker one key deep, so a
    bare `{count: 4}` would drop the template's device class."""
    doc: dict[str, Any] = {}
    advanced = values["advanced"].strip()
    if advanced:
        try:
            extra = yaml.safe_load(advanced)
        except yaml.YAMLError as exc:
            raise FormProblem(N_("advanced: not valid YAML: %(message)s"), message=" ".join(str(exc).split())) from exc
        if extra is not None and not isinstance(extra, dict):
            raise FormProblem(N_("advanced: write task fields as a YAML mapping (field: value)"))
        doc.update(extra or {})
    template = values["template"].strip() or str(doc.get("template") or "")
    if not template:
        raise FormProblem(N_("template: choose a template"))
    doc["template"] = template
    for key in ("name", "tenant", "env", "priority", "runtime_estimate"):
        if values[key].strip():
            doc[key] = values[key].strip()
    if values["command"].strip():
        doc["command"] = values["command"].strip()
    if values["workers"].strip():
        doc["workers"] = _number(values["workers"])
    count, device_class = values["device_count"].strip(), values["device_class"].strip()
    if (count or device_class) and isinstance(doc.get("per_worker", {}), dict):
        per_worker = dict(doc.get("per_worker") or {})
        devices = dict(per_worker.get("devices") or template_devices(templates.get(template)))
        if device_class and device_class != devices.get("class"):
            devices = {k: v for k, v in devices.items() if k != "models"}  # another class's models cannot apply
            devices["class"] = device_class
        if count:
            devices["count"] = _number(count)
        if "class" not in devices:
            raise FormProblem(N_("device_class: the template asks for no devices; choose a device class (gpu, npu, dpu or cpu) to request devices"))
        per_worker["devices"] = devices
        doc["per_worker"] = per_worker
    doc.pop("kind", None)
    return doc


def template_view(template: dict) -> dict:
    """A template as the form shows it: what it presets, as (label, text) pairs."""
    defaults = template.get("defaults") or {}
    per_worker = defaults.get("per_worker") or {}
    devices = template_devices(template)
    presets: list[tuple[str | Message, str]] = []
    if defaults.get("workers"):
        presets.append((N_("Workers"), str(defaults["workers"])))
    presets.append((C_("tasks.spec.devices", "Devices per worker"), devices_text(devices)))
    if per_worker:
        presets.append((N_("CPU / memory per worker"), host_text(per_worker)))
    if defaults.get("framework"):
        presets.append((N_("Framework"), framework_text(defaults["framework"])))
    if defaults.get("fallback"):
        presets.append((N_("Fallback order"), " → ".join(defaults["fallback"])))
    if defaults.get("any_of"):
        presets.append((N_("Any of"), ", ".join(defaults["any_of"])))
    if defaults.get("features"):
        presets.append((N_("Device features"), ", ".join(defaults["features"])))
    if defaults.get("runtime_estimate") or defaults.get("max_runtime"):
        presets.append((N_("Runtime estimate / max"), f"{defaults.get('runtime_estimate') or '—'} / {defaults.get('max_runtime') or '—'}"))
    if defaults.get("command"):
        presets.append((N_("Command"), defaults["command"]))
    return {
        "name": template["name"],
        "type": template.get("type", "general"),
        "display_name": template.get("display_name") or "",
        "presets": presets,
        "priority": defaults.get("priority") or "",
        "workers": defaults.get("workers") or "",
        "device_count": num(devices["count"]) if "count" in devices else "",
    }


def _template_groups(templates: list[dict], type_filter: str) -> list[tuple[str, list[dict]]]:
    groups = []
    for task_type in TASK_TYPES:
        if type_filter and task_type != type_filter:
            continue
        members = [template_view(t) for t in sorted(templates, key=lambda t: t["name"]) if t.get("type", "general") == task_type]
        if members:
            groups.append((task_type, members))
    return groups


async def _form_page(
    request: Request,
    user: Viewer,
    values: dict[str, str],
    *,
    type_filter: str = "",
    problem: tuple[str, dict] | None = None,
    plan: dict | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    templates, templates_error = await objects(user, "templates")
    by_name = {t["name"]: t for t in templates}
    chosen = by_name.get(values.get("template", ""))
    return render(
        request,
        "tasks_new.html",
        user,
        status_code=status_code,
        active="/tasks",
        values=values,
        type_filter=type_filter if type_filter in TASK_TYPES else "",
        task_types=TASK_TYPES,
        groups=_template_groups(templates, type_filter if type_filter in TASK_TYPES else ""),
        all_groups=_template_groups(templates, ""),
        templates_error=templates_error,
        chosen=template_view(chosen) if chosen else None,
        tenants=await tenants_for(user, "task.submit"),
        environments=ENVIRONMENTS,
        priorities=PRIORITIES,
        device_classes=DEVICE_CLASSES,
        problem=problem,
        plan=plan,
        form_fields=FORM_FIELDS,
    )


@router.get("/tasks/new", response_class=HTMLResponse)
async def new_task(request: Request, type: str = "", template: str = "", fragment: str = "") -> HTMLResponse:
    user = await viewer(request)
    if fragment == "template-defaults":
        templates, _ = await objects(user, "templates")
        chosen = next((t for t in templates if t["name"] == template), None)
        return render(request, "tasks_template_defaults.html", user, chosen=template_view(chosen) if chosen else None)
    values = {k: "" for k in FORM_FIELDS} | {"template": template, "env": Environment.DEV.value}
    return await _form_page(request, user, values, type_filter=type)


async def _document_or_form(request: Request, user: Viewer, values: dict[str, str]) -> dict | HTMLResponse:
    templates, _ = await objects(user, "templates")
    try:
        return task_document(values, {t["name"]: t for t in templates})
    except FormProblem as exc:
        return await _form_page(request, user, values, problem=(exc.text, exc.params), status_code=422)


def plan_view(plan: PlanResponse) -> dict:
    """The plan answer arranged for the page: outcome, candidates with the reasons for the
    ones not chosen, where the workers go, limits, start, cost, backend and approval."""
    explanation = plan.explanation
    attempts = explanation.get("attempts") or []
    task = plan.task
    per_worker = task.get("per_worker") or {}
    outcome = "fits_now" if plan.feasible else ("waits" if plan.fits_when_idle else "impossible")
    backend = plan.backend or {}
    approval = plan.approval
    runtime = plan.estimated_runtime
    if runtime in (None, "-"):  # the API writes an unknown runtime as "-"
        runtime = task.get("runtime_estimate") or "—"
    return {
        "outcome": outcome,
        "feasible": plan.feasible,
        "fits_when_idle": plan.fits_when_idle,
        "summary": explanation.get("summary", ""),
        "explanation": explanation,  # shown translated: explain() in the template
        "candidates": attempt_rows(attempts, plan.chosen),
        "fallback_used": bool(plan.fallback_used),
        "chosen": plan.chosen or "",
        "placements": plan.placements,
        "limits": [
            (N_("Workers"), str(task.get("workers", 1))),
            (C_("tasks.spec.devices", "Devices per worker"), devices_text(per_worker.get("devices"))),
            (N_("CPU / memory per worker"), host_text(per_worker)),
            (N_("Estimated runtime"), runtime),
            (N_("Max runtime"), task.get("max_runtime") or "—"),
        ],
        "start": short_ts(plan.estimated_start),
        "wait": duration(plan.estimated_wait_s),
        "position": plan.queue_position,
        "estimated_pool": plan.estimated_pool or "",
        "cost_per_hour": plan.cost_per_hour,
        "estimated_cost": plan.estimated_cost,
        "backend": backend,
        "unsupported": [f"{g.get('capability')}: {g.get('reason')}" for g in backend.get("unsupported") or []],
        "approval_needed": approval.needed,
        "approval_reasons": [r.get("message", "") for r in approval.reasons],
        "approval_expires": approval.expire_after or "",
    }


@router.post("/tasks/new/plan", response_class=HTMLResponse)
async def plan_task(request: Request) -> HTMLResponse:
    user = await viewer(request)
    values = _form_values(await check_csrf(request, user))
    doc = await _document_or_form(request, user, values)
    if isinstance(doc, HTMLResponse):
        return doc
    try:
        plan = await user.api.post_as(PlanResponse, "/api/v1/tasks/plan", json=doc)
    except ApiError as exc:
        return await _form_page(request, user, values, problem=(REFUSED, {"message": exc.message}), status_code=exc.status)
    return await _form_page(request, user, values, plan=plan_view(plan))


@router.post("/tasks/new/submit", response_class=HTMLResponse)
async def submit_task(request: Request) -> Response:
    user = await viewer(request)
    values = _form_values(await check_csrf(request, user))
    doc = await _document_or_form(request, user, values)
    if isinstance(doc, HTMLResponse):
        return doc
    try:
        task = await user.api.post_as(TaskResponse, "/api/v1/tasks", json=doc)
    except ApiError as exc:
        return await _form_page(request, user, values, problem=(REFUSED, {"message": exc.message}), status_code=exc.status)
    return RedirectResponse(f"/tasks/{quote(task.id, safe='')}", status_code=303)
