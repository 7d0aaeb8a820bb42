"""Issue 14, finding 8: dashboard sessions live on the server.

The cookie holds a random session id (not the API token, not derived from it); the server
keeps only its hash. Sign-out deletes the session, so a copied cookie stops working; a
session ends when it is idle too long, when it reaches its absolute lifetime, when the
token it was made from is revoked and when its user is deleted. Each session has its own
CSRF value."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from hetpool.server.app import create_app
from hetpool.server.services.context import ServiceContext
from tests.server.test_access_api import oidc  # noqa: F401 (a fixture)
from tests.web.conftest import csrf_of, sign_in

COOKIE = "hetpool_session"


@pytest.fixture
def app(ctx: ServiceContext, admin_token: str):
    return create_app(ctx=ctx)


@pytest.fixture
def browser(app) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client


def _fresh(app) -> TestClient:
    return TestClient(app)


def _signed_in(client: TestClient) -> bool:
    response = client.get("/", follow_redirects=False)
    assert response.status_code in (200, 303), response.text
    return response.status_code == 200


def _user_token(browser: TestClient, admin_token: str, name: str = "vera") -> tuple[str, int]:
    admin = {"Authorization": f"Bearer {admin_token}"}
    tenant = browser.post("/api/v1/apply", json={"documents": [{"kind": "Tenant", "name": "ai-lab"}]}, headers=admin)
    assert tenant.status_code == 200, tenant.text
    created = browser.post("/api/v1/users", json={"name": name, "bindings": [{"role": "viewer", "tenant": "ai-lab"}]}, headers=admin)
    assert created.status_code == 201, created.text
    token = browser.post(f"/api/v1/users/{name}/tokens", json={"label": "browser"}, headers=admin).json()
    return token["token"], token["id"]


def test_the_cookie_is_a_random_session_id_that_only_the_server_can_resolve(ctx: ServiceContext, app, admin_token: str) -> None:
    first, second = _fresh(app), _fresh(app)
    sign_in(first, admin_token)
    sign_in(second, admin_token)
    a, b = first.cookies[COOKIE], second.cookies[COOKIE]
    assert a != b  # random per sign-in, so not a function of the token
    for value in (a, b):
        assert admin_token not in value and value not in admin_token
        assert hashlib.sha256(admin_token.encode()).hexdigest() not in value
        assert len(value) >= 43  # 256 bits, base64url
    # The server keeps only a hash of it.
    with ctx.db.engine.connect() as conn:
        stored = [tuple(str(v) for v in row) for row in conn.execute(text("SELECT * FROM web_sessions")).all()]
    assert len(stored) == 2 and not any(a in v or b in v or admin_token in v for row in stored for v in row)
    # It is not an API credential: neither as a bearer token nor as a cookie on /api.
    assert first.get("/api/v1/whoami", headers={"Authorization": f"Bearer {a}"}).status_code == 401
    assert first.get("/api/v1/whoami").status_code == 401
    cookie = first.post("/login", data={"token": admin_token, "next": "/"}, follow_redirects=False).headers["set-cookie"]
    assert admin_token not in cookie and "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert "secure" not in cookie.lower()  # plain http here; see the https test


def test_the_cookie_is_secure_over_https(app, admin_token: str) -> None:
    with TestClient(app, base_url="https://testserver") as client:
        cookie = client.post("/login", data={"token": admin_token, "next": "/"}, follow_redirects=False).headers["set-cookie"].lower()
    assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie


def test_a_copied_cookie_stops_working_after_sign_out(app, admin_token: str) -> None:
    owner, thief = _fresh(app), _fresh(app)
    sign_in(owner, admin_token)
    thief.cookies.set(COOKIE, owner.cookies[COOKIE])
    assert _signed_in(thief)
    page = owner.get("/").text
    assert owner.post("/logout", data={"csrf": csrf_of(page)}, follow_redirects=False).status_code == 303
    assert not _signed_in(thief)
    assert not _signed_in(owner)


def test_an_idle_session_and_an_old_session_end(ctx: ServiceContext, app, admin_token: str, monkeypatch) -> None:
    monkeypatch.setattr(ctx.settings, "web_session_idle_s", 600.0)
    monkeypatch.setattr(ctx.settings, "web_session_max_s", 3600.0)
    client = _fresh(app)
    sign_in(client, admin_token)
    ctx.clock.advance(599)
    assert _signed_in(client)  # used in time: the idle timer starts again
    ctx.clock.advance(599)
    assert _signed_in(client)
    ctx.clock.advance(601)
    assert not _signed_in(client)  # idle for longer than 600 s

    sign_in(client, admin_token)
    for _ in range(6):  # kept busy, but 3600 s after sign-in it ends all the same
        ctx.clock.advance(590)
        assert _signed_in(client)
    ctx.clock.advance(590)
    assert not _signed_in(client)


def test_revoking_the_token_or_deleting_the_user_ends_its_sessions(browser: TestClient, app, admin_token: str) -> None:
    token, token_id = _user_token(browser, admin_token, "vera")
    client = _fresh(app)
    sign_in(client, token)
    assert _signed_in(client)
    admin = {"Authorization": f"Bearer {admin_token}"}
    assert browser.delete(f"/api/v1/tokens/{token_id}", headers=admin).status_code in (200, 204)
    assert not _signed_in(client)

    token, _ = _user_token(browser, admin_token, "walt")
    sign_in(client, token)
    assert _signed_in(client)
    assert browser.delete("/api/v1/users/walt", headers=admin).status_code == 204
    assert not _signed_in(client)


def test_two_sessions_of_one_user_are_independent_and_each_has_its_own_csrf(app, admin_token: str) -> None:
    first, second = _fresh(app), _fresh(app)
    sign_in(first, admin_token)
    sign_in(second, admin_token)
    csrf_first, csrf_second = csrf_of(first.get("/").text), csrf_of(second.get("/").text)
    assert csrf_first != csrf_second
    # One session's CSRF value is refused with the other's cookie.
    crossed = second.post("/logout", data={"csrf": csrf_first}, follow_redirects=False)
    assert crossed.status_code == 403 and _signed_in(second)
    assert first.post("/logout", data={"csrf": csrf_first}, follow_redirects=False).status_code == 303
    assert not _signed_in(first) and _signed_in(second)


def test_a_session_from_an_oidc_token_ends_when_that_token_expires(
    ctx: ServiceContext,
    browser: TestClient,
    app,
    admin_token,
    oidc,  # noqa: F811 (the fixture imported above)
    monkeypatch,
) -> None:
    monkeypatch.setattr(ctx.settings, "web_session_idle_s", 86400.0)
    ctx.clock.advance((datetime.now(UTC) - ctx.clock.now()).total_seconds())  # the token's exp is wall-clock time
    _user_token(browser, admin_token, "vera")
    client = _fresh(app)
    sign_in(client, oidc("vera", exp_in=600))
    ctx.clock.advance(590)
    assert _signed_in(client)
    ctx.clock.advance(20)
    assert not _signed_in(client)
