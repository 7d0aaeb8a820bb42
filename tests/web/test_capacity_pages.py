"""The capacity page (/capacity): the what-if form (models from the API, more rows through
htmx), the report side by side with its chart and recommendations, bad input explained,
and a tenant user planning on its own teams' history only."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.test_capacity_api import finished_history
from tests.web.conftest import sign_in

RUN = {"days": "1", "add_count": "8", "add_model": "ascend-910b3", "remove_count": "", "remove_model": "", "wait_target": "0.5", "run": "1"}


def as_admin(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def history(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> TestClient:
    finished_history(ctx, TestClient(browser_client.app, headers=as_admin(admin_token)))
    return browser_client


def user_client(app_client: TestClient, admin_token: str, name: str, role: str, tenant: str | None = None) -> TestClient:
    created = app_client.post("/api/v1/users", json={"name": name, "bindings": [{"role": role, "tenant": tenant}]}, headers=as_admin(admin_token))
    assert created.status_code == 201, created.text
    token = app_client.post(f"/api/v1/users/{name}/tokens", json={"label": "web"}, headers=as_admin(admin_token)).json()["token"]
    return sign_in(TestClient(app_client.app), token)


def select_options(page: str, name: str) -> list[str]:
    selects = re.findall(rf'<select name="{name}"[^>]*>(.*?)</select>', page, re.S)
    assert selects, f"no select {name}"
    return re.findall(r'<option value="([^"]+)"', selects[0])


def pool_cell(page: str, table: str, pool: str, cell: str) -> str:
    section = re.search(rf'<table id="{table}">(.*?)</table>', page, re.S).group(1)
    row = re.search(rf'<tr data-pool="{pool}"[^>]*>(.*?)</tr>', section, re.S).group(1)
    return re.search(rf'<td class="num {cell}">([^<]*)</td>', row).group(1)


def teams(page: str) -> set[str]:
    return set(re.findall(r'<tr data-team="([^"]+)"', page))


def error_of(page: str) -> str:
    return html_lib.unescape(re.search(r'<p id="whatif-error" class="error">(.*?)</p>', page, re.S).group(1))


def test_the_form_offers_catalog_models_and_more_rows(browser_client: TestClient) -> None:
    page = browser_client.get("/capacity")
    assert page.status_code == 200
    for marker in ('id="whatif-form"', 'id="days" name="days"', 'name="add_count"', 'name="remove_count"', 'id="whatif-run"', 'id="add-row-more"'):
        assert marker in page.text, marker
    assert 'id="whatif-report"' not in page.text  # nothing runs until asked
    add = select_options(page.text, "add_model")
    assert {"ascend-910b2", "nvidia-a100-80g", "amd-mi250x"} <= set(add)
    remove = select_options(page.text, "remove_model")
    assert "nvidia-a100-80g" in remove and "amd-mi250x" not in remove  # only models the pools hold
    row = browser_client.get("/capacity/row/remove")
    assert row.status_code == 200 and 'data-kind="remove"' in row.text and "<html" not in row.text
    assert browser_client.get("/capacity/row/sideways").status_code == 404


def test_a_what_if_shows_both_runs_side_by_side(history: TestClient) -> None:
    page = history.get("/capacity", params=RUN)
    assert page.status_code == 200, page.text
    text = page.text
    assert 'id="whatif-report"' in text and 'data-replayed="5"' in text and 'data-truncated="false"' in text
    assert re.search(r'<tr data-model="ascend-910b3"><td>ascend-910b3</td><td class="num baseline">8</td><td class="num changed">16</td>', text)
    assert float(pool_cell(text, "whatif-baseline", "sh-910b3-mindspore", "wait-p90")) > 0.5
    assert pool_cell(text, "whatif-changed", "sh-910b3-mindspore", "wait-p90") == "0.00"
    assert pool_cell(text, "whatif-changed", "sh-910b3-mindspore", "devices") == "16"
    chart = json.loads(html_lib.unescape(re.search(r'id="whatif-chart" data-chart=\'([^\']+)\'', text).group(1)))
    assert [s["name"] for s in chart["series"]] == ["Baseline (today)", "Changed"] and "sh-910b3-mindspore" in chart["xAxis"]["data"]
    assert 'id="whatif-util-chart"' in text
    assert teams(text) == {"ai-lab/cv", "ai-lab/nlp", "infra/data"}
    rec = re.search(r'<li data-kind="saturated-pool" data-name="sh-910b3-mindspore"[^>]*>(.*?)</li>', text, re.S)
    assert rec and "add ascend-910b3 devices" in rec.group(1) and "After the change: 0.00 h." in rec.group(1)
    # The form keeps what was asked, with a row for it.
    assert re.search(r'name="add_count"[^>]*value="8"', text) and '<option value="ascend-910b3" selected>' in text
    chinese = history.get("/capacity", params={**RUN, "lang": "zh-CN"}).text
    assert "推演报告" in chinese and "资源池 sh-910b3-mindspore 已饱和" in chinese and "基线（当前）" in chinese
    # Quotas flag a team that asks for more than it may have.
    over = history.get("/capacity", params={**RUN, "quotas": "ai-lab/cv=1"}).text
    assert re.search(r'<li data-kind="team-over-quota" data-name="ai-lab/cv"[^>]*>\s*Team ai-lab/cv demands', over)


def test_bad_input_is_explained(browser_client: TestClient) -> None:
    # The changes are checked before the history is read: no finished tasks needed here.
    def refused(**changes: str) -> str:
        page = browser_client.get("/capacity", params={**RUN, **changes})
        assert page.status_code == 422 and 'id="whatif-report"' not in page.text
        return error_of(page.text)

    assert refused(add_model="nvidia-x9000").startswith(
        "The what-if did not run: add[0].model: unknown device model 'nvidia-x9000'; allowed model ids:"
    )
    assert "remove[0].count: 640 nvidia-h800 device(s) to remove in all" in refused(
        add_count="", add_model="", remove_count="640", remove_model="nvidia-h800"
    )
    assert "History (days): expected a number, got 'a week'" in refused(days="a week")
    assert "quotas: expected TEAM=DEVICES" in refused(quotas="ai-lab/nlp")
    assert "add[0].count" in refused(add_count="many")
    no_history = refused(add_count="", add_model="", days="2")
    assert no_history == "The what-if did not run: days: no finished tasks in the last 2 day(s) to replay; choose a longer period"
    chinese = browser_client.get("/capacity", params={**RUN, "days": "x", "lang": "zh-CN"}).text
    assert "推演未能运行：历史区间（天）：应为数字" in error_of(chinese)


def test_a_tenant_user_plans_on_its_own_history(history: TestClient, admin_token: str) -> None:
    infra = user_client(history, admin_token, "ines", "member", "infra")
    page = infra.get("/capacity", params=RUN)
    assert page.status_code == 200 and 'data-replayed="2"' in page.text
    assert teams(page.text) == {"infra/data"}  # other teams' workloads are not replayed for it
    auditor = user_client(history, admin_token, "aldo", "auditor")
    denied = auditor.get("/capacity")
    assert denied.status_code == 403 and 'id="capacity-denied"' in denied.text and "inventory.read" in html_lib.unescape(denied.text)
