"""The goal form (/tasks/new/goal) through its HTML: it renders in English and Chinese with
the open-model table's names, "Recommend" shows the ranked options of the 8B LoRA example
side by side on the demo inventory, a bad goal shows the API's message on the form and
keeps what was typed, "Submit this option" creates the task the option describes (its
devices and fallback), and a member of another tenant can neither get options nor submit
for a tenant they do not belong to. GET /api/v1/catalog/open-models is checked here too."""

from __future__ import annotations

import html
import json
import re

import pytest
from fastapi.testclient import TestClient

from tests.web.conftest import csrf_of, sign_in

SFT = "ai-lab/nlp/llm-sft"
GOAL = {
    "tenant": SFT,
    "name": "sft-8b",
    "framework": "pytorch",
    "framework_version": ">=2.4",
    "model": "llama3.1-8b",
    "method": "lora",
    "precision": "bf16",
    "seq_len": "4096",
    "tokens": "2e9",
    "deadline": "48h",
    "max_cost": "2000",
}


@pytest.fixture
def admin_api(browser_client: TestClient, admin_token: str) -> TestClient:
    return TestClient(browser_client.app, headers={"Authorization": f"Bearer {admin_token}"})


def goal_form(client: TestClient, **fields: str) -> dict[str, str]:
    """The goal form's fields as a browser posts them (empty = not given)."""
    base = dict.fromkeys(("params", "latency_ms", "throughput_tokens_per_s", "command"), "")
    return {**base, **GOAL, **fields, "csrf": csrf_of(client.get("/tasks/new/goal").text)}


def cards(page: str) -> list[dict[str, str]]:
    """Each option card's data-attributes, in page order."""
    found = re.findall(r'<article class="goal-option[^"]*" data-rank="(\d+)" data-pool="([^"]+)" data-model="([^"]+)" data-count="(\d+)"', page)
    return [{"rank": r, "pool": p, "model": m, "count": c} for r, p, m, c in found]


def option_tasks(page: str) -> list[dict]:
    return [json.loads(html.unescape(v)) for v in re.findall(r'<input type="hidden" name="task" value="([^"]*)"', page)]


def member_of(browser_client: TestClient, admin_api: TestClient, name: str, tenant: str) -> TestClient:
    created = admin_api.post("/api/v1/users", json={"name": name, "bindings": [{"role": "member", "tenant": tenant}]})
    assert created.status_code == 201, created.text
    token = admin_api.post(f"/api/v1/users/{name}/tokens", json={"label": "web test"}).json()["token"]
    return sign_in(TestClient(browser_client.app), token)


def test_the_open_model_table_is_readable_by_whoever_reads_the_inventory(browser_client: TestClient, admin_api: TestClient) -> None:
    models = admin_api.get("/api/v1/catalog/open-models")
    assert models.status_code == 200, models.text
    by_name = {m["name"]: m for m in models.json()}
    assert {"llama3.1-8b", "qwen2.5-72b", "resnet-50"} <= set(by_name)
    assert by_name["llama3.1-8b"] == {"name": "llama3.1-8b", "display_name": "Meta Llama 3.1 8B", "params_b": 8.03, "architecture": "decoder"}
    assert [m["name"] for m in models.json()] == sorted(by_name)
    assert TestClient(browser_client.app).get("/api/v1/catalog/open-models").status_code == 401
    auditor = admin_api.post("/api/v1/users", json={"name": "goal-auditor", "bindings": [{"role": "auditor"}]})
    assert auditor.status_code == 201, auditor.text
    token = admin_api.post("/api/v1/users/goal-auditor/tokens", json={"label": "t"}).json()["token"]
    # like the other catalog reads: not for auditors and agents (tests/server/test_role_walk.py has the whole table)
    assert TestClient(browser_client.app).get("/api/v1/catalog/open-models", headers={"Authorization": f"Bearer {token}"}).status_code == 403


