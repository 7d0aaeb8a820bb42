"""Approvals inbox (/approvals): the requests waiting for the user's decision, with what
each asks for and what it would cost, Approve / Reject with a comment, and the requests
decided recently.

Reads GET /api/v1/governance/approval-inbox (the requests of GET /api/v1/approvals,
same visibility, plus age, may_decide, requested resources and estimated cost) and
decides through POST /api/v1/approvals/{id}/approve|reject. Whoever may not decide a
request (not an approver of its tenant, its own submitter, a user without an approver
role) gets no buttons; the API decides again on every POST anyway.

Ids and data-attributes for browser tests:
  #approvals-flash               outcome of the last decision (class ok | error, data-kind)
  form#approvals-filter          GET filter, field `tenant`
  section#approvals-pending      live (every 5 s while no comment is being typed)
  #approvals-table               the inbox; rows tr[data-approval-id=<id>] with data-state,
                                 data-tenant, data-task-id, data-kind
    form.decide                  POST /approvals/<id>/approve (button.approve) or
                                 /approvals/<id>/reject (button.reject, formaction);
                                 fields: csrf, comment (textarea[name=comment]), tenant
    .requested, .estimate, .age  cells with the requested resources, the estimated cost, the age
  #approvals-own-only            note shown to users without an approver role
  section#approvals-decided      live (every 10 s)
  #approvals-decided-table       rows tr[data-approval-id] with data-state, .decided-by, .comment
"""

from __future__ import annotations

import base64
import json
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from hetpool.server.schemas.approvals import ApprovalInbox, ApprovalResponse
from hetpool.server.schemas.tasks import TaskResponse
from hetpool.web.i18n import N_, Translator
from hetpool.web.render import render, translator_for
from hetpool.web.session import ApiError, Viewer, check_csrf, viewer

router = APIRouter()

INBOX = "/api/v1/governance/approval-inbox"
FLASH_COOKIE = "hetpool_approvals_flash"
FRAGMENTS = {"approvals-pending": "approvals_pending.html", "approvals-decided": "approvals_decided.html"}
DECIDED_SHOWN = 50


@router.get("/approvals", response_class=HTMLResponse)
async def approvals_page(request: Request, tenant: str = "", fragment: str = "") -> Response:
    user = await viewer(request)
    tenant = tenant.strip()
    tr = translator_for(request, user)
    context: dict = {
        "tenant": tenant,
        "fmt_duration": lambda seconds: duration_text(tr, seconds),
        "num": number,
        "may_decide_somewhere": user.may("approval.decide"),
    }
    if fragment in FRAGMENTS:
        context.update(await _load(user, tenant, pending=fragment == "approvals-pending", decided=fragment == "approvals-decided"))
        return render(request, FRAGMENTS[fragment], user, active="/approvals", **context)
    context.update(await _load(user, tenant, pending=True, decided=True))
    flash = _read_flash(request)
    response = render(request, "approvals.html", user, flash=flash, **context)
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path="/approvals")
    return response


@router.post("/approvals/{approval_id}/{decision}")
async def decide(request: Request, approval_id: str, decision: str) -> Response:
    user = await viewer(request)
    form = await check_csrf(request, user)
    back = "/approvals"
    if form.get("tenant", "").strip():
        back += "?" + urlencode({"tenant": form["tenant"].strip()})
    if decision not in ("approve", "reject"):
        return _redirect_with(back, {"kind": "error", "outcome": "refused", "id": approval_id, "message": f"unknown decision {decision!r}"})
    try:
        # The comment goes as typed: a missing one on a rejection is the API's to refuse,
        # and its message is what the user sees.
        decided = await user.api.post_as(ApprovalResponse, f"/api/v1/approvals/{approval_id}/{decision}", json={"comment": form.get("comment", "")})
    except ApiError as exc:
        return _redirect_with(back, {"kind": "error", "outcome": "refused", "id": approval_id, "message": exc.message})
    flash = {"kind": "ok", "outcome": decided.state, "id": decided.id}
    if decided.task_id:
        try:
            task = await user.api.get_as(TaskResponse, f"/api/v1/tasks/{decided.task_id}")
            flash.update(task=task.id, task_state=task.state)
        except ApiError:
            pass  # a named approver may decide a task it cannot read
    return _redirect_with(back, flash)


async def _load(user: Viewer, tenant: str, *, pending: bool, decided: bool) -> dict:
    data: dict = {}
    if pending:
        body = await user.api.get_as(ApprovalInbox, INBOX, state="pending", tenant=tenant)
        data["pending"] = body.requests
    if decided:
        body = await user.api.get_as(ApprovalInbox, INBOX, tenant=tenant, limit=300)
        done = [r for r in body.requests if r.state != "pending"]
        done.sort(key=lambda r: r.decided_at or r.created_at, reverse=True)
        data["decided"] = done[:DECIDED_SHOWN]
    return data


def _redirect_with(location: str, flash: dict) -> RedirectResponse:
    """Post/redirect/get: the outcome travels in a short-lived cookie read once by the GET."""
    response = RedirectResponse(location, status_code=303)
    value = base64.urlsafe_b64encode(json.dumps(flash).encode()).decode()
    response.set_cookie(FLASH_COOKIE, value, max_age=120, path="/approvals", httponly=True, samesite="strict")
    return response


def _read_flash(request: Request) -> dict | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    try:
        flash = json.loads(base64.urlsafe_b64decode(raw.encode()))
    except (ValueError, TypeError):
        return None
    return flash if isinstance(flash, dict) and isinstance(flash.get("outcome"), str) else None


# A duration's units, largest first (the catalogs translate them: 3h 5m → 3 小时 5 分钟).
DURATION_UNITS = (("d", 86400, N_("%(n)sd")), ("h", 3600, N_("%(n)sh")), ("m", 60, N_("%(n)sm")))


def duration_text(tr: Translator, seconds: float | int | None) -> str:
    """A compact, translated duration with its two largest units: 45s, 12m, 3h 5m, 2d 4h."""
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return tr.gettext("%(n)ss", n=seconds)
    parts = []
    for unit, size, text in DURATION_UNITS:
        if seconds >= size or parts:
            parts.append((unit, seconds // size, text))
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(tr.gettext(text, n=n) for unit, n, text in parts if n or unit == parts[0][0])


def number(value: float | int | None) -> str:
    """4.0 → 4, 0.5 → 0.5, 1234.5678 → 1234.57; None → '-'."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")
