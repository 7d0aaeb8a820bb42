"""Audit page: the hash-chained trail, searchable, with the chain's verification on top.

Everything is read through GET /api/v1/audit (filters actor, action, object_kind,
object_id, since, until; oldest first with an `after_id` cursor), /api/v1/audit/verify and
/api/v1/audit/export. The API has no reverse order and no free-text search, so the page
adds both on top of it, bounded:

- newest first: the page finds the newest event id, then reads id windows backwards
  (each window twice as wide as the last) until the page is full;
- free text (`q`): matched here in the events read, at most SCAN_BUDGET events a page;
  when that runs out the page offers to continue from where the search stopped.

Stable ids and data attributes for browser tests:
- #audit-filters (GET form): actor, action, object_kind, object_id, since, until, q,
  order (desc | asc), limit; #audit-filter-submit, #audit-filter-clear
- #chain-status data-ok="true|false" data-events=N, data-head=ID (intact) or
  data-bad=ID (broken); #chain-around links to the events around a break
- #audit-events (live section: polls every 5 s on the newest page), #audit-table with rows
  tr[data-audit-id] (also data-actor, data-action, data-object-kind, data-object-id);
  td.diff holds the before/after summary (li[data-change="added|removed|changed"])
- #audit-older (desc) / #audit-later (asc), #audit-first, #audit-continue (free text ran
  out of budget), #audit-count data-count=N, #audit-error (a filter the API refused)
- #audit-export-csv, #audit-export-jsonl → /audit/export.csv, /audit/export.jsonl (the
  API's export with the same filters, fetched with the user's session)
- #audit-denied: the user lacks audit.read (answered 403)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from hetpool.server.schemas.audit import AnchoredVerifyResponse, AuditEvent
from hetpool.web.render import render
from hetpool.web.session import Api, ApiError, viewer

router = APIRouter()

API_FILTERS = ("actor", "action", "object_kind", "object_id", "since", "until")
PAGE_SIZES = (50, 100, 200, 500)
API_PAGE = 5000  # the API's largest `limit`
SCAN_BUDGET = 20_000  # events read per page at most when the free text must be matched here
DIFF_SHOWN = 6  # of each kind: changed, added, removed
_EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


@dataclass
class Query:
    """The page's query string, cleaned: API filters, free text, order, size, cursors."""

    filters: dict[str, str]
    q: str = ""
    order: str = "desc"
    limit: int = 50
    after: int = 0  # oldest first: events after this id
    before: int = 0  # newest first: events before this id (0: from the newest)
    top_hint: int = 0  # newest id seen by the page that polls (saves a search for it)

    @classmethod
    def of(cls, request: Request) -> Query:
        params = request.query_params
        filters = {k: params.get(k, "").strip() for k in API_FILTERS if params.get(k, "").strip()}
        limit = _int(params.get("limit"), 50)
        return cls(
            filters=filters,
            q=params.get("q", "").strip(),
            order="asc" if params.get("order") == "asc" else "desc",
            limit=limit if limit in PAGE_SIZES else 50,
            after=_int(params.get("after"), 0),
            before=_int(params.get("before"), 0),
            top_hint=_int(params.get("top"), 0),
        )

    def url(self, **changes: Any) -> str:
        """/audit with these filters and `changes` (None drops a parameter)."""
        values: dict[str, Any] = {**self.filters, "q": self.q, "order": self.order, "limit": self.limit}
        values.update(changes)
        return "/audit?" + urlencode({k: v for k, v in values.items() if v not in (None, "", 0)})

    def export_url(self, fmt: str) -> str:
        return f"/audit/export.{fmt}" + (("?" + urlencode(self.filters)) if self.filters else "")


@dataclass
class Page:
    events: list[AuditEvent] = field(default_factory=list)
    next_url: str | None = None  # older (desc) or later (asc) events
    scanned_out: bool = False  # the free-text budget ran out before the page was full
    scanned: int = 0
    top: AuditEvent | None = None  # the newest event in the whole trail (desc pages find it anyway)


def _int(value: str | None, default: int) -> int:
    try:
        return max(0, int(value)) if value not in (None, "") else default
    except ValueError:
        return default


def _haystack(event: AuditEvent) -> str:
    parts = [event.actor, event.action, event.object_kind, event.object_id]
    parts += [json.dumps(value, ensure_ascii=False) for value in (event.before, event.after) if value is not None]
    return " ".join(str(p) for p in parts if p).lower()


