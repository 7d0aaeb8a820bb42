"""One task's page: its live state, timeline, placement, fallback decisions and log tail,
and cancelling it. Every read and write goes through /api/v1/tasks… with the user's own token.

Routes
  GET  /tasks/{id}          the task. ?fragment=task-live answers the live part (2 s);
                            ?fragment=log&rank=R&offset=N answers the log text after byte N
                            (appended by htmx) and the next poller; ?rank= picks the worker.
  POST /tasks/{id}/cancel   POST /api/v1/tasks/{id}/cancel, then 303 to /tasks/{id}.

Ids and data-attributes for browser tests
  detail  #task-live (refreshes every 2 s until the task ends), #task-state (data-state),
          #task-summary, #task-tenant, #task-template, #task-exit-code, #task-message,
          #timeline rows tr[data-action][data-state], #placement rows
          tr[data-rank][data-node][data-pool], #fallback (data-fallback-used) with
          #fallback-preferred, #fallback-chosen and #fallback-attempts rows as in the plan,
          #pending with #pending-summary, #pending-position, #pending-eta, #approval
          (data-approval-id) with #approval-link, #cancel-form, #cancel-task (only while the
          task is not terminal and the user may cancel), #cancel-requested, #action-error,
          #log-tail, #log-ranks a[data-rank] (workers > 1), #log-text (data-rank),
          #log-empty, #log-truncated, #log-poll (data-offset, data-complete: "true" once
          the task ended and its log is read to the end), #log-error, #spec-summary,
          #spec-command, #spec-full, #back-to-tasks
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from hetpool.core.states import TaskState
from hetpool.server.schemas.audit import AuditEvent
from hetpool.server.schemas.tasks import LogsResponse, TaskResponse
from hetpool.web.i18n import C_, N_, Message
from hetpool.web.render import render
from hetpool.web.session import ApiError, Viewer, check_csrf, viewer
from hetpool.web.task_views import (
    STATES,
    TERMINAL,
    attempt_rows,
    devices_text,
    duration,
    framework_text,
    host_text,
    short_ts,
    wait_seconds,
)

router = APIRouter()

LOG_READ_BYTES = 1024 * 1024  # the most GET /api/v1/tasks/{id}/logs returns at once
LOG_TAIL_CHARS = 64 * 1024  # a first load shows at most this much of a long log
# The API cannot seek to a log's end, so a first load reads forward at most this many
# chunks (64 MiB) and shows the tail of what it read; the poll continues from there.
LOG_MAX_READS = 64


def _timeline(events: list[AuditEvent]) -> list[dict]:
    rows = []
    for event in events:
        action = event.action
        if not action.startswith("task."):
            continue
        suffix = action.removeprefix("task.")
        after = event.after or {}  # the event's own JSON: a mapping
        rows.append(
            {
                "ts": short_ts(event.ts),
                "action": action,
                "suffix": suffix,
                "state": after.get("state") or (suffix if suffix in STATES else ""),
                "actor": event.actor,
                "detail": after.get("message") or after.get("reason") or "",
            }
        )
    return rows


def _spec_summary(spec: dict) -> list[tuple[str | Message, str]]:
    per_worker = spec.get("per_worker") or {}
    rows = [
        (N_("Workers"), str(spec.get("workers", 1))),
        (C_("tasks.spec.devices", "Devices per worker"), devices_text(per_worker.get("devices"))),
        (N_("CPU / memory per worker"), host_text(per_worker)),
        (N_("Framework"), framework_text(spec.get("framework"))),
    ]
    if spec.get("fallback"):
        rows.append((N_("Fallback order"), " → ".join(spec["fallback"])))
    if spec.get("any_of"):
        rows.append((N_("Any of"), ", ".join(spec["any_of"])))
    if spec.get("features"):
        rows.append((N_("Device features"), ", ".join(spec["features"])))
    rows.append((N_("Runtime estimate / max"), f"{spec.get('runtime_estimate') or '—'} / {spec.get('max_runtime') or '—'}"))
    if spec.get("image"):
        rows.append((N_("Image"), spec["image"]))
    return rows


def _without_empty(value: Any) -> Any:
    """The spec without unset fields, for a readable YAML view."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v not in (None, "", [], {})}
    return value