def test_the_goal_form_renders_in_both_languages(browser_client: TestClient) -> None:
    assert 'href="/tasks/new/goal" id="goal-form-link"' in browser_client.get("/tasks/new").text
    page = browser_client.get("/tasks/new/goal?lang=en").text
    assert 'id="goal-form"' in page and 'id="recommend-button"' in page and 'id="goal-result"' not in page
    for field in ("tenant", "name", "framework", "framework_version", "model", "params", "method", "precision", "seq_len", "tokens", "deadline"):
        assert f'id="{field}" name="{field}"' in page, field
    for field in ("max_cost", "latency_ms", "throughput_tokens_per_s", "command"):
        assert f'id="{field}" name="{field}"' in page, field
    assert '<option value="llama3.1-8b">Meta Llama 3.1 8B · 8.03B</option>' in page  # the datalist, from the API
    assert '<option value="lora" >LoRA fine-tuning (lora)</option>' in page
    assert '<option value="bf16" selected>bf16</option>' in page  # the goal's default precision
    assert f'<option value="{SFT}">' in page and "Submit a task by its goal" in page

    chinese = browser_client.get("/tasks/new/goal?lang=zh-CN").text
    assert "按目标提交任务" in chinese and "推荐方案" in chinese and "LoRA 微调" in chinese
    assert "Submit a task by its goal" not in chinese and "Recommend<" not in chinese


def test_recommend_shows_the_options_side_by_side(browser_client: TestClient, admin_api: TestClient) -> None:
    page = browser_client.post("/tasks/new/goal", data=goal_form(browser_client))
    assert page.status_code == 200, page.text
    text = page.text
    shown = cards(text)
    goal = {"model": "llama3.1-8b", "method": "lora", "precision": "bf16", "seq_len": 4096, "tokens": "2e9", "deadline": "48h", "max_cost": 2000}
    body = {"name": "sft-8b", "tenant": SFT, "framework": {"name": "pytorch", "version": ">=2.4"}, "goal": goal}
    answer = admin_api.post("/api/v1/tasks/recommend", json=body).json()
    # The cards are the API's options, in its order, each with its own task to submit.
    assert len(shown) == len(answer["options"]) >= 2
    assert [(c["pool"], c["model"], int(c["count"])) for c in shown] == [(o["pool"], o["model"], o["count"]) for o in answer["options"]]
    assert [c["rank"] for c in shown] == [str(i) for i in range(1, len(shown) + 1)]
    assert option_tasks(text) == [o["task"] for o in answer["options"]]
    assert f'data-options="{len(shown)}"' in text and 'id="goal-options"' in text
    assert "Sized for llama3.1-8b (8.03B parameters)" in text
    best = answer["options"][0]
    assert f'<b class="mono">{best["count"]} × {best["model"]}</b>' in text
    assert best["estimated_runtime"] in text and f"{best['cost']:,.2f}" in text
    # Each target is a badge, met or missed, as the API judged it.
    for target, met in best["meets"].items():
        assert f'data-target="{target}" data-met="{"true" if met else "false"}"' in text
    assert "✓ Deadline met" in text and "✗ Cost ceiling missed" in text
    assert html.escape(best["reasons"][0]) in text
    # The pools left out, with the reason.
    assert 'id="goal-excluded"' in text
    for pool in {e["pool"] for e in answer["excluded"]}:
        assert f'<tr data-pool="{pool}"' in text
    assert "relative performance 0.05 is below 0.1" in text
    assert 'name="model" list="model-options" value="llama3.1-8b"' in text  # the form keeps what was typed
    assert admin_api.get("/api/v1/tasks").json() == []  # recommending stores nothing

    chinese = browser_client.post("/tasks/new/goal?lang=zh-CN", data=goal_form(browser_client)).text
    assert "比较各方案" in chinese and "提交此方案" in chinese and "截止时间已满足" in chinese and "未纳入的资源池" in chinese