def _matches(event: AuditEvent, needle: str) -> bool:
    return not needle or needle.lower() in _haystack(event)


async def _read(api: Api, filters: dict, after_id: int, limit: int) -> list[AuditEvent]:
    return await api.get_as(list[AuditEvent], "/api/v1/audit", after_id=after_id, limit=max(1, min(API_PAGE, limit)), **filters)


async def _first_from(api: Api, event_id: int) -> AuditEvent | None:
    found = await _read(api, {}, max(0, event_id - 1), 1)
    return found[0] if found else None


async def newest_event(api: Api, hint: int = 0) -> AuditEvent | None:
    """The event with the highest id. Ids are handed out without gaps (a gap is a deletion),
    so `hint` (the event count, or the newest id seen before) is usually right next to it;
    otherwise gallop up from it and bisect: a handful of one-row reads."""
    low = 0
    if hint > 0:
        tail = await _read(api, {}, hint - 1, API_PAGE)
        if tail and len(tail) < API_PAGE:
            return tail[-1]
        low = tail[-1].id if tail else 0
    step = 1024
    while (probe := await _first_from(api, low + step)) is not None:
        low, step = probe.id, step * 2
    high = low + step  # no event at or above `high`
    while high - low > API_PAGE:
        middle = (low + high) // 2
        probe = await _first_from(api, middle)
        low, high = (probe.id, high) if probe is not None else (low, middle)
    tail = await _read(api, {}, max(0, low - 1), API_PAGE)
    return tail[-1] if tail else None


async def oldest_first(api: Api, query: Query) -> Page:
    page = Page()
    cursor, shown = query.after, []
    while True:
        asked = min(API_PAGE, SCAN_BUDGET - page.scanned if query.q else query.limit + 1 - len(shown))
        batch = await _read(api, query.filters, cursor, asked)
        for event in batch:
            page.scanned += 1
            cursor = event.id
            if _matches(event, query.q):
                shown.append(event)
                if len(shown) > query.limit:
                    break
        if len(shown) > query.limit:  # one more than fits: there are later events
            page.events = shown[: query.limit]
            page.next_url = query.url(after=page.events[-1].id)
            return page
        if len(batch) < asked:
            page.events = shown
            return page
        if page.scanned >= SCAN_BUDGET:
            page.events, page.scanned_out = shown, True
            page.next_url = query.url(after=cursor)
            return page


async def _window(api: Api, query: Query, low: int, high: int) -> tuple[list[AuditEvent], int]:
    """Matching events with low ≤ id ≤ high, oldest first, and how many were read."""
    found, cursor, read = [], low - 1, 0
    while True:
        asked = min(API_PAGE, high - cursor)
        batch = await _read(api, query.filters, cursor, asked)
        for event in batch:
            if event.id > high:
                break
            read += 1
            if _matches(event, query.q):
                found.append(event)
        if not batch or batch[-1].id >= high or len(batch) < asked:
            return found, read
        cursor = batch[-1].id


async def newest_first(api: Api, query: Query) -> Page:
    page = Page()
    if query.before:
        high = query.before - 1
    else:
        page.top = await newest_event(api, query.top_hint)
        high = page.top.id if page.top else 0
    found: list[AuditEvent] = []
    width = max(2 * query.limit, 200)
    # A window never spans more ids than the budget has left, so no page reads more than
    # SCAN_BUDGET events, however sparse the matches.
    while high >= 1 and len(found) <= query.limit and (width := min(width, SCAN_BUDGET - page.scanned)) > 0:
        low = max(1, high - width + 1)
        events, read = await _window(api, query, low, high)
        found, page.scanned = events + found, page.scanned + read
        high, width = low - 1, width * 2
    page.events = list(reversed(found[-query.limit :]))
    if len(found) > query.limit:
        page.next_url = query.url(before=page.events[-1].id, top=None)
    elif high >= 1:  # the budget ran out: go on below the last window read
        page.scanned_out = True
        page.next_url = query.url(before=high + 1, top=None)
    return page


# ------------------------------------------------------------------- before/after summary
def _flatten(value: Any, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    if isinstance(value, dict) and value and depth < 3:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key), depth + 1))
        return out
    return {prefix or "·": value}


