"""The Tasks pages through their HTML: the list and its filters, submitting from a template
(plan, then confirm) and following the task to success with its log tail, why a task waits
and which fallback it took, approvals, cancelling, refusals shown on the form, both
languages, and what users of other tenants and viewers may see and do."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import drive_until, example_task
from tests.web.conftest import csrf_of, sign_in

ETL = "infra/data/etl"


@pytest.fixture
def admin_api(browser_client: TestClient, admin_token: str) -> TestClient:
    """The same app called through the API with the admin's bearer token."""
    return TestClient(browser_client.app, headers={"Authorization": f"Bearer {admin_token}"})


def submitted(api: TestClient, task: dict) -> str:
    response = api.post("/api/v1/tasks", json=task)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def state_of(api: TestClient, task_id: str) -> str:
    return api.get(f"/api/v1/tasks/{task_id}").json()["state"]


def form(client: TestClient, **fields: str) -> dict[str, str]:
    """The submit form's fields as a browser would post them (empty = template default)."""
    base = dict.fromkeys(
        ("template", "name", "tenant", "env", "priority", "workers", "device_class", "device_count", "runtime_estimate", "command", "advanced"), ""
    )
    return {**base, "env": "dev", **fields, "csrf": csrf_of(client.get("/tasks/new").text)}


def attr(html: str, element_id: str, name: str) -> str:
    match = re.search(rf'<[^>]*\bid="{element_id}"[^>]*\b{name}="([^"]*)"', html) or re.search(
        rf'<[^>]*\b{name}="([^"]*)"[^>]*\bid="{element_id}"', html
    )
    assert match, f"#{element_id} has no {name}"
    return match.group(1)


def user_client(app_client: TestClient, admin_api: TestClient, name: str, role: str, tenant: str) -> TestClient:
    """A fresh browser signed in as a new user holding one role binding."""
    created = admin_api.post("/api/v1/users", json={"name": name, "bindings": [{"role": role, "tenant": tenant}]})
    assert created.status_code == 201, created.text
    token = admin_api.post(f"/api/v1/users/{name}/tokens", json={"label": "web test"}).json()["token"]
    return sign_in(TestClient(app_client.app), token)


def test_a_task_submitted_from_a_template_runs_and_its_log_appears(ctx: ServiceContext, browser_client: TestClient, admin_api: TestClient) -> None:
    page = browser_client.get("/tasks/new").text
    assert 'id="new-task-form"' in page and 'id="plan-button"' in page
    assert 'data-template="data-prep" data-type="preprocessing"' in page and 'data-template="pytorch-ddp" data-type="training"' in page
    narrowed = browser_client.get("/tasks/new?type=preprocessing").text
    assert 'data-template="data-prep"' in narrowed and 'data-template="pytorch-ddp"' not in narrowed
    presets = browser_client.get("/tasks/new?fragment=template-defaults&template=pytorch-ddp").text
    assert "<html" not in presets and 'data-template="pytorch-ddp"' in presets and "8 × gpu" in presets

    # The textarea sends CRLF; the command must still run as two clean lines.
    fields = form(browser_client, template="data-prep", name="tokenize-web", tenant=ETL, command="echo line-one\r\necho line-two")
    plan = browser_client.post("/tasks/new/plan", data=fields)
    assert plan.status_code == 200, plan.text
    assert attr(plan.text, "plan-result", "data-feasible") == "true"
    assert 'data-candidate="any node" data-outcome="fit" data-chosen="true"' in plan.text
    assert "gz-cpu" in plan.text and 'id="plan-approval" data-needed="false"' in plan.text
    assert 'name="name" value="tokenize-web"' in plan.text and 'id="confirm-submit"' in plan.text
    assert admin_api.get("/api/v1/tasks").json() == []  # planning stores nothing

    submit = browser_client.post("/tasks/new/submit", data=fields, follow_redirects=False)
    assert submit.status_code == 303
    task_id = submit.headers["location"].removeprefix("/tasks/")
    detail = browser_client.get(f"/tasks/{task_id}").text
    assert attr(detail, "task-state", "data-state") == "queued"
    assert 'id="cancel-task"' in detail and 'id="pending"' in detail and 'id="log-empty" >' in detail
    assert 'hx-trigger="every 2s"' in detail  # the live part and the log follow the task

    drive_until(ctx, lambda: state_of(admin_api, task_id) == "succeeded")
    detail = browser_client.get(f"/tasks/{task_id}").text
    assert attr(detail, "task-state", "data-state") == "succeeded" and 'id="cancel-task"' not in detail
    assert 'data-action="task.submit" data-state="queued"' in detail and 'data-action="task.succeeded"' in detail
    assert 'data-rank="0" data-node="cpu-0' in detail and 'data-pool="gz-cpu"' in detail
    assert "line-one\nline-two" in detail and attr(detail, "log-poll", "data-complete") == "true"
    live = browser_client.get(f"/tasks/{task_id}?fragment=task-live").text
    assert live.startswith('<section id="task-live">')  # ended: no more polling

    # The log fragment appends what follows a byte offset and replaces its own poller.
    chunk = browser_client.get(f"/tasks/{task_id}?fragment=log&rank=0&offset=0").text
    assert "<span>line-one\nline-two" in chunk and 'id="log-poll"' in chunk and 'hx-swap-oob="true"' in chunk
    end = attr(chunk, "log-poll", "data-offset")
    assert "<span>" not in browser_client.get(f"/tasks/{task_id}?fragment=log&rank=0&offset={end}").text

    listing = browser_client.get("/tasks").text
    assert f'data-task-id="{task_id}" data-state="succeeded"' in listing and 'id="new-task"' in listing


