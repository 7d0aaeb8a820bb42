"""Signing in and out of the dashboard, the language switch, and the CSRF guard."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hetpool.server.app import create_app
from tests.web.conftest import csrf_of, sign_in


@pytest.fixture
def anonymous(ctx, admin_token):
    with TestClient(create_app(ctx=ctx)) as client:
        yield client


def test_pages_redirect_to_the_login_form_without_a_session(anonymous: TestClient) -> None:
    response = anonymous.get("/?view=pools", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/%3Fview%3Dpools"
    assert "token" in anonymous.get("/login").text


def test_a_wrong_token_is_refused_with_the_reason(anonymous: TestClient) -> None:
    response = anonymous.post("/login", data={"token": "hp_wrong", "next": "/"}, follow_redirects=False)
    assert response.status_code == 401
    assert 'id="login-error"' in response.text
    assert "hetpool_session" not in anonymous.cookies


def test_login_keeps_only_same_site_next_paths(anonymous: TestClient, admin_token: str) -> None:
    response = anonymous.post("/login", data={"token": admin_token, "next": "https://evil.example/x"}, follow_redirects=False)
    assert response.headers["location"] == "/"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie


def test_sign_out_ends_the_session(anonymous: TestClient, admin_token: str) -> None:
    sign_in(anonymous, admin_token)
    assert anonymous.get("/", follow_redirects=False).status_code == 200
    anonymous.post("/logout", data={"csrf": csrf_of(anonymous.get("/").text)}, follow_redirects=False)
    assert anonymous.get("/", follow_redirects=False).status_code == 303


def test_language_choice_is_remembered_per_user(anonymous: TestClient, admin_token: str) -> None:
    sign_in(anonymous, admin_token)
    assert "总览" not in anonymous.get("/").text
    anonymous.get("/lang/zh-CN?next=/", follow_redirects=False)
    headers = {"Authorization": f"Bearer {admin_token}"}
    assert anonymous.get("/api/v1/whoami", headers=headers).json()["language"] == "zh-CN"
    # A new browser (no cookies) signing in as the same user gets Chinese back.
    anonymous.cookies.clear()
    sign_in(anonymous, admin_token)
    page = anonymous.get("/").text
    assert "总览" in page and 'lang="zh-CN"' in page


def test_preference_api_names_the_allowed_languages(anonymous: TestClient, admin_token: str) -> None:
    response = anonymous.put("/api/v1/whoami/preferences", json={"language": "fr"}, headers={"Authorization": f"Bearer {admin_token}"})
    assert response.status_code == 422
    assert "en, zh-CN" in response.json()["message"]


def test_static_assets_are_served_locally(anonymous: TestClient) -> None:
    for asset in ("htmx.min.js", "echarts.min.js", "app.js", "app.css"):
        assert anonymous.get(f"/static/{asset}").status_code == 200


def test_templates_hold_no_untranslated_text() -> None:
    """Visible text comes from the catalogs (_(), ngettext(), {% trans %}): strip Jinja and
    tags and no English words may remain (product names and units excepted)."""
    import re
    from pathlib import Path

    import hetpool.web

    allowed = {"hetpool", "UTC", "nbsp"}
    offenders = {}
    for template in sorted((Path(hetpool.web.__file__).parent / "templates").glob("*.html")):
        text = template.read_text()
        for pattern in (
            r"\{#.*?#\}",
            r"\{%-? *trans\b.*?endtrans *-?%\}",
            r"\{%.*?%\}",
            r"\{\{.*?\}\}",
            r"<script.*?</script>",
            r"<style.*?</style>",
            r"<[^>]*?(?:\"[^\"]*\"[^>]*?)*>",
        ):
            text = re.sub(pattern, " ", text, flags=re.S)
        words = set(re.findall(r"[A-Za-z]{3,}", text)) - allowed
        if words:
            offenders[template.name] = sorted(words)
    assert not offenders, f"text outside _(...): {offenders}"
