"""Dashboard fixtures: a TestClient signed in through the login form (cookie session),
on the demo inventory, on SQLite and PostgreSQL like the API tests."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from hetpool.server.app import create_app
from hetpool.server.services.context import ServiceContext
from tests.conftest import demo_documents


def sign_in(client: TestClient, token: str) -> TestClient:
    response = client.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
    assert response.status_code == 303, response.text
    assert "hetpool_session" in client.cookies
    return client


def csrf_of(html: str) -> str:
    """The CSRF value a page's forms carry (every signed-in page has one)."""
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html) or re.search(r'"X-CSRF-Token": "([0-9a-f]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


@pytest.fixture
def browser_client(ctx: ServiceContext, admin_token: str) -> Iterator[TestClient]:
    """Signed in as the admin, with the demo inventory applied through the API."""
    # Page tests move the FixedClock through weeks (cost periods, utilisation windows): their
    # sessions must outlive the trip. Session expiry itself: test_sessions_server_side.py.
    ctx.settings.web_session_idle_s = ctx.settings.web_session_max_s = 366 * 86400.0
    app = create_app(ctx=ctx)
    with TestClient(app) as client:
        documents, sources = demo_documents()
        response = client.post("/api/v1/apply", json={"documents": documents, "sources": sources}, headers={"Authorization": f"Bearer {admin_token}"})
        assert response.status_code == 200, response.text
        yield sign_in(client, admin_token)