def test_the_list_filters_by_api_and_page_side_fields_and_refreshes(ctx: ServiceContext, browser_client: TestClient, admin_api: TestClient) -> None:
    prep = submitted(admin_api, example_task("data-prep.yaml"))
    pangu = [submitted(admin_api, {**example_task("mindspore-ascend.yaml"), "name": f"pangu-{i}"}) for i in range(2)]
    schedule_once(ctx)  # one pangu takes the only MindSpore node, the other waits; nothing is dispatched
    placed, waiting = sorted(pangu, key=lambda i: state_of(admin_api, i) != "admitted")
    assert state_of(admin_api, waiting) == "queued"

    def ids(query: str) -> set[str]:
        return set(re.findall(r'data-task-id="([^"]+)"', browser_client.get("/tasks" + query).text))

    assert ids("") == {prep, *pangu}
    assert ids("?state=queued") == {waiting}
    assert ids(f"?tenant={ETL}") == {prep}
    assert ids("?type=training") == set(pangu)
    assert ids("?template=data-prep") == {prep}
    assert ids("?q=PANGU-1") == {pangu[1]}
    assert ids("?pool=sh-910b3-mindspore") == {placed}
    assert ids("?state=admitted&type=training") == {placed}
    assert ids("?type=offload") == set()
    table = browser_client.get("/tasks?fragment=task-table&type=training").text
    assert table.startswith('<section id="task-table"') and "<html" not in table
    assert 'hx-get="/tasks?fragment=task-table&amp;type=training"' in table
    assert "#1 in queue" in table and "1 × ascend-910b3" not in table  # 8 devices, not 1
    assert "8 × ascend-910b3" in table
    page = browser_client.get("/tasks?type=training").text
    assert '<option value="training" selected>' in page


