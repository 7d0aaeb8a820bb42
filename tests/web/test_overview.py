"""The overview page (/): capacity by class and pool, utilisation charts, queues and
waits, hot spots, idle resources and alerts; live fragments; both languages; tenant
users see only their tenants' tasks."""

from __future__ import annotations

import json
import re
from html import unescape

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.services.nodes import mark_offline
from hetpool.server.workers.cost import accrue_usage
from hetpool.server.workers.loop import run_pass
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task
from tests.server.test_stats_api import DEMO_CLASSES, DEMO_POOLS
from tests.web.conftest import sign_in

SECTIONS = ("summary", "alerts", "hotspots", "capacity", "utilisation", "queues")


def api(client: TestClient, token: str, method: str, path: str, body=None):
    response = client.request(method, path, json=body, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code < 300, response.text
    return response.json()


def submit(client: TestClient, token: str, example: str, **fields) -> str:
    return api(client, token, "POST", "/api/v1/tasks", {**example_task(example), "command": "true", **fields})["id"]


def element(html: str, tag: str, attr: str, value: str) -> str:
    """The first <tag attr="value" …>…</tag> (not nested) of the page."""
    match = re.search(rf'<{tag}[^>]*\b{attr}="{re.escape(value)}"[^>]*>.*?</{tag}>', html, re.S)
    assert match, f"no <{tag} {attr}={value!r}>"
    return match.group(0)


def cell(row: str, field: str) -> str:
    match = re.search(rf'<td[^>]*data-field="{field}"[^>]*>(.*?)</td>', row, re.S)
    assert match, f"no cell {field}"
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


def card(html: str, name: str) -> str:
    return re.search(rf'id="card-{name}"><b[^>]*>([^<]*)</b>', html).group(1)


def test_capacity_by_device_class_and_pool_matches_the_inventory(browser_client: TestClient) -> None:
    page = browser_client.get("/")
    assert page.status_code == 200
    html = page.text
    capacity = element(html, "section", "id", "capacity")
    for cls, total in DEMO_CLASSES.items():
        row = element(capacity, "tr", "data-class", cls)
        assert cell(row, "total") == cell(row, "idle") == str(total) and cell(row, "busy") == "0"
    for pool, total in DEMO_POOLS.items():
        assert cell(element(capacity, "tr", "data-pool", pool), "total") == str(total)
    assert card(html, "devices") == str(sum(DEMO_POOLS.values())) and card(html, "waiting") == "0"
    for section in SECTIONS:  # every section refreshes itself
        assert re.search(rf'<section id="{section}"[^>]*hx-get="/\?fragment={section}&window=24h"[^>]*hx-trigger="every \d+s"', html)


def test_sections_refresh_as_fragments_with_charts(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> None:
    submit(browser_client, admin_token, "mindspore-ascend.yaml")
    run_pass(ctx, (schedule_once,))
    ctx.clock.advance(6 * 3600)
    for section in SECTIONS:
        fragment = browser_client.get(f"/?fragment={section}", headers={"HX-Request": "true"})
        assert fragment.status_code == 200 and fragment.text.lstrip().startswith(f'<section id="{section}"'), section
        assert "<html" not in fragment.text
    utilisation = browser_client.get("/?fragment=utilisation").text
    chart = json.loads(unescape(re.search(r'id="utilisation-chart" data-chart=\'([^\']*)\'', utilisation).group(1)))
    assert set(chart["xAxis"]["data"]) == set(DEMO_POOLS)
    bars = dict(zip(chart["xAxis"]["data"], zip(*(s["data"] for s in chart["series"]), strict=True), strict=True))
    assert bars["sh-910b3-mindspore"] == (100.0, 25.0, round(100 * 6 / 168, 1))  # now, 24 h, 7 d
    trend = json.loads(unescape(re.search(r'id="utilisation-trend" data-chart=\'([^\']*)\'', utilisation).group(1)))
    assert [s["name"] for s in trend["series"]] == ["CPU", "DPU", "GPU", "NPU"] and len(trend["xAxis"]["data"]) == 24
    row = element(utilisation, "tr", "data-pool", "sh-910b3-mindspore")
    assert (cell(row, "now"), cell(row, "24h")) == ("100%", "25%")
    assert browser_client.get("/?fragment=nothing").status_code == 404


def test_queues_hot_spots_and_idle_resources(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> None:
    submit(browser_client, admin_token, "mindspore-ascend.yaml")
    run_pass(ctx, (schedule_once,))  # takes all 8 devices of sh-910b3-mindspore
    ctx.clock.advance(300)
    waiting = submit(browser_client, admin_token, "mindspore-ascend.yaml", name="pangu-2")
    ctx.clock.advance(2 * 3600 + 300)
    html = browser_client.get("/").text
    hotspots = element(html, "section", "id", "hotspots")
    saturated = element(hotspots, "table", "id", "saturated-pools")
    assert 'data-pool="sh-910b3-mindspore"' in saturated and 'class="num waiting bad">1<' in saturated
    longest = element(hotspots, "tr", "data-task", waiting)
    assert f'href="/tasks/{waiting}"' in longest and "2h 5m" in longest
    idle = element(hotspots, "table", "id", "idle-pools")
    assert 'data-pool="gz-bluefield3"' in idle and "sh-910b3-mindspore" not in idle
    queues = element(html, "section", "id", "queues")
    pool_row = element(queues, "tr", "data-pool", "sh-910b3-mindspore")
    assert (cell(pool_row, "waiting"), cell(pool_row, "oldest"), cell(pool_row, "admitted"), cell(pool_row, "p50")) == ("1", "2h 5m", "1", "0s")
    assert cell(element(queues, "tr", "data-task-type", "training"), "waiting") == "1"
    assert cell(element(queues, "tr", "data-queue", "default"), "waiting") == "1"
    assert card(html, "waiting") == "1" and card(html, "busy") == "8"
    chinese = browser_client.get("/?lang=zh-CN").text
    assert "饱和的资源池" in chinese and "2 小时 5 分" in chinese and "训练" in chinese


def test_nodes_needing_attention_in_both_languages(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> None:
    """Ported from the former home page's test: an abnormal device, then the node offline."""
    assert "All reported nodes are ready" in browser_client.get("/?lang=en").text
    node = {"name": "agent-x", "cluster": "bj-train", "cpu_cores": 8, "memory_gb": 32, "devices": [{"model": "nvidia-t4", "count": 2}]}
    api(browser_client, admin_token, "POST", "/api/v1/agent/register", {"node": node})
    beat = {"node": "agent-x", "devices": [{"index": 1, "model": "nvidia-t4", "health": "abnormal"}]}
    api(browser_client, admin_token, "POST", "/api/v1/agent/heartbeat", beat)
    page = browser_client.get("/?lang=en").text
    row = element(page, "tr", "data-node", "agent-x")
    assert 'data-state="ready"' in row and '<td class="abnormal">1</td>' in row
    assert card(page, "abnormal") == "1"
    ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
    mark_offline(ctx)
    alerts = browser_client.get("/?lang=en&fragment=alerts").text
    assert 'data-state="offline"' in alerts and ">offline<" in alerts
    chinese = browser_client.get("/?lang=zh-CN").text
    assert "需关注的节点" in chinese and ">离线<" in chinese


def test_budgets_crossed_and_approvals_waiting(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> None:
    html = browser_client.get("/").text
    assert 'id="budgets-none"' in html and 'id="approvals-none"' in html
    budget = {"kind": "Budget", "name": "serving", "tenant": "ai-lab/nlp", "amount": 10, "alert_at": [0.5]}
    policy = {
        "kind": "ApprovalPolicy",
        "name": "prod",
        "tenant": "ai-lab/cv",
        "environments": ["prod"],
        "over_quota": False,
        "budget_exceeded": False,
    }
    api(browser_client, admin_token, "POST", "/api/v1/apply", {"documents": [budget, policy]})
    submit(browser_client, admin_token, "llm-inference.yaml", command="sleep 600")  # an H800 at 32 an hour
    run_pass(ctx, (schedule_once, accrue_usage))
    ctx.clock.advance(3600)
    run_pass(ctx, (accrue_usage,))
    held = submit(browser_client, admin_token, "mindspore-ascend.yaml", env="prod")  # needs approval
    alerts = element(browser_client.get("/").text, "section", "id", "alerts")
    row = element(alerts, "tr", "data-budget", "serving")
    assert 'data-exceeded="true"' in row and "ai-lab/nlp" in row
    approval = re.search(r'<tr data-approval="([^"]+)"[^>]*>.*?</tr>', alerts, re.S)
    assert approval and f'href="/tasks/{held}"' in approval.group(0)
    assert card(browser_client.get("/?fragment=summary").text, "approvals") == "1"


def test_a_tenant_user_sees_only_its_tenants_tasks(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> None:
    mine = submit(browser_client, admin_token, "data-prep.yaml")  # infra/data/etl
    theirs = submit(browser_client, admin_token, "mindspore-ascend.yaml")  # ai-lab/cv/detection
    api(browser_client, admin_token, "POST", "/api/v1/users", {"name": "etl-viewer", "bindings": [{"role": "viewer", "tenant": "infra"}]})
    token = api(browser_client, admin_token, "POST", "/api/v1/users/etl-viewer/tokens", {"label": "web"})["token"]
    with TestClient(browser_client.app) as other:
        sign_in(other, token)
        page = other.get("/")
        assert page.status_code == 200
        html = page.text
        assert f'data-task="{mine}"' in html and theirs not in html and "pangu-finetune" not in html
        assert 'id="scoped-note-queues"' in html and card(html, "waiting") == "1"
        capacity = element(html, "section", "id", "capacity")
        assert cell(element(capacity, "tr", "data-pool", "sh-910b3-mindspore"), "total") == "8"  # capacity is for everyone
        assert "cost.read" in element(html, "p", "id", "budgets-denied")  # a viewer may not read budgets: said in the panel
        assert other.get("/?fragment=hotspots&window=7d").text.count("data-task=") == 1

    api(browser_client, admin_token, "POST", "/api/v1/users", {"name": "audrey", "bindings": [{"role": "auditor", "tenant": None}]})
    token = api(browser_client, admin_token, "POST", "/api/v1/users/audrey/tokens", {"label": "web"})["token"]
    with TestClient(browser_client.app) as auditor:
        sign_in(auditor, token)
        page = auditor.get("/")
        assert page.status_code == 200 and "inventory.read" in page.text and 'class="error denied"' in page.text


def test_an_unknown_window_is_explained_in_both_languages(browser_client: TestClient) -> None:
    page = browser_client.get("/?window=1y")
    assert page.status_code == 422
    assert "Unknown time window “1y”: choose 24h or 7d" in element(page.text, "p", "id", "window-error")
    assert 'id="queue-by-pool"' in page.text  # still shows the last 24 hours
    assert "未知的时间窗口“1y”" in browser_client.get("/?window=1y&lang=zh-CN").text
    week = browser_client.get("/?fragment=queues&window=7d").text
    assert '<option value="7d" selected>' in week and "window=7d" in week
