"""The dashboard in a real browser (Debian's chromium via Playwright) against a real
`hetpool up --demo`: submit a task from a template and watch it run, approve a request,
and visit every page in English and Chinese at 1920 and 1280 px, saving a screenshot of
each into artifacts/dashboard/.

The tests in this module share one server and run in order: the task submitted first
gives the later pages (task page, cost, audit, capacity) something to show."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.e2e.conftest import screenshot, sign_in
from tests.server.helpers import example_task

pytestmark = pytest.mark.xdist_group("dashboard-e2e")  # one server for the module: keep its tests on one worker

TENANT = "ai-lab/nlp/llm-sft"
CHINESE_HEADINGS = {
    "/": "总览",
    "/resources": "资源",
    "/tasks": "任务",
    "/tenants": "租户",
    "/approvals": "审批",
    "/cost": "成本",
    "/audit": "审计",
    "/capacity": "容量",
}
_state: dict[str, str] = {}


def test_submit_from_a_template_see_the_plan_and_watch_it_run(page, live_server) -> None:
    sign_in(page, live_server.token, "/tasks/new")
    page.select_option("#template", "pytorch-ddp")
    page.fill("#name", "e2e-ddp")
    page.fill("#tenant", TENANT)
    page.fill("#command", 'echo "hello from rank $HETPOOL_WORKER_RANK"; sleep 2; echo done')
    screenshot(page, "task-new-en")
    page.click("#plan-button")
    plan = page.locator("#plan-result")
    plan.wait_for()
    assert plan.get_attribute("data-feasible") == "true"
    chosen = page.locator("#plan-candidates tr[data-chosen='true']")
    assert chosen.count() >= 1, "the plan names the pool it would use"
    assert page.locator("#plan-cost").inner_text().strip(), "the plan shows an estimated cost"
    screenshot(page, "task-plan-en")

    page.click("#confirm-submit")
    page.wait_for_url(re.compile(r"/tasks/t-[0-9a-f]{10}$"))
    task_id = page.url.rsplit("/", 1)[1]
    _state["task_id"] = task_id
    # The page is not reloaded while the task runs: the state and the log arrive live.
    page.evaluate("window.__stayed = true")
    page.wait_for_selector("#task-state[data-state='succeeded']", timeout=60_000)
    page.wait_for_function("document.querySelector('#log-text') && document.querySelector('#log-text').innerText.includes('done')", timeout=30_000)
    assert page.evaluate("window.__stayed === true"), "the task page reloaded instead of refreshing in place"
    assert "hello from rank 0" in page.inner_text("#log-text")
    assert page.locator("#timeline tr[data-state='running']").count() >= 1
    assert page.locator("#placement tr[data-node]").count() == 2, "two DDP workers, each placed on a node"
    assert page.locator("#cancel-task").count() == 0, "a finished task cannot be cancelled"
    screenshot(page, "task-detail-en")


def test_approve_a_request_from_the_inbox(page, live_server, admin_api: httpx.Client) -> None:
    policy = {"kind": "ApprovalPolicy", "name": "e2e-big-jobs", "tenant": "ai-lab", "over_quota": False, "budget_exceeded": False, "max_devices": 1}
    assert admin_api.post("/api/v1/apply", json={"documents": [policy]}).status_code == 200
    task = {**example_task("pytorch-ddp-training.yaml"), "name": "needs-approval", "env": "dev"}
    submitted = admin_api.post("/api/v1/tasks", json=task).json()
    assert submitted["state"] == "pending_approval", submitted
    approval_id = submitted["approval"]["id"]

    sign_in(page, live_server.token, "/approvals")
    row = page.locator(f"tr[data-approval-id='{approval_id}']")
    row.wait_for()
    assert row.get_attribute("data-state") == "pending"
    row.locator("textarea[name=comment]").fill("approved in the e2e test")
    screenshot(page, "approvals-en")
    row.locator("button.approve").click()
    page.wait_for_load_state()
    assert page.locator("#approvals-decided-table").inner_text().count("approved in the e2e test") == 1
    assert admin_api.get(f"/api/v1/tasks/{submitted['id']}").json()["state"] != "pending_approval"
    # Keep the remaining pages' screenshots uncluttered: the policy has done its job.
    admin_api.delete("/api/v1/objects/approvalpolicies/e2e-big-jobs")


@pytest.fixture(scope="module")
def finished_task(admin_api: httpx.Client) -> str:
    """A task that has run on this server, whatever ran before (the pages need history)."""
    task = {**example_task("data-prep.yaml"), "name": "history-for-the-pages", "command": "echo ready"}
    created = admin_api.post("/api/v1/tasks", json=task)
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    deadline = time.monotonic() + 60
    while (state := admin_api.get(f"/api/v1/tasks/{task_id}").json()["state"]) != "succeeded":
        assert state not in ("failed", "cancelled") and time.monotonic() < deadline, f"{task_id} is {state}"
        time.sleep(0.3)
    return task_id


def _pages(finished: str) -> list[tuple[str, str]]:
    task_id = _state.get("task_id", finished)
    pages = [
        ("overview", "/"),
        ("resources", "/resources"),
        ("pool", "/pools/bj-a100-80g"),
        ("tasks", "/tasks"),
        ("task-new", "/tasks/new"),
        ("tenants", "/tenants"),
        ("approvals", "/approvals"),
        ("cost", "/cost"),
        ("audit", "/audit"),
        ("capacity", "/capacity?days=30&add_count=8&add_model=nvidia-a100-80g&run=1"),
    ]
    pages.append(("task-detail", f"/tasks/{task_id}"))
    return pages


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_every_page_in_both_languages(page, live_server, finished_task: str, lang: str) -> None:
    sign_in(page, live_server.token)
    page.goto(f"/lang/{lang}?next=/")
    for name, path in _pages(finished_task):
        response = page.goto(path)
        status = response.status if response else "?"
        assert status == 200, f"{path}: HTTP {status}: {page.inner_text('main')[:500]}"
        page.wait_for_load_state("networkidle")
        assert page.get_attribute("html", "lang") == lang
        heading = page.inner_text("main h1")
        if lang == "zh-CN":
            base = "/" + path.lstrip("/").split("/")[0].split("?")[0] if path != "/" else "/"
            expected = CHINESE_HEADINGS.get(base)
            assert re.search(r"[\u4e00-\u9fff]", heading), f"{path}: heading {heading!r} is not in Chinese"
            if expected and name not in ("pool", "task-detail", "task-new"):
                assert expected in heading or expected in page.inner_text("#nav a.active"), f"{path}: {heading!r}"
        charts = page.locator("[data-chart]")
        for i in range(charts.count()):  # every chart on the page was drawn by ECharts
            page.wait_for_function("(el) => el.getAttribute('data-chart-ready') === '1'", arg=charts.nth(i).element_handle())
        screenshot(page, f"{name}-{lang}")


def test_usable_at_1280_pixels(browser, live_server, finished_task: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=live_server.url)
    tab = context.new_page()
    sign_in(tab, live_server.token)
    tab.goto("/lang/en?next=/")
    for _name, path in _pages(finished_task):
        tab.goto(path)
        tab.wait_for_load_state("networkidle")
        overflow = tab.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at 1280 px"
    screenshot(tab, "overview-1280-en")
    context.close()


def test_overview_numbers_refresh_without_a_reload(page, live_server, admin_api: httpx.Client) -> None:
    sign_in(page, live_server.token)
    page.goto("/lang/en?next=/")
    page.evaluate("window.__stayed = true")
    before = page.inner_text("#card-waiting")
    task = {**example_task("pytorch-ddp-training.yaml"), "name": "too-big-to-start", "per_worker": {"devices": {"count": 8, "class": "gpu"}}}
    task["workers"] = 8
    response = admin_api.post("/api/v1/tasks", json=task)
    assert response.status_code in (201, 422), response.text
    if response.status_code == 201:
        page.wait_for_function("(b) => document.querySelector('#card-waiting').innerText !== b", arg=before, timeout=20_000)
        assert page.evaluate("window.__stayed === true")
        admin_api.post(f"/api/v1/tasks/{response.json()['id']}/cancel")
