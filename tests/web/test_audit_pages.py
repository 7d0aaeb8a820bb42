"""The audit page (/audit): events appear after an action, filters and free text narrow them,
paging newest-first and oldest-first covers the trail exactly once, a tampered chain shows
red, exports stream through the dashboard, and only audit readers get in."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from hetpool.server.services.context import ServiceContext
from hetpool.web.pages import audit as audit_page
from tests.web.conftest import sign_in


def as_admin(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ids_on(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-audit-id="(\d+)"', page)]


def attr_on(page: str, name: str) -> list[str]:
    return re.findall(rf'<tr data-audit-id="\d+"[^>]* {name}="([^"]*)"', page)


def chain_status(page: str) -> dict[str, str]:
    match = re.search(r'<p id="chain-status"([^>]*)>(.*?)</p>', page, re.S)
    assert match, "no chain status"
    attrs = dict(re.findall(r'(data-[a-z]+)="([^"]*)"', match.group(1)))
    return {**attrs, "class": re.search(r'class="([^"]*)"', match.group(1)).group(1), "text": html_lib.unescape(match.group(2))}


def next_link(page: str, name: str) -> str | None:
    match = re.search(rf'<a id="{name}" href="([^"]+)"', page)
    return html_lib.unescape(match.group(1)) if match else None


def user_client(app_client: TestClient, admin_token: str, name: str, role: str, tenant: str | None = None) -> TestClient:
    created = app_client.post("/api/v1/users", json={"name": name, "bindings": [{"role": role, "tenant": tenant}]}, headers=as_admin(admin_token))
    assert created.status_code == 201, created.text
    token = app_client.post(f"/api/v1/users/{name}/tokens", json={"label": "web"}, headers=as_admin(admin_token)).json()["token"]
    return sign_in(TestClient(app_client.app), token)


def test_new_events_appear_on_top_with_a_verified_chain(browser_client: TestClient, admin_token: str) -> None:
    page = browser_client.get("/audit")
    assert page.status_code == 200
    status = chain_status(page.text)
    ids = ids_on(page.text)
    assert status["data-ok"] == "true" and int(status["data-events"]) == max(ids) == int(status["data-head"])
    assert "Chain verified ✓" in status["text"] and f"head #{max(ids)}" in status["text"]
    assert ids == sorted(ids, reverse=True) and len(ids) == min(50, max(ids))
    created = browser_client.post(
        "/api/v1/users", json={"name": "zoe", "bindings": [{"role": "viewer", "tenant": "infra"}]}, headers=as_admin(admin_token)
    )
    assert created.status_code == 201
    page = browser_client.get("/audit").text
    row = re.search(r'<tr data-audit-id="(\d+)"[^>]*>.*?</tr>', page, re.S).group(0)
    assert 'data-action="user.create"' in row and 'data-object-id="zoe"' in row and 'data-actor="admin"' in row
    assert 'data-change="added"' in row and "bindings" in row  # the diff summary names what was set
    assert 'hx-get="/audit?' in page and "fragment=audit-events" in page  # the newest page refreshes itself
    fragment = browser_client.get("/audit", params={"fragment": "audit-events"}).text
    assert "<html" not in fragment and ids_on(fragment) == ids_on(page)


def test_filters_and_free_text_narrow_the_trail(browser_client: TestClient, admin_token: str) -> None:
    for name in ("yann", "yusuf"):
        browser_client.post("/api/v1/users", json={"name": name, "bindings": [{"role": "viewer", "tenant": "infra"}]}, headers=as_admin(admin_token))
    everything = ids_on(browser_client.get("/audit", params={"limit": 500}).text)
    exact = browser_client.get("/audit", params={"action": "user.create"}).text
    assert set(attr_on(exact, "data-action")) == {"user.create"} and len(ids_on(exact)) == 3  # admin, yann, yusuf
    prefix = browser_client.get("/audit", params={"action": "user.*", "order": "asc"}).text
    assert all(a.startswith("user.") for a in attr_on(prefix, "data-action")) and ids_on(prefix) == sorted(ids_on(prefix))
    by_object = browser_client.get("/audit", params={"object_kind": "User", "object_id": "yann"}).text
    assert set(attr_on(by_object, "data-object-id")) == {"yann"}
    free = browser_client.get("/audit", params={"q": "YUS"}).text  # case-insensitive, in any field
    assert set(attr_on(free, "data-object-id")) == {"yusuf"} and 'value="YUS"' in free
    later = browser_client.get("/audit", params={"since": "2030-01-01T00:00:00Z"}).text
    assert ids_on(later) == [] and "No events match." in later
    assert 0 < len(ids_on(exact)) < len(everything)
    # A filter the API refuses is explained, not a crash.
    page = browser_client.get("/audit", params={"since": "last tuesday"})
    assert page.status_code == 200
    error = re.search(r'<p id="audit-error" class="error">(.*?)</p>', page.text).group(1)
    assert "since: expected an ISO time" in html_lib.unescape(error)


def test_paging_visits_every_event_once(browser_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny pages and API reads, so windows, galloping and cursors are all exercised.
    monkeypatch.setattr(audit_page, "PAGE_SIZES", (9,))
    monkeypatch.setattr(audit_page, "API_PAGE", 4)
    total = int(chain_status(browser_client.get("/audit").text)["data-events"])
    for order in ("desc", "asc"):
        seen, url = [], f"/audit?order={order}&limit=9"
        while url:
            page = browser_client.get(url).text
            assert len(ids_on(page)) <= 9
            seen += ids_on(page)
            url = next_link(page, "audit-older" if order == "desc" else "audit-later")
        expected = list(range(1, total + 1))
        assert seen == (expected[::-1] if order == "desc" else expected)
        assert next_link(browser_client.get(f"/audit?order={order}&limit=9&before=20&after=20").text, "audit-first")


def test_free_text_search_stops_at_its_budget_and_continues(browser_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_page, "SCAN_BUDGET", 10)
    monkeypatch.setattr(audit_page, "API_PAGE", 4)
    page = browser_client.get("/audit", params={"q": "user.create"}).text  # the first event only
    assert ids_on(page) == [] and 'id="audit-scan-stopped"' in page
    seen, url = [], next_link(page, "audit-continue")
    while url:
        page = browser_client.get(url).text
        seen += ids_on(page)
        url = next_link(page, "audit-continue") or next_link(page, "audit-older")
    assert seen == [1]


def test_a_tampered_chain_is_shown_broken(ctx: ServiceContext, browser_client: TestClient) -> None:
    with ctx.db.transaction() as session:
        session.execute(text("UPDATE audit_events SET actor = 'mallory' WHERE id = 5"))
    status = chain_status(browser_client.get("/audit").text)
    assert status["data-ok"] == "false" and status["data-bad"] == "5" and "error" in status["class"]
    assert "Chain broken at event #5" in status["text"] and "modified" in status["text"]
    around = next_link(browser_client.get("/audit").text, "chain-around")
    assert 5 in ids_on(browser_client.get(around).text)
    chinese = browser_client.get("/audit", params={"lang": "zh-CN"}).text
    assert "哈希链在事件 #5 处断裂" in chinese


def test_exports_go_through_the_dashboard_with_the_filters(browser_client: TestClient) -> None:
    csv = browser_client.get("/audit/export.csv", params={"action": "user.create"})
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in csv.headers["content-disposition"]
    lines = csv.text.strip().splitlines()
    assert lines[0].startswith("id,ts,actor,action") and len(lines) == 2 and ",user.create," in lines[1]
    jsonl = browser_client.get("/audit/export.jsonl")
    assert jsonl.status_code == 200 and jsonl.text.count("\n") >= 10
    page = browser_client.get("/audit", params={"action": "user.create"}).text
    assert 'href="/audit/export.csv?action=user.create"' in page
    assert browser_client.get("/audit/export.xml").status_code == 404


def test_only_audit_readers_see_the_trail(browser_client: TestClient, admin_token: str) -> None:
    member = user_client(browser_client, admin_token, "mia", "member", "ai-lab/nlp")
    denied = member.get("/audit")
    assert denied.status_code == 403 and 'id="audit-denied"' in denied.text and "Not allowed" in denied.text
    assert "audit.read" in html_lib.unescape(denied.text)
    assert 'href="/audit"' not in member.get("/").text  # not in the navigation either
    assert member.get("/audit/export.csv").status_code == 403
    auditor = user_client(browser_client, admin_token, "otto", "auditor")
    allowed = auditor.get("/audit", params={"lang": "zh-CN"})
    assert allowed.status_code == 200 and "审计记录" in allowed.text and chain_status(allowed.text)["data-ok"] == "true"
    assert ids_on(allowed.text)
