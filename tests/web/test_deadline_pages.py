"""Deadlines on the dashboard: a task whose deadline is at risk carries a badge in the task
list and an entry in the overview's alerts, and why it waits says so — in English and in
Chinese. A task on time, or without a deadline, has neither."""

from __future__ import annotations

import re
from datetime import timedelta

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.scheduler import schedule_once
from tests.web.test_overview import element

H800 = "nvidia-h800"
TASK = {
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "framework": {"name": "pytorch", "version": ">=2.4"},
    "per_worker": {"devices": {"class": "gpu", "count": 8, "models": [H800]}, "cpu": 8, "memory_gb": 64},
    "runtime_estimate": "10h",  # ~3h41m on the H800s
    "command": "true",
}


def _submit(client: TestClient, token: str, name: str, **fields) -> str:
    response = client.post("/api/v1/tasks", json={**TASK, "name": name, **fields}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _row(html: str, task_id: str) -> str:
    match = re.search(rf'<tr data-task-id="{task_id}".*?</tr>', html, re.S)
    assert match, f"no row for {task_id}"
    return match.group(0)


def _estate(ctx: ServiceContext, client: TestClient, token: str) -> tuple[str, str, str]:
    """The H800s held for ~3h41m; behind them one task due in 5h (at risk) and one due in
    2 days (on time); and one task without a deadline."""
    now = ctx.clock.now()
    _submit(client, token, "holder")
    schedule_once(ctx)
    late = _submit(client, token, "due-soon", goal={"deadline": (now + timedelta(hours=5)).isoformat()})
    on_time = _submit(client, token, "due-later", goal={"deadline": (now + timedelta(days=2)).isoformat()}, priority="low")
    plain = _submit(client, token, "no-deadline", priority="low")
    schedule_once(ctx)
    return late, on_time, plain


def test_a_task_at_risk_has_a_badge_in_the_task_list(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> None:
    late, on_time, plain = _estate(ctx, browser_client, admin_token)
    html = browser_client.get("/tasks?fragment=task-table&lang=en").text
    row = _row(html, late)
    assert 'class="badge failed deadline-risk"' in row and ">deadline at risk<" in row
    assert 'title="Deadline: 2026-01-01 05:00:00"' in row
    assert "it cannot meet its deadline 2026-01-01 05:00:00: expected to finish" in row  # why it waits
    for task_id in (on_time, plain):
        assert "deadline-risk" not in _row(html, task_id)
    chinese = _row(browser_client.get("/tasks?fragment=task-table&lang=zh-CN").text, late)
    assert ">截止时间有风险<" in chinese and "无法在截止时间 2026-01-01 05:00:00 前完成" in chinese


def test_a_task_at_risk_is_an_overview_alert(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> None:
    alerts = element(browser_client.get("/?lang=en").text, "section", "id", "alerts")
    assert 'id="deadlines-none"' in alerts  # nothing at risk yet
    late, on_time, _ = _estate(ctx, browser_client, admin_token)
    alerts = browser_client.get("/?lang=en&fragment=alerts").text
    table = element(alerts, "table", "id", "deadline-alerts")
    row = element(table, "tr", "data-task", late)
    assert 'data-state="queued"' in row and f'href="/tasks/{late}"' in row and "2026-01-01 05:00" in row
    assert on_time not in table
    chinese = browser_client.get("/?lang=zh-CN&fragment=alerts").text
    assert "截止时间有风险的任务" in chinese and f'data-task="{late}"' in chinese
