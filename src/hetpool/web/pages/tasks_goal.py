"""Submitting a task by its goal: say what is to be done (model, method, precision, the work
and the targets), get the ways to run it side by side, submit one of them.

The page is a client of two API calls made as the signed-in user: POST
/api/v1/tasks/recommend ranks the options (device model × count × pool, start, completion,
runtime, cost, each target met or missed, why), and POST /api/v1/tasks submits the task
document of the option chosen. That document travels through the browser in a hidden field
and reaches the API like any task the user could write: the API validates it and checks
the tenant, so the page can submit nothing the user could not submit anyway. The model
names offered come from GET /api/v1/catalog/open-models (the web does not read the
catalog itself).

Routes
  GET  /tasks/new/goal          the goal form (linked from /tasks/new).
  POST /tasks/new/goal          POST /api/v1/tasks/recommend; the options beside the kept
                                form, or the API's message on the form (its status).
  POST /tasks/new/goal/submit   POST /api/v1/tasks with one option's document, then 303 to
                                /tasks/{id}; a refusal shows the API's message on the form.

Form fields: csrf, tenant, name, framework, framework_version, model, params, method,
precision, seq_len, tokens, deadline, max_cost, latency_ms, throughput_tokens_per_s,
command; the submit form adds `task` (the option's document as JSON) and repeats the rest.

Ids and data-attributes for browser tests
  #goal-form with fields #tenant #name #framework #framework_version #model (datalist
  #model-options) #params #method #precision #seq_len #tokens #deadline #max_cost
  #latency_ms #throughput_tokens_per_s #command, #recommend-button, #form-error,
  #goal-result (data-options: how many), #goal-summary, #goal-options with cards
  .goal-option[data-rank][data-pool][data-model][data-count][data-meets-all], in each
  .option-targets with .target[data-target][data-met], .option-reasons, form.submit-option
  with button.submit-option-button; #goal-no-options, #goal-excluded rows
  tr[data-pool][data-model]
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from hetpool.core.goal import Method, Precision
from hetpool.server.schemas.catalog import OpenModelResponse
from hetpool.server.schemas.tasks import RecommendedOption, RecommendResponse, TaskResponse
from hetpool.web.goal_notes import excluded_text, note_text
from hetpool.web.i18n import N_, Translator
from hetpool.web.render import render, translator_for
from hetpool.web.session import ApiError, Viewer, check_csrf, viewer
from hetpool.web.task_views import num, short_ts, tenants_for

router = APIRouter()

FORM_FIELDS = (
    "tenant",
    "name",
    "framework",
    "framework_version",
    "model",
    "params",
    "method",
    "precision",
    "seq_len",
    "tokens",
    "deadline",
    "max_cost",
    "latency_ms",
    "throughput_tokens_per_s",
    "command",
)
# Goal fields the API parses itself from what was typed ("2B", "48h"); the numeric ones
# are sent as numbers when they read as one, else as typed so the API's message names them.
TEXT_GOAL_FIELDS = ("model", "params", "method", "precision", "tokens", "deadline")
NUMBER_GOAL_FIELDS = ("seq_len", "max_cost", "latency_ms", "throughput_tokens_per_s")

METHODS = {
    Method.PRETRAIN.value: N_("pretraining"),
    Method.FULL_FINETUNE.value: N_("full fine-tuning"),
    Method.LORA.value: N_("LoRA fine-tuning"),
    Method.QLORA.value: N_("QLoRA fine-tuning"),
    Method.INFERENCE.value: N_("inference (serving)"),
    Method.BATCH_INFERENCE.value: N_("batch inference"),
}
PRECISIONS = [p.value for p in Precision]
TARGETS = {
    "deadline": N_("Deadline"),
    "max_cost": N_("Cost ceiling"),
    "latency": N_("Latency"),
    "throughput": N_("Throughput"),
}
SPLIT_KEYS = ("data", "tensor", "pipeline", "replicas")  # the parallelism a card shows (when above 1)
NO_OPTIONS = N_("The options could not be worked out: %(message)s")  # the API's message, on the form
REFUSED = N_("The task was not accepted: %(message)s")
BAD_OPTION = N_("The option sent is not a task document; ask for the options again.")


# ---------------------------------------------------------------------------- form → goal
def _form_values(form: dict[str, str]) -> dict[str, str]:
    # Browsers send textarea lines with CRLF; a shell command must not carry the CRs.
    return {k: form.get(k, "").replace("\r\n", "\n").strip() for k in FORM_FIELDS}


def _number(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def goal_document(values: dict[str, str]) -> dict[str, Any]:
    """The task document the goal form describes: no devices (the API sizes them), a goal."""
    doc: dict[str, Any] = {k: values[k] for k in ("name", "tenant", "command") if values[k]}
    if values["framework"]:
        doc["framework"] = {"name": values["framework"], **({"version": values["framework_version"]} if values["framework_version"] else {})}
    goal: dict[str, Any] = {k: values[k] for k in TEXT_GOAL_FIELDS if values[k]}
    goal |= {k: _number(values[k]) for k in NUMBER_GOAL_FIELDS if values[k]}
    doc["goal"] = goal
    return doc


# ---------------------------------------------------------------------------- options → page
def _money(value: float | None) -> str:
    return "—" if value is None else f"{value:,.2f}"


def _sizing_rows(sizing: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    if sizing.get("per_device_gib") is not None and sizing.get("usable_gib") is not None:
        rows.append((N_("Memory per device"), f"{sizing['per_device_gib']:.1f} / {sizing['usable_gib']:.1f} GiB"))
    parallelism = sizing.get("parallelism") or {}
    split = [f"{k} {num(v)}" for k, v in parallelism.items() if k in SPLIT_KEYS and isinstance(v, int | float) and v > 1]
    if split:
        rows.append((N_("Parallelism"), " · ".join(split)))
    if sizing.get("tokens_per_s"):
        rows.append((N_("Tokens per second"), f"{sizing['tokens_per_s']:,.0f}"))
    if sizing.get("latency_ms") is not None:
        rows.append((N_("Latency per token"), f"{sizing['latency_ms']:.1f} ms"))
    return rows


def option_view(option: RecommendedOption, rank: int, tr: Translator) -> dict[str, Any]:
    """One option as a card shows it; `task` is the document its submit button sends."""
    targets = [{"key": key, "label": TARGETS.get(key, key), "met": met} for key, met in option.meets.items()]
    return {
        "rank": rank,
        "model": option.model,
        "count": option.count,
        "pool": option.pool,
        "split": f"{option.workers} × {option.devices_per_worker}",
        "start": short_ts(option.estimated_start),
        "completion": short_ts(option.estimated_completion),
        "runtime": option.estimated_runtime or "—",
        "cost": _money(option.cost),
        "cost_per_hour": _money(option.cost_per_hour),
        "startable_now": option.startable_now,
        "targets": targets,
        "meets_all": all(t["met"] for t in targets),
        # In the reader's language from the codes; the API's English for a reason without one.
        "reasons": [note_text(n, tr, english) for n, english in zip(option.notes, option.reasons, strict=False)] if option.notes else option.reasons,
        "sizing": _sizing_rows(option.sizing),
        "task": json.dumps(option.task, ensure_ascii=False, separators=(",", ":")),
    }


def result_view(answer: RecommendResponse, tr: Translator) -> dict[str, Any]:
    model = answer.model
    return {
        "model": model.get("name") or "",
        "params_b": num(model["params_b"]) if model.get("params_b") is not None else "",
        "shape_from": model.get("shape_from") or "",
        "method": answer.goal.get("method", ""),
        "precision": answer.goal.get("precision", ""),
        "deadline": short_ts(answer.deadline) if answer.deadline else "",
        "max_cost": _money(answer.goal["max_cost"]) if answer.goal.get("max_cost") is not None else "",
        "options": [option_view(o, i, tr) for i, o in enumerate(answer.options, start=1)],
        "excluded": [{"pool": e.get("pool", ""), "model": e.get("model", ""), "reason": excluded_text(e, tr)} for e in answer.excluded],
    }


# ---------------------------------------------------------------------------- routes
async def _model_names(user: Viewer) -> list[OpenModelResponse]:
    try:
        return await user.api.get_as(list[OpenModelResponse], "/api/v1/catalog/open-models")
    except ApiError:
        return []  # the form still works: the name is typed, the API checks it


async def _goal_page(
    request: Request,
    user: Viewer,
    values: dict[str, str],
    *,
    problem: tuple[str, dict] | None = None,
    result: dict | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    return render(
        request,
        "tasks_goal.html",
        user,
        status_code=status_code,
        active="/tasks",
        values=values,
        models=await _model_names(user),
        tenants=await tenants_for(user, "task.submit"),
        methods=list(METHODS.items()),
        precisions=PRECISIONS,
        problem=problem,
        result=result,
        form_fields=FORM_FIELDS,
    )


@router.get("/tasks/new/goal", response_class=HTMLResponse)
async def goal_form(request: Request) -> HTMLResponse:
    user = await viewer(request)
    values = dict.fromkeys(FORM_FIELDS, "") | {"precision": Precision.BF16.value}
    return await _goal_page(request, user, values)


@router.post("/tasks/new/goal", response_class=HTMLResponse)
async def recommend(request: Request) -> HTMLResponse:
    user = await viewer(request)
    values = _form_values(await check_csrf(request, user))
    try:
        answer = await user.api.post_as(RecommendResponse, "/api/v1/tasks/recommend", json=goal_document(values))
    except ApiError as exc:
        return await _goal_page(request, user, values, problem=(NO_OPTIONS, {"message": exc.message}), status_code=exc.status)
    return await _goal_page(request, user, values, result=result_view(answer, translator_for(request, user)))


@router.post("/tasks/new/goal/submit", response_class=HTMLResponse)
async def submit_option(request: Request) -> Response:
    user = await viewer(request)
    form = await check_csrf(request, user)
    values = _form_values(form)
    try:
        doc = json.loads(form.get("task", ""))
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return await _goal_page(request, user, values, problem=(BAD_OPTION, {}), status_code=422)
    try:
        task = await user.api.post_as(TaskResponse, "/api/v1/tasks", json=doc)
    except ApiError as exc:
        return await _goal_page(request, user, values, problem=(REFUSED, {"message": exc.message}), status_code=exc.status)
    return RedirectResponse(f"/tasks/{quote(task.id, safe='')}", status_code=303)
