"""Cost (/cost): the chargeback table and charts agree with the API's report and ledger,
budgets show which are exceeded, the CSV exports carry the same numbers, bad filters get
the API's message, and a tenant user sees only its subtree's spend.

Usage is made as in tests/server/test_cost_api.py: only the scheduler and the cost
worker run, so admitted tasks hold (and are billed for) their placement while the fixed
clock decides every duration."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.cost import accrue_usage
from hetpool.server.workers.loop import run_pass
from hetpool.server.workers.scheduler import schedule_once
from hetpool.web.pages.cost import GROUP_COLUMNS, LEDGER_COLUMNS
from tests.server.helpers import example_task
from tests.web.conftest import sign_in

STEPS = (schedule_once, accrue_usage)
PRICES = {"kind": "PriceList", "name": "default", "currency": "CNY", "per_cpu_core_hour": 0.05, "per_memory_gib_hour": 0.002}
BUDGETS = [
    {"kind": "Budget", "name": "nlp-monthly", "tenant": "ai-lab/nlp", "amount": 10, "alert_at": [0.5, 1.0], "hard_stop": True},
    {"kind": "Budget", "name": "cv-monthly", "tenant": "ai-lab/cv", "amount": 1_000_000},
]


def as_admin(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def usage(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> dict:
    """Two teams' tasks held from 2026-01-31 22:00 to 02-01 02:00: 2 h in January, 2 h in February."""
    headers = as_admin(admin_token)
    ctx.clock.advance((datetime(2026, 1, 31, 22, tzinfo=UTC) - ctx.clock.now()).total_seconds())
    assert browser_client.post("/api/v1/apply", json={"documents": [PRICES, *BUDGETS]}, headers=headers).status_code == 200
    ids = []
    for task in (
        {**example_task("pytorch-ddp-training.yaml"), "name": "sft", "command": "sleep 600"},
        {**example_task("batch-inference.yaml"), "name": "det-eval", "tenant": "ai-lab/cv/detection"},
    ):
        response = browser_client.post("/api/v1/tasks", json=task, headers=headers)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    run_pass(ctx, STEPS)
    ctx.clock.advance(2 * 3600)  # midnight: January's rows close
    run_pass(ctx, STEPS)
    ctx.clock.advance(2 * 3600)
    for task_id in ids:
        assert browser_client.post(f"/api/v1/tasks/{task_id}/cancel", headers=headers).status_code == 200
    run_pass(ctx, STEPS)
    report = browser_client.get("/api/v1/cost/report", params={"by": "team", "period": "2026"}, headers=headers).json()
    assert {g["key"] for g in report["groups"]} == {"ai-lab/nlp", "ai-lab/cv"}, report
    return {"ids": ids, "headers": headers}