def test_a_bad_goal_shows_the_apis_message_on_the_form(browser_client: TestClient) -> None:
    unknown = browser_client.post("/tasks/new/goal", data=goal_form(browser_client, model="llama9-8b"))
    assert unknown.status_code == 422
    message = html.unescape(re.search(r'id="form-error">([^<]*)<', unknown.text).group(1))
    assert "goal.model: unknown model 'llama9-8b'" in message and "llama3.1-8b" in message
    assert 'value="llama9-8b"' in unknown.text and 'id="goal-result"' not in unknown.text

    no_method = browser_client.post("/tasks/new/goal", data=goal_form(browser_client, method=""))
    assert no_method.status_code == 422 and "goal.method" in no_method.text

    bad_cost = browser_client.post("/tasks/new/goal", data=goal_form(browser_client, max_cost="lots"))
    assert bad_cost.status_code == 422 and "max_cost" in bad_cost.text and 'value="lots"' in bad_cost.text

    zh = browser_client.post("/tasks/new/goal?lang=zh-CN", data=goal_form(browser_client, model="llama9-8b"))
    assert zh.status_code == 422 and "无法给出方案" in zh.text

    stale = browser_client.post("/tasks/new/goal", data={**goal_form(browser_client), "csrf": "0" * 32})
    assert stale.status_code == 403 and 'id="error-message"' in stale.text


def test_submitting_an_option_creates_its_task(browser_client: TestClient, admin_api: TestClient) -> None:
    page = browser_client.post("/tasks/new/goal", data=goal_form(browser_client, command="echo tune")).text
    chosen = option_tasks(page)[1]  # not only the first one: any card submits its own task
    fields = {**goal_form(browser_client, command="echo tune"), "task": json.dumps(chosen)}
    submitted = browser_client.post("/tasks/new/goal/submit", data=fields, follow_redirects=False)
    assert submitted.status_code == 303, submitted.text
    location = submitted.headers["location"]
    assert re.fullmatch(r"/tasks/t-[0-9a-f]+", location)
    task = admin_api.get(f"/api/v1/tasks/{location.rsplit('/', 1)[1]}").json()
    spec = task["spec"]
    devices = spec["per_worker"]["devices"]
    assert {k: devices[k] for k in chosen["per_worker"]["devices"]} == chosen["per_worker"]["devices"] and spec["workers"] == chosen["workers"]
    assert spec["fallback"] == chosen["fallback"] and spec["goal"]["model"] == "llama3.1-8b"
    assert task["tenant"] == SFT and task["name"] == "sft-8b" and spec["command"] == "echo tune"
    assert browser_client.get(location).status_code == 200

    # A document the API refuses (here: an unknown field) shows its message on the kept form.
    refused = browser_client.post("/tasks/new/goal/submit", data={**fields, "task": json.dumps({**chosen, "colour": "red"})})
    assert refused.status_code == 422 and 'id="form-error"' in refused.text and "colour" in refused.text
    assert 'value="llama3.1-8b"' in refused.text
    garbled = browser_client.post("/tasks/new/goal/submit", data={**fields, "task": "[1, 2"})
    assert garbled.status_code == 422 and "not a task document" in garbled.text
    forged = browser_client.post("/tasks/new/goal/submit", data={**fields, "csrf": "nope"})
    assert forged.status_code == 403
    assert len(admin_api.get("/api/v1/tasks").json()) == 1


def test_a_member_of_another_tenant_cannot_recommend_or_submit_for_it(browser_client: TestClient, admin_api: TestClient) -> None:
    page = browser_client.post("/tasks/new/goal", data=goal_form(browser_client)).text
    task = option_tasks(page)[0]
    outsider = member_of(browser_client, admin_api, "cv-goal-member", "ai-lab/cv")
    form_page = outsider.get("/tasks/new/goal").text
    assert '<option value="ai-lab/cv/detection">' in form_page and f'<option value="{SFT}">' not in form_page
    refused = outsider.post("/tasks/new/goal", data=goal_form(outsider))
    assert refused.status_code == 403 and 'id="form-error"' in refused.text and 'id="goal-result"' not in refused.text
    sneak = outsider.post("/tasks/new/goal/submit", data={**goal_form(outsider), "task": json.dumps(task)})
    assert sneak.status_code == 403 and 'id="form-error"' in sneak.text
    assert admin_api.get("/api/v1/tasks").json() == []
    # Their own tenant works: the same goal, billed to ai-lab/cv/detection.
    own = outsider.post("/tasks/new/goal", data=goal_form(outsider, tenant="ai-lab/cv/detection"))
    assert own.status_code == 200 and cards(own.text)