def test_a_waiting_task_says_why_and_a_placed_one_shows_its_fallback(ctx: ServiceContext, browser_client: TestClient, admin_api: TestClient) -> None:
    pangu = [submitted(admin_api, {**example_task("mindspore-ascend.yaml"), "name": f"pangu-{i}"}) for i in range(2)]
    blocker = {
        **example_task("pytorch-ddp-training.yaml"),
        "workers": 1,
        "per_worker": {"devices": {"class": "gpu", "count": 8, "models": ["nvidia-a100-80g"]}},
    }
    blocker.pop("fallback")
    for i in range(2):
        submitted(admin_api, {**blocker, "name": f"blocker-{i}"})
    schedule_once(ctx)
    ddp = submitted(admin_api, example_task("pytorch-ddp-training.yaml"))
    schedule_once(ctx)
    first, second = sorted(pangu, key=lambda i: state_of(admin_api, i) != "admitted")  # which one got the node

    waiting = browser_client.get(f"/tasks/{second}").text
    assert attr(waiting, "task-state", "data-state") == "queued"
    summary = re.search(r'id="pending-summary"[^>]*>([^<]*)<', waiting).group(1)
    assert "0/12 nodes available" in summary and "not enough free devices" in summary
    # The reason is rendered from its code and facts in the reader's language (web/reasons.py).
    chinese = browser_client.get(f"/tasks/{second}?lang=zh-CN").text
    assert attr(chinese, "pending-summary", "data-reason") in ("waiting_for_capacity", "holds_reservation")
    in_chinese = re.search(r'id="pending-summary"[^>]*>([^<]*)<', chinese).group(1)
    assert in_chinese.startswith("等待资源") and "12 个节点均不可用" in in_chinese and "空闲设备不足" in in_chinese
    assert "not enough free devices" not in in_chinese
    listed = browser_client.get("/tasks?fragment=task-table&state=queued&lang=zh-CN").text
    assert "空闲设备不足" in listed and 'class="note pending-reason"' in listed
    assert re.search(r'id="pending-position">1<', waiting)

    placed = browser_client.get(f"/tasks/{ddp}").text
    assert attr(placed, "task-state", "data-state") == "admitted"
    assert attr(placed, "fallback", "data-fallback-used") == "true"
    assert re.search(r'id="fallback-preferred" class="mono">nvidia-a100-80g<', placed)
    assert re.search(r'id="fallback-chosen" class="mono">nvidia-h800', placed)
    assert 'data-candidate="nvidia-a100-80g" data-outcome="no-fit"' in placed
    assert placed.count('data-pool="bj-h800"') == 2  # two workers, one row each
    assert attr(browser_client.get(f"/tasks/{first}").text, "fallback", "data-fallback-used") == "false"

    # Planning the same task again tells the user it would fall back, and why.
    plan = browser_client.post(
        "/tasks/new/plan",
        data=form(
            browser_client,
            template="pytorch-ddp",
            name="llama-web",
            tenant="ai-lab/nlp/llm-sft",
            device_count="4",
            advanced="fallback: [nvidia-a100-80g, nvidia-h800, ascend-910b2]\nframework: {name: pytorch, version: '>=2.4,<2.6'}\n",
        ),
    ).text
    assert 'id="plan-fallback"' in plan and 'data-candidate="nvidia-a100-80g" data-outcome="no-fit" data-chosen="false"' in plan
    assert "not enough free devices" in plan
    assert attr(plan, "plan-summary", "data-reason") == "fits"
    assert re.search(r'id="plan-summary"[^>]*>([^<]*)<', plan).group(1).startswith("fits now with fallback to ")
    advanced = "fallback: [nvidia-a100-80g, nvidia-h800, ascend-910b2]\nframework: {name: pytorch, version: '>=2.4,<2.6'}\n"
    fields = form(browser_client, template="pytorch-ddp", name="llama-web", tenant="ai-lab/nlp/llm-sft", device_count="4", advanced=advanced)
    chinese_plan = browser_client.post("/tasks/new/plan?lang=zh-CN", data=fields).text
    assert re.search(r'id="plan-summary"[^>]*>([^<]*)<', chinese_plan).group(1).startswith("现在即可回退到 ")


