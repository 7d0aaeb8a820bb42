"""The goal form in a real browser against a real `hetpool up --demo`: from the new-task page
to the goal form, fill in the 8B LoRA example, get the options side by side (English, then
Chinese after switching the language), submit one option and land on its task page.
Screenshots: goal-form-en, goal-options-en, goal-options-zh-CN, goal-options-1280-en and
goal-submitted-zh-CN under artifacts/dashboard/."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.e2e.conftest import screenshot, sign_in

pytestmark = pytest.mark.xdist_group("goal-form-e2e")  # one server for the module: keep its tests on one worker

TENANT = "ai-lab/nlp/llm-sft"
GOAL = {
    "#tenant": TENANT,
    "#name": "e2e-sft-8b",
    "#framework": "pytorch",
    "#framework_version": ">=2.4",
    "#model": "llama3.1-8b",
    "#seq_len": "4096",
    "#tokens": "2e9",
    "#deadline": "48h",
    "#max_cost": "2000",
    "#command": "echo tuned",
}


def fill_goal(tab) -> None:
    for selector, value in GOAL.items():
        tab.fill(selector, value)
    tab.select_option("#method", "lora")
    tab.select_option("#precision", "bf16")


def recommend(tab) -> int:
    """Click Recommend; the number of option cards shown."""
    tab.click("#recommend-button")
    tab.locator("#goal-result").wait_for()
    cards = tab.locator("#goal-options .goal-option")
    shown = cards.count()
    assert shown == int(tab.get_attribute("#goal-result", "data-options")) >= 2
    return shown


def test_fill_the_goal_compare_the_options_and_submit_one(page, live_server, admin_api: httpx.Client) -> None:
    sign_in(page, live_server.token, "/tasks/new")
    page.goto("/lang/en?next=/tasks/new")
    page.click("#goal-form-link")
    page.wait_for_url(re.compile(r"/tasks/new/goal$"))
    options = page.locator("#model-options option")
    assert options.count() >= 10 and "llama3.1-8b" in [options.nth(i).get_attribute("value") for i in range(options.count())]
    fill_goal(page)
    screenshot(page, "goal-form-en")

    shown = recommend(page)
    first = page.locator("#goal-options .goal-option").first
    assert first.get_attribute("data-rank") == "1" and "best" in (first.get_attribute("class") or "")
    assert first.locator(".target[data-target='deadline']").count() == 1, "each target is a met/missed badge"
    assert first.locator(".option-reasons li").count() >= 2, "the card says why"
    assert re.search(r"\d+ × \S+", first.locator("header .what b").inner_text())
    # Side by side: the first row of cards shares one top edge, at different left edges.
    boxes = [page.locator("#goal-options .goal-option").nth(i).bounding_box() for i in range(min(shown, 3))]
    assert len({round(b["y"]) for b in boxes}) == 1 and len({round(b["x"]) for b in boxes}) == len(boxes)
    assert page.locator("#goal-excluded tr[data-pool]").count() >= 1, "the pools left out, with the reason"
    screenshot(page, "goal-options-en")

    page.set_viewport_size({"width": 1280, "height": 900})
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the options scroll sideways by {overflow}px at 1280 px"
    screenshot(page, "goal-options-1280-en")
    page.set_viewport_size({"width": 1920, "height": 1080})

    page.click("#lang-switch")  # to Chinese: back on the (empty) goal form
    page.wait_for_url(re.compile(r"/tasks/new/goal$"))
    assert page.get_attribute("html", "lang") == "zh-CN"
    assert "按目标提交任务" in page.inner_text("main h1")
    fill_goal(page)
    assert recommend(page) == shown
    assert "提交此方案" in page.inner_text("#goal-options") and "截止时间" in page.inner_text("#goal-options")
    screenshot(page, "goal-options-zh-CN")

    chosen = page.locator("#goal-options .goal-option").nth(1)
    pool, model, count = chosen.get_attribute("data-pool"), chosen.get_attribute("data-model"), int(chosen.get_attribute("data-count"))
    chosen.locator("button.submit-option-button").click()
    page.wait_for_url(re.compile(r"/tasks/t-[0-9a-f]{10}$"))
    page.locator("#task-state").wait_for()
    task_id = page.url.rsplit("/", 1)[1]
    task = admin_api.get(f"/api/v1/tasks/{task_id}").json()
    spec = task["spec"]
    assert task["name"] == "e2e-sft-8b" and task["tenant"] == TENANT and spec["fallback"][0] == pool
    assert spec["workers"] * spec["per_worker"]["devices"]["count"] == count and spec["goal"]["model"] == "llama3.1-8b"
    assert model, "the card names its device model"
    screenshot(page, "goal-submitted-zh-CN")
    admin_api.post(f"/api/v1/tasks/{task_id}/cancel")
    admin_api.put("/api/v1/whoami/preferences", json={"language": "en"})