def _short(value: Any, width: int = 48) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def diff_summary(before: Any, after: Any) -> list[dict[str, str]]:
    """Fields added, removed or changed between `before` and `after` (nested keys dotted)."""
    old = _flatten(before) if before is not None else {}
    new = _flatten(after) if after is not None else {}
    changes = []
    for key in sorted(set(old) | set(new)):
        if key not in old:
            changes.append({"kind": "added", "key": key, "new": _short(new[key])})
        elif key not in new:
            changes.append({"kind": "removed", "key": key, "old": _short(old[key])})
        elif old[key] != new[key]:
            changes.append({"kind": "changed", "key": key, "old": _short(old[key]), "new": _short(new[key])})
    return changes


def _rows(events: list[AuditEvent]) -> list[dict]:
    """Events as the table shows them: changed fields one a line (they matter most), added
    and removed ones run together on one line each, at most DIFF_SHOWN of each kind."""
    rows = []
    for event in events:
        changes = diff_summary(event.before, event.after)
        by_kind = {kind: [c for c in changes if c["kind"] == kind] for kind in ("changed", "added", "removed")}
        shown = {kind: found[:DIFF_SHOWN] for kind, found in by_kind.items()}
        rows.append(
            {
                **event.model_dump(),
                "time": event.ts.replace("T", " ")[:19],
                "changes": shown,
                "has_changes": bool(changes),
                "more_changes": len(changes) - sum(len(found) for found in shown.values()),
                "before_json": json.dumps(event.before, ensure_ascii=False, indent=1, sort_keys=True),
                "after_json": json.dumps(event.after, ensure_ascii=False, indent=1, sort_keys=True),
            }
        )
    return rows


# ------------------------------------------------------------------------------- routes
async def _events_page(user, query: Query) -> tuple[Page, str]:
    """The page of events, or an empty one and the API's message for a refused filter."""
    try:
        page = await (newest_first(user.api, query) if query.order == "desc" else oldest_first(user.api, query))
    except ApiError as exc:
        if exc.status == 422:
            return Page(), exc.message
        raise
    return page, ""


def _denied(request: Request, user, exc: ApiError) -> HTMLResponse:
    return render(request, "audit_denied.html", user, status_code=403, error=exc)


@router.get("/audit", response_class=HTMLResponse)
async def audit_page(request: Request, fragment: str = "") -> HTMLResponse:
    user = await viewer(request)
    query = Query.of(request)
    if fragment == "audit-events":
        page, error = await _events_page(user, query)
        return render(request, "audit_events.html", user, query=query, page=page, rows=_rows(page.events), error=error)
    try:
        chain = await user.api.get_as(AnchoredVerifyResponse, "/api/v1/audit/verify")
    except ApiError as exc:
        if exc.status == 403:
            return _denied(request, user, exc)
        raise
    query.top_hint = query.top_hint or chain.events
    page, error = await _events_page(user, query)
    head = page.top or (await newest_event(user.api, chain.events) if chain.ok and chain.events else None)
    return render(
        request,
        "audit.html",
        user,
        query=query,
        page=page,
        rows=_rows(page.events),
        error=error,
        chain=chain,
        head=head,
        page_sizes=PAGE_SIZES,
        scan_budget=SCAN_BUDGET,
    )


@router.get("/audit/export.{fmt}")
async def audit_export(request: Request, fmt: str) -> Response:
    """The API's export with the page's filters, fetched with the user's own token (so the
    API's audit.read check applies). In-process calls hand back the whole body at once, so
    this holds one export in memory; very large trails are better exported from the API."""
    user = await viewer(request)
    if fmt not in _EXPORT_TYPES:
        raise ApiError(404, {"code": "not_found", "message": f"export format {fmt!r}: must be csv or jsonl"})
    params = {"format": fmt, **Query.of(request).filters}
    response = await user.api.call("GET", "/api/v1/audit/export", params=params, raw=True)
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = {"message": response.text}
        if response.status_code == 403:
            return _denied(request, user, ApiError(403, body))
        raise ApiError(response.status_code, body)
    disposition = response.headers.get("content-disposition", f'attachment; filename="hetpool-audit.{fmt}"')
    return Response(response.content, media_type=_EXPORT_TYPES[fmt], headers={"Content-Disposition": disposition})