def test_between_forecasts_the_page_dates_the_estimate_and_says_when_a_new_task_will_get_one(
    ctx: ServiceContext, browser_client: TestClient, admin_api: TestClient
) -> None:
    # Two Ascend gangs for one node: the second waits and is forecast in the first pass. A
    # third, submitted before the forecast interval (policy.estimate_interval, 30 s) has
    # passed, is told when the next forecast is due; the second keeps its estimate, dated.
    pangu = {**example_task("mindspore-ascend.yaml"), "runtime_estimate": "2h"}
    ids = [submitted(admin_api, {**pangu, "name": f"pangu-{i}"}) for i in range(2)]
    schedule_once(ctx)
    waiting = next(i for i in ids if state_of(admin_api, i) == "queued")
    # Lower priority: behind the others in hand-out order, so that it does not take the
    # queue's reservation (its start would then be that promise, made in this pass).
    late = submitted(admin_api, {**pangu, "name": "pangu-late", "priority": "low"})
    schedule_once(ctx)

    first = admin_api.get(f"/api/v1/tasks/{waiting}").json()["pending"]
    new = admin_api.get(f"/api/v1/tasks/{late}").json()["pending"]
    assert first["eta_basis"] in ("forecast", "reservation") and first["estimated_at"]
    assert new["eta_basis"] == "pending" and new["estimated_start"] is None and new["next_estimate_at"], (
        {k: v for k, v in first.items() if k not in ("attempts", "summary", "reasons")},
        {k: v for k, v in new.items() if k not in ("attempts", "summary", "reasons")},
    )

    page = browser_client.get(f"/tasks/{late}").text
    assert attr(page, "pending-eta", "data-eta-basis") == "pending"
    assert re.search(r'id="pending-eta"[^>]*>not estimated yet: the next forecast is due \d{4}-\d\d-\d\d \d\d:\d\d:\d\d<', page)
    assert "its start is estimated by the next forecast (due " in re.search(r'id="pending-summary"[^>]*>([^<]*)<', page).group(1)
    chinese = browser_client.get(f"/tasks/{late}?lang=zh-CN").text
    assert re.search(r'id="pending-eta"[^>]*>尚未估算：下一次预测预计于 \d{4}-', chinese)
    assert "开始时间由下一次预测估算" in re.search(r'id="pending-summary"[^>]*>([^<]*)<', chinese).group(1)
    dated = browser_client.get(f"/tasks/{waiting}").text
    assert re.search(r'id="pending-eta-at">as of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d<', dated)
    assert re.search(r'id="pending-eta-at">（估算于 \d{4}-', browser_client.get(f"/tasks/{waiting}?lang=zh-CN").text)


def test_invalid_input_shows_the_apis_message_and_keeps_what_was_typed(browser_client: TestClient, admin_api: TestClient) -> None:
    bad_tenant = browser_client.post(
        "/tasks/new/plan", data=form(browser_client, template="data-prep", name="keep-me", tenant="nobody/x", command="echo kept")
    )
    assert bad_tenant.status_code == 422
    message = re.search(r'id="form-error">([^<]*)<', bad_tenant.text).group(1)
    assert "tenant: unknown tenant" in message and "infra/data/etl" in message  # names the field and the allowed values
    assert 'value="keep-me"' in bad_tenant.text and 'value="nobody/x"' in bad_tenant.text and "echo kept</textarea>" in bad_tenant.text

    bad_workers = browser_client.post("/tasks/new/plan", data=form(browser_client, template="data-prep", name="w", tenant=ETL, workers="two"))
    assert bad_workers.status_code == 422 and "workers: Input should be a valid integer" in bad_workers.text

    bad_yaml = browser_client.post(
        "/tasks/new/plan", data=form(browser_client, template="data-prep", name="y", tenant=ETL, advanced="features: [bf16")
    )
    assert bad_yaml.status_code == 422 and "advanced: not valid YAML" in bad_yaml.text and "features: [bf16</textarea>" in bad_yaml.text

    no_class = browser_client.post("/tasks/new/plan", data=form(browser_client, template="data-prep", name="d", tenant=ETL, device_count="2"))
    assert no_class.status_code == 422 and "device_class:" in no_class.text

    too_big = form(browser_client, template="pytorch-ddp", name="too-big", tenant="ai-lab/nlp/llm-sft", device_count="16")
    plan = browser_client.post("/tasks/new/plan", data=too_big).text
    assert attr(plan, "plan-result", "data-fits-when-idle") == "false"
    assert 'id="plan-cannot-submit"' in plan and 'id="confirm-submit"' not in plan
    refused = browser_client.post("/tasks/new/submit", data=too_big)
    assert refused.status_code == 422 and "cannot run on any pool" in refused.text and 'value="too-big"' in refused.text
    assert admin_api.get("/api/v1/tasks").json() == []

    stale = browser_client.post("/tasks/new/plan", data={**too_big, "csrf": "0" * 32})
    assert stale.status_code == 403 and 'id="error-message"' in stale.text


