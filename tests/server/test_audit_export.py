"""The audit trail through the API: filters by actor, object, action and time; export as
JSON lines and CSV; verify finds a truncated or extended trail, not just a changed event."""

from __future__ import annotations

import csv
import io
import json

from fastapi.testclient import TestClient
from sqlalchemy import text

from hetpool.server.services import audit
from hetpool.server.services.context import ServiceContext

COLUMNS = ["id", "ts", "actor", "action", "object_kind", "object_id", "before", "after", "prev_hash", "hash"]


def _events(ctx: ServiceContext) -> None:
    """Six events an hour apart: 2026-01-01T00:00 .. 05:00 (the fixture clock starts at 00:00)."""
    rows = [
        ("alice", "quota.change", "Quota", "q-nlp", {"devices": 8}, {"devices": 16}),
        ("bob", "task.submit", "Task", "t-1", None, {"state": "queued"}),
        ("scheduler", "task.admitted", "Task", "t-1", {"state": "queued"}, {"state": "admitted"}),
        ("reclaimer", "task.reclaim_notice", "Task", "t-1", None, {"reason": 'idle, "quoted"'}),
        ("reclaimer", "task.reclaim", "Task", "t-1", {"state": "running"}, {"state": "queued"}),
        ("alice", "inventory.apply", "Pool", "bj-h800", None, {"generation": 2}),
    ]
    for actor, action, kind, object_id, before, after in rows:
        with ctx.db.transaction() as session:
            audit.record(session, actor=actor, action=action, object_kind=kind, object_id=object_id, before=before, after=after, ts=ctx.clock.now())
        ctx.clock.advance(3600)


ACTORS = {"alice", "bob", "scheduler", "reclaimer"}  # the API's own events (token use …) are left out


def _ids(api: TestClient, **params) -> list[int]:
    response = api.get("/api/v1/audit", params=params)
    assert response.status_code == 200, response.text
    return [e["id"] for e in response.json() if e["actor"] in ACTORS]


def test_filters_by_actor_object_action_and_time(ctx: ServiceContext, api: TestClient) -> None:
    _events(ctx)
    every = [e for e in api.get("/api/v1/audit").json() if e["actor"] in ACTORS]
    assert [e["action"] for e in every] == ["quota.change", "task.submit", "task.admitted", "task.reclaim_notice", "task.reclaim", "inventory.apply"]
    ids = {e["action"]: e["id"] for e in every}
    assert _ids(api, actor="alice") == [ids["quota.change"], ids["inventory.apply"]]
    assert _ids(api, object_kind="Task", object_id="t-1") == [ids[a] for a in ("task.submit", "task.admitted", "task.reclaim_notice", "task.reclaim")]
    assert _ids(api, action="task.reclaim") == [ids["task.reclaim"]]
    assert _ids(api, action="task.reclaim*") == [ids["task.reclaim_notice"], ids["task.reclaim"]]
    assert _ids(api, object_kind="Pool") == [ids["inventory.apply"]]
    # since inclusive, until exclusive; a zone-less time is UTC, other zones are converted.
    assert _ids(api, since="2026-01-01T01:00:00Z", until="2026-01-01T03:00:00") == [ids["task.submit"], ids["task.admitted"]]
    assert _ids(api, since="2026-01-01T11:30:00+08:00", actor="reclaimer") == [ids["task.reclaim"]]
    # A duration counts back from now (the clock is at 06:00): the last two hours.
    assert _ids(api, since="2h") == [ids["task.reclaim"], ids["inventory.apply"]]
    assert _ids(api, until="5h", actor="alice") == [ids["quota.change"]]
    bad = api.get("/api/v1/audit", params={"since": "yesterday-ish"})
    assert bad.status_code == 422 and "since" in bad.json()["message"]


