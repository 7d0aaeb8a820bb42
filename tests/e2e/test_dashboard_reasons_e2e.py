"""Why a task waits, in a real browser (Debian's chromium via Playwright) against a real
`hetpool up --demo`: a queued task's reason is rendered from its reason code and facts in
the reader's language (web/reasons.explanation_text) — Chinese in zh-CN, English in en —
on the task page, where it refreshes live, and in the task list."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.e2e.conftest import screenshot, sign_in
from tests.server.helpers import example_task

pytestmark = pytest.mark.xdist_group("dashboard-reasons-e2e")  # one server for the module


def _a_task_waiting_for_npus(admin_api: httpx.Client) -> str:
    """Two 8-NPU MindSpore jobs that keep running: the demo has room for one at a time."""
    ids = []
    for i in range(2):
        task = {**example_task("mindspore-ascend.yaml"), "name": f"npu-hog-{i}", "command": "sleep 600"}
        response = admin_api.post("/api/v1/tasks", json=task)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        tasks = [admin_api.get(f"/api/v1/tasks/{i}").json() for i in ids]
        waiting = [t for t in tasks if t["state"] == "queued" and (t.get("pending") or {}).get("reason")]
        if waiting and any(t["state"] != "queued" for t in tasks):
            return waiting[0]["id"]
        time.sleep(0.5)
    raise AssertionError(f"no task waits with a reason: {tasks}")


def _cancel_the_hogs(admin_api: httpx.Client) -> None:
    """Cancel the jobs and wait until they have ended: the local engine's processes outlive
    the server (work survives a restart), and a leftover `sleep` would keep its run-as uid
    busy for the engine tests that run next."""
    terminal = ("succeeded", "failed", "cancelled")
    hogs = [t for t in admin_api.get("/api/v1/tasks").json() if t["name"].startswith("npu-hog-")]
    for task in hogs:
        if task["state"] not in terminal:
            admin_api.post(f"/api/v1/tasks/{task['id']}/cancel")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all(admin_api.get(f"/api/v1/tasks/{t['id']}").json()["state"] in terminal for t in hogs):
            return
        time.sleep(0.5)
    raise AssertionError("the npu-hog jobs did not end after being cancelled")


def test_a_waiting_tasks_reason_in_chinese_and_in_english(page, live_server, admin_api: httpx.Client) -> None:
    try:
        _check_the_reason_in_both_languages(page, live_server, admin_api)
    finally:
        _cancel_the_hogs(admin_api)


def _check_the_reason_in_both_languages(page, live_server, admin_api: httpx.Client) -> None:
    task_id = _a_task_waiting_for_npus(admin_api)
    pending = admin_api.get(f"/api/v1/tasks/{task_id}").json()["pending"]
    assert "not enough free devices" in pending["summary"]  # the API keeps its English summary

    sign_in(page, live_server.token)
    page.goto(f"/lang/zh-CN?next=/tasks/{task_id}")
    summary = page.locator("#pending-summary")
    summary.wait_for()
    text = summary.inner_text()
    assert summary.get_attribute("data-reason") == pending["reason"]
    assert text.startswith("等待资源"), text  # waiting_for_capacity / holds_reservation, in Chinese
    assert "空闲设备不足" in text and "个节点均不可用" in text, text  # the filter counts, translated
    assert "not enough free devices" not in text and "waiting for capacity" not in text
    screenshot(page, "task-waiting-zh-CN")
    page.wait_for_timeout(2_500)  # the live part refreshes every 2 s: still in Chinese
    assert "空闲设备不足" in page.inner_text("#pending-summary")

    page.goto("/tasks?state=queued")
    row_reason = page.locator(f"tr[data-task-id='{task_id}'] .pending-reason")
    assert "空闲设备不足" in row_reason.inner_text()

    page.goto(f"/lang/en?next=/tasks/{task_id}")
    text = page.locator("#pending-summary").inner_text()
    assert text.startswith("waiting for capacity") and "not enough free devices" in text, text
    assert "nodes available" in text
    screenshot(page, "task-waiting-en")