def test_pages_speak_chinese_and_cancel_ends_a_queued_task_once(browser_client: TestClient, admin_api: TestClient) -> None:
    task_id = submitted(admin_api, example_task("data-prep.yaml"))
    listing = browser_client.get("/tasks?lang=zh-CN").text
    assert "新建任务" in listing and "名称包含" in listing and "排队中" in listing
    detail = browser_client.get(f"/tasks/{task_id}?lang=zh-CN").text
    assert "时间线" in detail and "取消任务" in detail and "暂无输出。" in detail and "Timeline" not in detail
    assert "第 1 步" in browser_client.get("/tasks/new?lang=zh-CN").text

    page = browser_client.get(f"/tasks/{task_id}?lang=en").text
    assert 'id="cancel-task"' in page
    done = browser_client.post(f"/tasks/{task_id}/cancel", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/tasks/{task_id}"
    page = browser_client.get(f"/tasks/{task_id}").text
    assert attr(page, "task-state", "data-state") == "cancelled" and 'id="cancel-task"' not in page
    assert 'data-action="task.cancelled"' in page
    again = browser_client.post(f"/tasks/{task_id}/cancel", data={"csrf": csrf_of(page)})
    assert again.status_code == 409 and 'id="action-error"' in again.text and "already ended" in again.text
    forged = browser_client.post(f"/tasks/{task_id}/cancel", data={"csrf": "nope"})
    assert forged.status_code == 403


def test_a_task_that_needs_approval_says_so_in_the_plan_and_on_its_page(browser_client: TestClient, admin_api: TestClient) -> None:
    policy = {
        "kind": "ApprovalPolicy",
        "name": "prod-needs-ok",
        "tenant": "ai-lab",
        "environments": ["prod"],
        "over_quota": False,
        "budget_exceeded": False,
    }
    assert admin_api.post("/api/v1/apply", json={"documents": [policy]}).status_code == 200
    fields = form(browser_client, template="llm-serving", name="qwen-web", tenant="ai-lab/nlp/llm-serving", env="prod", command="echo serve")
    plan = browser_client.post("/tasks/new/plan", data=fields).text
    assert 'id="plan-approval" data-needed="true"' in plan and "prod" in plan
    location = browser_client.post("/tasks/new/submit", data=fields, follow_redirects=False).headers["location"]
    page = browser_client.get(location).text
    assert attr(page, "task-state", "data-state") == "pending_approval"
    assert 'id="approval" data-approval-id="' in page and 'href="/approvals"' in page


def test_other_tenants_tasks_stay_invisible_and_viewers_cannot_act(browser_client: TestClient, admin_api: TestClient) -> None:
    etl_task = submitted(admin_api, example_task("data-prep.yaml"))
    cv_task = submitted(admin_api, {**example_task("mindspore-ascend.yaml"), "name": "cv-task"})
    outsider = user_client(browser_client, admin_api, "cv-member", "member", "ai-lab/cv")
    listing = outsider.get("/tasks").text
    assert f'data-task-id="{cv_task}"' in listing and etl_task not in listing
    hidden = outsider.get(f"/tasks/{etl_task}")
    assert hidden.status_code == 404 and "tokenize-corpus" not in hidden.text
    csrf = csrf_of(listing)
    assert outsider.post(f"/tasks/{etl_task}/cancel", data={"csrf": csrf}).status_code == 404
    assert state_of(admin_api, etl_task) == "queued"
    assert "tokenize" not in outsider.get(f"/tasks/{etl_task}?fragment=log").text
    new_form = outsider.get("/tasks/new").text
    assert '<option value="ai-lab/cv/detection">' in new_form and '<option value="infra/data/etl">' not in new_form
    refused = outsider.post("/tasks/new/plan", data=form(outsider, template="data-prep", name="sneak", tenant=ETL, command="true"))
    assert refused.status_code == 403 and 'id="form-error"' in refused.text

    viewer = user_client(browser_client, admin_api, "etl-viewer", "viewer", "infra")
    page = viewer.get(f"/tasks/{etl_task}")
    assert page.status_code == 200 and 'id="cancel-task"' not in page.text
    assert 'id="log-error"' in page.text  # may read the task, not its logs: the panel says so
    assert 'id="new-task"' not in viewer.get("/tasks").text