def detail_view(task: TaskResponse, user: Viewer) -> dict:
    state = task.state
    attempts = task.placement_attempts or []
    placements = task.placements
    chosen_attempt = next((a for a in attempts if a.get("outcome") == "fit"), None)
    events = task.events or []
    terminal = state in TERMINAL
    return {
        "task": task,
        "state": state,
        "terminal": terminal,
        "may_cancel": not terminal and user.may("task.cancel"),
        "cancel_requested": not terminal and any(e.action == "task.cancel_requested" for e in events),
        "timeline": _timeline(events),
        "placements": placements,
        "attempts": attempt_rows(attempts, chosen_attempt.get("candidate") if chosen_attempt else None),
        "preferred": attempts[0].get("candidate", "") if attempts else "",
        "chosen": (chosen_attempt or {}).get("candidate", "") if placements else "",
        "chosen_models": sorted({p.model for p in placements}),
        "pending": task.pending if state == TaskState.QUEUED.value else None,
        "pending_reasons": (task.pending or {}).get("reasons") or {},
        "pending_eta": short_ts((task.pending or {}).get("estimated_start")),
        "pending_eta_at": short_ts((task.pending or {}).get("estimated_at")),  # the forecast's time (policy.estimate_interval)
        "pending_next_estimate": short_ts((task.pending or {}).get("next_estimate_at")),
        "pending_wait": duration((task.pending or {}).get("estimated_wait_s")),
        "approval": task.approval if state == TaskState.PENDING_APPROVAL.value else None,
        "times": [
            (N_("Created"), short_ts(task.created_at)),
            (C_("tasks.detail.admitted", "Admitted"), short_ts(task.admitted_at)),
            (N_("Started"), short_ts(task.started_at)),
            (N_("Finished"), short_ts(task.finished_at)),
            (N_("Wait"), duration(wait_seconds(task, datetime.now(UTC)))),
        ],
    }


async def _read_log(user: Viewer, task_id: str, rank: int, offset: int) -> LogsResponse:
    path = f"/api/v1/tasks/{quote(task_id, safe='')}/logs"
    return await user.api.get_as(LogsResponse, path, rank=rank, offset=offset, limit=LOG_READ_BYTES)


async def _log_tail(user: Viewer, task_id: str, rank: int) -> dict:
    """The last LOG_TAIL_CHARS of a worker's log and the byte offset to follow it from."""
    text, offset, complete, truncated = "", 0, False, False
    try:
        for _ in range(LOG_MAX_READS):
            chunk = await _read_log(user, task_id, rank, offset)
            text += chunk.text
            if len(text) > LOG_TAIL_CHARS:
                text, truncated = text[-LOG_TAIL_CHARS:], True
            moved = chunk.offset - offset
            offset, complete = max(chunk.offset, offset), chunk.complete
            if moved < LOG_READ_BYTES:  # a short read: this is the end for now
                break
    except ApiError as exc:  # e.g. a viewer may read the task but not its logs
        return {"text": "", "offset": 0, "complete": True, "error": exc.message, "truncated": False}
    return {"text": text, "offset": offset, "complete": complete, "error": "", "truncated": truncated}


def _int(text: str, default: int = 0) -> int:
    try:
        return max(int(text), 0)
    except ValueError:
        return default


@router.get("/tasks/{task_id}", response_class=HTMLResponse)
async def task_detail(request: Request, task_id: str, fragment: str = "", rank: str = "0", offset: str = "0") -> HTMLResponse:
    user = await viewer(request)
    worker = _int(rank)
    if fragment == "log":
        try:
            chunk = await _read_log(user, task_id, worker, _int(offset))
            error = ""
        except ApiError as exc:
            chunk, error = {"text": "", "offset": _int(offset), "complete": True}, exc.message
        return render(request, "task_log.html", user, task_id=task_id, rank=worker, chunk=chunk, error=error)
    task = await user.api.get_as(TaskResponse, f"/api/v1/tasks/{quote(task_id, safe='')}")
    return await _detail_page(request, user, task, fragment=fragment, rank=worker)


async def _detail_page(
    request: Request, user: Viewer, task: TaskResponse, *, fragment: str = "", rank: int = 0, action_error: str = "", status_code: int = 200
) -> HTMLResponse:
    view = detail_view(task, user)
    if fragment == "task-live":
        return render(request, "task_live.html", user, **view)
    spec = task.spec or {}
    workers = int(spec.get("workers", 1) or 1)
    rank = min(rank, workers - 1)
    return render(
        request,
        "task_detail.html",
        user,
        status_code=status_code,
        active="/tasks",
        rank=rank,
        ranks=list(range(min(workers, 64))),
        log=await _log_tail(user, task.id, rank),
        log_tail_kib=LOG_TAIL_CHARS // 1024,
        spec_summary=_spec_summary(spec),
        command=spec.get("command") or "",
        spec_yaml=yaml.safe_dump(_without_empty(spec), sort_keys=False, allow_unicode=True),
        action_error=action_error,
        **view,
    )


@router.post("/tasks/{task_id}/cancel", response_class=HTMLResponse)
async def cancel_task(request: Request, task_id: str) -> Response:
    user = await viewer(request)
    await check_csrf(request, user)
    path = f"/api/v1/tasks/{quote(task_id, safe='')}"
    try:
        await user.api.post_as(TaskResponse, path + "/cancel")
    except ApiError as exc:
        if exc.status == 404:  # not visible to this user: the error page, as for reading it
            raise
        # The refusal (already ended, not allowed) is shown on the task's page.
        task = await user.api.get_as(TaskResponse, path)
        return await _detail_page(request, user, task, action_error=exc.message, status_code=exc.status)
    return RedirectResponse(f"/tasks/{quote(task_id, safe='')}", status_code=303)
