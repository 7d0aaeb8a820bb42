"""In a real browser: sign in with a token, see the refusal of a wrong one, switch the
language and find the Chinese labels, keep the choice across a new sign-in."""

from __future__ import annotations

from tests.e2e.conftest import screenshot, sign_in


def test_sign_in_and_switch_language(page, live_server) -> None:
    page.goto("/")
    assert "/login" in page.url, "a page without a session sends the browser to the login form"
    screenshot(page, "login-en")
    page.fill("#token", "hp_not_a_real_token_000000000000")
    page.click("#login-submit")
    assert "Sign-in failed" in page.inner_text("#login-error")

    sign_in(page, live_server.token)
    assert page.inner_text("#nav").split()[0] == "Overview"
    assert "admin" in page.inner_text("#whoami")

    page.click("#lang-switch")
    page.wait_for_load_state()
    nav = page.inner_text("#nav")
    for label in ("总览", "资源", "任务", "租户与配额", "审批", "成本", "审计", "容量规划"):
        assert label in nav, f"{label} missing from the Chinese navigation: {nav}"
    assert page.get_attribute("html", "lang") == "zh-CN"
    screenshot(page, "overview-zh-CN")

    # The choice belongs to the user: a new browser signing in gets Chinese back.
    fresh = page.context.browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 800})
    other = fresh.new_page()
    sign_in(other, live_server.token)
    assert "总览" in other.inner_text("#nav")
    other.click("#lang-switch")
    other.wait_for_load_state()
    assert "Overview" in other.inner_text("#nav")
    fresh.close()


def test_sign_out(page, live_server) -> None:
    sign_in(page, live_server.token)
    page.click("#logout")
    page.wait_for_url("**/login**")
    page.goto("/?after=logout")
    assert "/login" in page.url
