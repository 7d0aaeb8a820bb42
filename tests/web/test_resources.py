"""The Resources page (/resources) and the pool page (/pools/{name}), through their HTML."""

from __future__ import annotations

import re

import pytest
import yaml
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.scheduler import schedule_once
from tests.conftest import TASKS_DIR
from tests.web.conftest import sign_in


def nodes_on(html: str) -> set[str]:
    return set(re.findall(r'<tr class="node-row" id="node-[^"]+" data-node="([^"]+)"', html))


def device_statuses(html: str, node: str) -> list[str]:
    return re.findall(rf'data-device="{re.escape(node)}/\d+" data-status="(\w+)"', html)


def queue_rows(html: str) -> dict[str, str]:
    """task id → state of the rows of the pool's queue table."""
    return dict(re.findall(r'<tr data-task="([^"]+)" data-state="(\w+)">', html))


@pytest.fixture
def admin_headers(admin_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {admin_token}"}


@pytest.fixture
def npu_tasks(browser_client: TestClient, ctx: ServiceContext, admin_headers: dict) -> list[str]:
    """Three PyTorch 2.4 trainings on 910B2 (8 devices each): two fill sh-910b2-cann800,
    the third waits for it; the CANN 8.0.RC1 pool cannot run PyTorch 2.4 at all."""
    task = yaml.safe_load((TASKS_DIR / "pytorch24-npu.yaml").read_text())
    ids = []
    for i in range(3):
        response = browser_client.post("/api/v1/tasks", json={**task, "name": f"pt24-{i}"}, headers=admin_headers)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    schedule_once(ctx)
    return ids


def test_resources_shows_clusters_nodes_devices_and_their_profiles(browser_client: TestClient) -> None:
    page = browser_client.get("/resources")
    assert page.status_code == 200
    html = page.text
    for cluster in ("bj-train", "sh-ascend", "gz-general"):
        assert f'<tbody class="cluster" data-cluster="{cluster}"' in html
    assert {"gpu-a01", "gpu-h01", "npu-b03", "cpu-01", "dpu-01"} <= nodes_on(html)
    assert 'data-node="gpu-a01" data-state="ready"' in html
    assert device_statuses(html, "gpu-a01") == ["idle"] * 8
    assert 'data-model="nvidia-a100-80g" data-class="gpu"' in html
    assert "535.154.05" in html and "cuda 12.2" in html and 'data-framework="vllm"' in html  # gpu-h01's stack
    assert 'href="/pools/bj-a100-80g"' in html and 'data-pool="sh-310p-infer"' in html
    assert re.search(r'data-count="total"><b>\d+</b>', html)
    assert 'form id="resource-filters" class="filters" method="get"' in html


def test_filters_narrow_the_tree(browser_client: TestClient, npu_tasks: list[str]) -> None:
    dpu = browser_client.get("/resources", params={"class": "dpu"}).text
    assert nodes_on(dpu) == {"dpu-01"} and 'data-cluster="bj-train"' not in dpu
    assert nodes_on(browser_client.get("/resources", params={"model": "ascend-310p"}).text) == {"npu-i01", "npu-i02"}
    assert nodes_on(browser_client.get("/resources", params={"cluster": "gz-general"}).text) == {"cpu-01", "cpu-02", "dpu-01"}
    # Framework support is judged against each node's installed stack.
    mindspore = browser_client.get("/resources", params={"framework": "mindspore"}).text
    assert nodes_on(mindspore) == {"npu-b04", "npu-i01", "npu-i02"}
    torch = browser_client.get("/resources", params={"framework": "torch>=2.3", "class": "npu"}).text
    assert "npu-b03" not in nodes_on(torch) and {"npu-b01", "npu-b04"} <= nodes_on(torch)
    assert 'class="fw ok" data-ok="true"' in torch and 'value="torch&gt;=2.3"' in torch
    # Status: two 910B2 nodes are now fully taken by the admitted tasks.
    busy = browser_client.get("/resources", params={"status": "busy"}).text
    assert nodes_on(busy) == {"npu-b01", "npu-b02"}
    assert device_statuses(busy, "npu-b01") == ["busy"] * 8
    nothing = browser_client.get("/resources", params={"status": "abnormal"}).text
    assert 'id="resources-empty"' in nothing and not nodes_on(nothing)


def test_abnormal_and_offline_devices_from_an_agent(browser_client: TestClient, ctx: ServiceContext, admin_headers: dict) -> None:
    from hetpool.server.services.nodes import mark_offline

    node = {"name": "agent-a", "cluster": "bj-train", "cpu_cores": 16, "memory_gb": 64, "devices": [{"model": "nvidia-t4", "count": 4}]}
    assert browser_client.post("/api/v1/agent/register", json={"node": node, "agent_version": "0.3"}, headers=admin_headers).status_code == 200
    beat = {"node": "agent-a", "agent_version": "0.3", "devices": [{"index": 1, "model": "nvidia-t4", "health": "abnormal"}]}
    assert browser_client.post("/api/v1/agent/heartbeat", json=beat, headers=admin_headers).status_code == 200
    html = browser_client.get("/resources", params={"status": "abnormal"}).text
    assert nodes_on(html) == {"agent-a"}
    assert device_statuses(html, "agent-a") == ["idle", "abnormal", "idle", "idle"]
    assert "host agent 0.3" in html
    ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
    assert mark_offline(ctx) == ["agent-a"]
    offline = browser_client.get("/resources", params={"status": "offline"}).text
    assert 'data-node="agent-a" data-state="offline"' in offline
    assert device_statuses(offline, "agent-a") == ["offline", "abnormal", "offline", "offline"]


def test_a_refused_filter_shows_the_apis_message(browser_client: TestClient) -> None:
    for params, message in (
        ({"framework": "torch>=x"}, "invalid version spec"),
        ({"framework": "cobol"}, "unknown framework &#39;cobol&#39;"),
        ({"cluster": "nowhere"}, "unknown cluster &#39;nowhere&#39;"),
        ({"status": "sleepy"}, "query.status"),
    ):
        page = browser_client.get("/resources", params=params)
        assert page.status_code == 200
        error = re.search(r'<p class="error" id="resource-filter-error">(.*?)</p>', page.text)
        assert error and message in error.group(1), (params, page.text[:300])
        assert not nodes_on(page.text)


def test_the_live_fragment_is_only_the_tree_and_keeps_the_filters(browser_client: TestClient) -> None:
    page = browser_client.get("/resources", params={"class": "gpu", "framework": "pytorch"})
    assert 'hx-get="/resources?class=gpu&amp;framework=pytorch&amp;fragment=resource-tree"' in page.text
    fragment = browser_client.get("/resources", params={"class": "gpu", "fragment": "resource-tree"})
    assert fragment.status_code == 200
    assert fragment.text.lstrip().startswith('<section id="resource-tree"') and "<html" not in fragment.text
    assert nodes_on(fragment.text) == {"gpu-a01", "gpu-a02", "gpu-h01"}


def test_pool_page_shows_profile_suitability_substitutes_and_queue(browser_client: TestClient, npu_tasks: list[str]) -> None:
    page = browser_client.get("/pools/sh-910b2-cann800")
    assert page.status_code == 200
    html = page.text
    assert 'id="pool-name" data-pool="sh-910b2-cann800"' in html
    assert 'data-model="ascend-910b2" data-class="npu"' in html
    assert re.search(r'data-count="busy"><b>16</b>', html) and re.search(r'data-count="idle"><b>0</b>', html)
    assert '<tr data-node="npu-b01" data-state="ready">' in html
    assert "data-chart=" in html and 'id="pool-chart"' in html
    assert '<tr data-feature="fused-moe">' in html and "vllm is not installed" in html
    assert '<tr data-task-type="offload" data-ok="false">' in html and "NPU devices do not take offload work" in html
    assert '<tr data-task-type="training" data-ok="true">' in html
    assert 'data-framework="pytorch" data-installed-ok="true"' in html
    assert '<tr data-model="ascend-310p">' in html and 'href="/pools/sh-310p-infer"' in html
    # The queue: two admitted here, the third waiting for this pool.
    rows = queue_rows(html)
    assert set(rows) == set(npu_tasks)
    assert sorted(rows.values()) == ["admitted", "admitted", "queued"]
    for task_id in npu_tasks:
        assert f'<a class="task-link" href="/tasks/{task_id}">' in html
    # Why the third waits, in the reader's language (rendered from its reason code and facts).
    assert re.search(r'class="note pending-reason">waiting for capacity[^<]*not enough free devices', html)
    chinese = browser_client.get("/pools/sh-910b2-cann800?lang=zh-CN").text
    assert re.search(r'class="note pending-reason">等待资源[^<]*空闲设备不足', chinese)
    # The old-CANN pool was ruled out for these tasks: they do not wait for it.
    other = browser_client.get("/pools/sh-910b2-cann80rc1").text
    assert not queue_rows(other) and 'id="pool-queue-empty"' in other


def test_pool_fragments_and_unknown_pool(browser_client: TestClient, npu_tasks: list[str]) -> None:
    status = browser_client.get("/pools/sh-910b2-cann800", params={"fragment": "pool-status"}).text
    assert status.lstrip().startswith('<section id="pool-status"') and "<html" not in status
    queue = browser_client.get("/pools/sh-910b2-cann800", params={"fragment": "pool-queue"}).text
    assert queue.lstrip().startswith('<section id="pool-queue"') and len(queue_rows(queue)) == 3
    missing = browser_client.get("/pools/nope")
    assert missing.status_code == 404
    assert 'id="error-message" data-status="404"' in missing.text and "Pool &#39;nope&#39; not found" in missing.text


def test_both_languages(browser_client: TestClient) -> None:
    english = browser_client.get("/resources").text
    chinese = browser_client.get("/resources", params={"lang": "zh-CN"}).text
    assert "Software stack" in english and "Idle" in english
    assert "软件栈" in chinese and "空闲" in chinese and "Software stack" not in chinese
    pool_zh = browser_client.get("/pools/bj-h800", params={"lang": "zh-CN"}).text
    for text in ("能力画像", "适用任务类型", "可替代的设备类型", "任务队列", "训练"):
        assert text in pool_zh
    assert "Capability profile" not in pool_zh


def test_other_tenants_tasks_stay_hidden_and_roles_apply(
    browser_client: TestClient, npu_tasks: list[str], admin_headers: dict, ctx: ServiceContext
) -> None:
    def signed_in_as(name: str, binding: dict) -> TestClient:
        created = browser_client.post("/api/v1/users", json={"name": name, "bindings": [binding]}, headers=admin_headers)
        assert created.status_code == 201, created.text
        token = browser_client.post(f"/api/v1/users/{name}/tokens", json={"label": "web"}, headers=admin_headers).json()["token"]
        return sign_in(TestClient(browser_client.app), token)

    # A member of infra sees the shared inventory but none of ai-lab's tasks in the queue.
    infra = signed_in_as("ivan", {"role": "member", "tenant": "infra"})
    assert "npu-b01" in nodes_on(infra.get("/resources").text)
    page = infra.get("/pools/sh-910b2-cann800").text
    assert 'data-pool="sh-910b2-cann800"' in page and not queue_rows(page) and 'id="pool-queue-empty"' in page
    for task_id in npu_tasks:
        assert task_id not in page
    # A member of the tasks' own team sees them.
    cv = signed_in_as("carol", {"role": "member", "tenant": "ai-lab/cv"})
    assert set(queue_rows(cv.get("/pools/sh-910b2-cann800").text)) == set(npu_tasks)
    # An auditor may not read the inventory: the API's 403 is the page's answer.
    auditor = signed_in_as("audrey", {"role": "auditor", "tenant": None})
    refused = auditor.get("/resources")
    assert refused.status_code == 403 and "inventory.read" in refused.text
    assert auditor.get("/pools/sh-910b2-cann800").status_code == 403


def test_pool_page_says_when_the_compatibility_tables_do_not_know(browser_client: TestClient, demo: TestClient) -> None:
    dcu = [
        {"kind": "Node", "name": "dcu-01", "cluster": "sh-ascend", "cpu_cores": 64, "memory_gb": 512,
         "devices": [{"model": "hygon-k100", "count": 8}],
         "stack": {"driver": "6.2.26", "runtime": {"name": "dtk", "version": "24.04"}}},
        {"kind": "Pool", "name": "sh-dcu-k100", "cluster": "sh-ascend", "model": "hygon-k100", "nodes": ["dcu-01"]},
    ]  # fmt: skip
    assert demo.post("/api/v1/apply", json={"documents": dcu}).status_code == 200
    html = browser_client.get("/pools/sh-dcu-k100").text
    row = re.search(r'<tr data-framework="pytorch"[^>]*>.*?</tr>', html, re.S).group(0)
    assert 'data-with-image-status="unknown"' in row and ">unknown<" in row and "no PyTorch version table" in row
    tf = re.search(r'<tr data-framework="tensorflow"[^>]*>.*?</tr>', html, re.S).group(0)
    assert 'data-with-image-status="incompatible"' in tf  # TensorFlow has no row for DTK at all: a plain no