def api_report(client: TestClient, headers: dict, **params) -> dict:
    response = client.get("/api/v1/cost/report", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def chart(page: str, chart_id: str) -> dict:
    match = re.search(rf'id="{chart_id}" data-chart=\'([^\']*)\'', page)
    assert match, f"no chart #{chart_id}"
    return json.loads(html.unescape(match.group(1)))


def group_row(page: str, key: str) -> str:
    match = re.search(rf'<tr data-group="{re.escape(key)}"[^>]*>.*?</tr>', page, re.S)
    assert match, f"no row for {key}"
    return match.group(0)


def test_the_report_table_and_charts_agree_with_the_api(browser_client: TestClient, usage: dict) -> None:
    page = browser_client.get("/cost", params={"by": "team", "period": "2026-02"})
    assert page.status_code == 200
    report = api_report(browser_client, usage["headers"], by="team", period="2026-02")
    assert 'data-period="2026-02" data-start="2026-02-01" data-end="2026-03-01"' in page.text
    for group in report["groups"]:
        row = group_row(page.text, group["key"])
        assert f'data-cost-micros="{group["cost_micros"]}"' in row and f'<td class="num cost">{group["cost"]:,.2f}</td>' in row
        assert f'<td class="num tasks">{group["tasks"]}</td>' in row
    assert f'<tr class="total" data-currency="CNY" data-cost-micros="{report["total"]["cost_micros"]}"' in page.text
    bar = chart(page.text, "cost-by-group-chart")
    assert bar["xAxis"]["data"] == [g["key"] for g in report["groups"]]
    assert bar["series"][0]["data"] == [round(g["cost"], 2) for g in report["groups"]]
    # The daily line covers every day of the month; its stacks sum to the total.
    line = chart(page.text, "cost-by-day-chart")
    assert line["xAxis"]["data"][0] == "2026-02-01" and len(line["xAxis"]["data"]) == 28
    assert sum(sum(s["data"]) for s in line["series"]) == pytest.approx(report["total"]["cost"], abs=0.05)
    assert sum(s["data"][0] for s in line["series"]) == pytest.approx(report["total"]["cost"], abs=0.05)  # all on 1 February
    # A year is drawn per month, and the project grouping uses the ledger's project field.
    year = browser_client.get("/cost", params={"by": "project", "period": "2026"}).text
    assert chart(year, "cost-by-day-chart")["xAxis"]["data"][:2] == ["2026-01", "2026-02"]
    assert 'data-group="ai-lab/nlp/llm-sft"' in year and 'data-group="ai-lab/cv/detection"' in year


def test_budgets_show_which_are_exceeded(browser_client: TestClient, usage: dict) -> None:
    page = browser_client.get("/cost").text  # the current month: February
    nlp = re.search(r'<tr data-budget="nlp-monthly"[^>]*>', page).group(0)
    cv = re.search(r'<tr data-budget="cv-monthly"[^>]*>', page).group(0)
    assert 'data-exceeded="true" class="exceeded"' in nlp and 'data-exceeded="false"' in cv
    assert 'id="budgets-crossed"' in page and "1 budget(s) exceeded" in page
    fragment = browser_client.get("/cost", params={"fragment": "cost-budgets"}).text
    assert fragment.startswith('<section id="cost-budgets"') and 'data-budget="nlp-monthly"' in fragment


def test_csv_exports_carry_the_reports_numbers(browser_client: TestClient, usage: dict) -> None:
    report = api_report(browser_client, usage["headers"], by="pool", period="2026-01", tenant="ai-lab")
    response = browser_client.get("/cost/export.csv", params={"by": "pool", "period": "2026-01", "tenant": "ai-lab"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"] == 'attachment; filename="hetpool-cost-pool-2026-01-ai-lab.csv"'
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert tuple(rows[0].keys()) == GROUP_COLUMNS
    assert [(r["group"], r["currency"], r["tasks"]) for r in rows] == [(g["key"], g["currency"], str(g["tasks"])) for g in report["groups"]]
    for row, group in zip(rows, report["groups"], strict=True):
        assert round(float(row["cost"]) * 1e6) == group["cost_micros"] and row["period"] == "2026-01" and row["by"] == "pool"
        assert float(row["device_hours"]) == pytest.approx(group["device_hours"])

    ledger = browser_client.get("/api/v1/cost/ledger", params={"period": "2026-01", "limit": 10000}, headers=usage["headers"]).json()
    exported = browser_client.get("/cost/export.csv", params={"period": "2026-01", "rows": "ledger"})
    assert exported.headers["content-disposition"] == 'attachment; filename="hetpool-ledger-2026-01.csv"'
    lines = list(csv.DictReader(io.StringIO(exported.text)))
    assert tuple(lines[0].keys()) == LEDGER_COLUMNS and len(lines) == ledger["count"] > 0
    assert sum(round(float(r["cost"]) * 1e6) for r in lines) == sum(r["cost_micros"] for r in ledger["rows"])
    assert {r["task_id"] for r in lines} == set(usage["ids"]) and {r["day"] for r in lines} == {"2026-01-31"}


def test_the_ledger_is_read_page_by_page(browser_client: TestClient, usage: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from hetpool.web.pages import cost as cost_page

    monkeypatch.setattr(cost_page, "LEDGER_PAGE", 2)  # the API's pages are 10,000 rows; here every 2 rows
    ledger = browser_client.get("/api/v1/cost/ledger", params={"period": "2026"}, headers=usage["headers"]).json()
    assert ledger["count"] > 2
    lines = list(csv.DictReader(io.StringIO(browser_client.get("/cost/export.csv", params={"period": "2026", "rows": "ledger"}).text)))
    assert [(r["task_id"], r["day"], r["rank"]) for r in lines] == [(r["task_id"], r["day"], str(r["rank"])) for r in ledger["rows"]]
    line = chart(browser_client.get("/cost", params={"period": "2026"}).text, "cost-by-day-chart")
    assert sum(sum(s["data"]) for s in line["series"]) == pytest.approx(ledger["cost_by_currency"]["CNY"], abs=0.05)
    monkeypatch.setattr(cost_page, "CHART_MAX_ROWS", 3)  # a huge ledger: the chart says it shows only a part
    assert 'id="cost-chart-partial"' in browser_client.get("/cost", params={"period": "2026"}).text


def test_bad_filters_show_the_apis_message(browser_client: TestClient, usage: dict) -> None:
    page = browser_client.get("/cost", params={"period": "2026-13"})
    assert page.status_code == 422
    assert re.search(r'<p id="cost-error" class="error" data-status="422">[^<]*invalid period', page.text)
    assert 'id="cost-filter"' in page.text and 'value="2026-13"' in page.text  # the form stays, with what was typed
    assert browser_client.get("/cost", params={"by": "colour"}).status_code == 422
    assert browser_client.get("/cost/export.csv", params={"period": "soon"}).status_code == 422


def test_a_tenant_user_sees_only_its_subtree(browser_client: TestClient, admin_token: str, usage: dict) -> None:
    created = browser_client.post(
        "/api/v1/users", json={"name": "carol", "bindings": [{"role": "member", "tenant": "ai-lab/cv"}]}, headers=as_admin(admin_token)
    )
    assert created.status_code == 201, created.text
    token = browser_client.post("/api/v1/users/carol/tokens", json={"label": "web"}, headers=as_admin(admin_token)).json()["token"]
    carol = sign_in(TestClient(browser_client.app), token)
    page = carol.get("/cost", params={"period": "2026-02"}).text
    assert 'data-group="ai-lab/cv"' in page and 'data-group="ai-lab/nlp"' not in page
    assert 'data-budget="cv-monthly"' in page and 'data-budget="nlp-monthly"' not in page
    refused = carol.get("/cost", params={"tenant": "ai-lab/nlp"})
    assert refused.status_code == 403 and "permission denied: cost.read" in refused.text
    assert carol.get("/cost/export.csv", params={"tenant": "ai-lab/nlp"}).status_code == 403
    exported = carol.get("/cost/export.csv", params={"period": "2026-02", "rows": "ledger"}).text
    assert "ai-lab/cv/detection" in exported and "ai-lab/nlp" not in exported


def test_the_page_speaks_chinese(browser_client: TestClient, usage: dict) -> None:
    page = browser_client.get("/cost", params={"lang": "zh-CN", "period": "2026-02"}).text
    assert "按团队统计的成本" in page and "已超支" in page and "导出 CSV" in page and 'lang="zh-CN"' in page