def test_export_as_json_lines_and_csv(ctx: ServiceContext, api: TestClient) -> None:
    _events(ctx)
    listed = api.get("/api/v1/audit", params={"object_id": "t-1"}).json()
    response = api.get("/api/v1/audit/export", params={"format": "jsonl", "object_id": "t-1"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines == listed and all(list(line) == COLUMNS or set(line) == set(COLUMNS) for line in lines)
    assert lines[0]["prev_hash"] != lines[0]["hash"] and lines[1]["prev_hash"] == lines[0]["hash"]
    response = api.get("/api/v1/audit/export", params={"format": "csv", "action": "task.reclaim*"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.text)))
    assert rows[0] == COLUMNS and len(rows) == 3
    notice = dict(zip(COLUMNS, rows[1], strict=True))
    assert notice["action"] == "task.reclaim_notice" and notice["before"] == ""
    assert json.loads(notice["after"]) == {"reason": 'idle, "quoted"'}
    assert notice["ts"] == "2026-01-01T03:00:00.000000Z"
    whole = api.get("/api/v1/audit/export").text.splitlines()
    assert len(whole) == api.get("/api/v1/audit/verify").json()["events"]
    assert api.get("/api/v1/audit/export", params={"format": "xml"}).status_code == 422


def test_export_pages_through_a_long_trail(ctx: ServiceContext, api: TestClient, monkeypatch) -> None:
    monkeypatch.setattr(audit, "_PAGE", 4)
    _events(ctx)
    _events(ctx)
    lines = api.get("/api/v1/audit/export").text.splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert ids == sorted(set(ids)) and len(ids) == api.get("/api/v1/audit/verify").json()["events"]
    assert api.get("/api/v1/audit/verify").json()["ok"] is True  # verify pages too


def audit_head(ctx: ServiceContext) -> int:
    with ctx.db.transaction() as session:
        return session.execute(text("SELECT last_id FROM audit_head")).scalar_one()


def _sql(ctx: ServiceContext, statement: str, **params) -> None:
    with ctx.db.transaction() as session:
        session.execute(text(statement), params)


def test_verify_finds_a_truncated_trail_even_after_new_events(ctx: ServiceContext, api: TestClient) -> None:
    _events(ctx)
    last = audit_head(ctx)
    _sql(ctx, "DELETE FROM audit_events WHERE id = :i", i=last)
    with ctx.db.transaction() as session:
        broken = audit.verify(session)  # not through the API: a request may itself be audited (token use)
    assert broken.event_id == last and "missing" in broken.problem
    _events(ctx)  # writing on does not hide it: the next event links to the deleted one
    result = api.get("/api/v1/audit/verify").json()
    assert result["ok"] is False and result["first_bad_event"] == last + 1 and f"event(s) {last} are missing" in result["problem"]
    assert api.get("/api/v1/audit", params={"after_id": last - 1}).json()[0]["id"] == last + 1  # the id is not reused


def test_verify_finds_a_well_formed_appended_event_and_a_missing_head(ctx: ServiceContext, api: TestClient) -> None:
    from hetpool.governance.audit import event_hash

    _events(ctx)
    last = api.get("/api/v1/audit", params={"after_id": audit_head(ctx) - 1}).json()[-1]
    fields = {
        "ts": "2026-01-02T00:00:00.000000",
        "actor": "alice",
        "action": "x",
        "object_kind": "Task",
        "object_id": "t-9",
        "before": None,
        "after": None,
    }
    forged = event_hash(last["hash"], fields)
    _sql(
        ctx,
        "INSERT INTO audit_events (id, ts, actor, action, object_kind, object_id, before, after, prev_hash, hash) "
        "VALUES (:i, :ts, 'alice', 'x', 'Task', 't-9', 'null', 'null', :p, :h)",
        i=last["id"] + 1,
        ts="2026-01-02 00:00:00.000000",
        p=last["hash"],
        h=forged,
    )
    result = api.get("/api/v1/audit/verify").json()
    assert result["ok"] is False and result["first_bad_event"] == last["id"] + 1 and "inserted" in result["problem"]
    _sql(ctx, "DELETE FROM audit_events WHERE id = :i", i=last["id"] + 1)
    assert api.get("/api/v1/audit/verify").json()["ok"] is True
    _sql(ctx, "DELETE FROM audit_head")
    result = api.get("/api/v1/audit/verify").json()
    assert result["ok"] is False and "head" in result["problem"]
