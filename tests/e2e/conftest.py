"""Browser end-to-end fixtures: a real `hetpool up --demo` server process (SQLite, with
its scheduler, dispatcher and local backend running) and Debian's headless Chromium
driven by Playwright. `make test` installs the browser (deploy/chromium.sh) and sets
HETPOOL_TEST_CHROMIUM; without it these tests skip.

Every page visited is saved as a screenshot under artifacts/dashboard/ (docs/dashboard.md
shows them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.test_cli_e2e import Server
from tests.conftest import REPO

CHROMIUM = os.environ.get("HETPOOL_TEST_CHROMIUM", "")
ARTIFACTS = Path(os.environ.get("HETPOOL_ARTIFACTS", REPO / "artifacts")) / "dashboard"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def live_server(tmp_path_factory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("dashboard")
    server = Server(data / "data", f"sqlite:///{data / 'hetpool.db'}")
    server.start()
    assert server.token, "the admin token is printed at first start"
    yield server
    server.stop()


@pytest.fixture(scope="module")
def admin_api(live_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, headers={"Authorization": f"Bearer {live_server.token}"}, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM:
        pytest.skip("HETPOOL_TEST_CHROMIUM not set (make test installs Debian's chromium with deploy/chromium.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server: Server):
    """A fresh browser context (no cookies) at 1920×1080, pointed at the live server."""
    context = browser.new_context(viewport={"width": 1920, "height": 1080}, base_url=live_server.url, locale="en-US")
    context.set_default_timeout(15_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def screenshot(tab, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    tab.wait_for_load_state("networkidle")
    tab.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5_000, f"{path} looks empty"
    return path


def sign_in(tab, token: str, next_path: str = "/") -> None:
    tab.goto(f"/login?next={next_path}")
    tab.fill("#token", token)
    tab.click("#login-submit")
    tab.wait_for_url(lambda url: "/login" not in url)
