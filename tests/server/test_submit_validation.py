"""What submit and plan refuse up front (issue 16): a task over its quota even with all the
borrowing it may do (422 exceeds_quota, unless an approval policy routes it to approval),
misspelt device models, pools and frameworks (422 with the close matches), and package
names such as vllm-ascend checked as the compatibility KB knows them."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, task_state

CUDA = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}}
CANN = {"driver": "24.1.0", "runtime": {"name": "cann", "version": "8.1.RC1"}}
A100, H800, B3 = "nvidia-a100-80g", "nvidia-h800", "ascend-910b3"


def _node(name: str, model: str, stack: dict) -> dict:
    devices = [{"model": model, "count": 8}]
    return {"kind": "Node", "name": name, "cluster": "c1", "cpu_cores": 64, "memory_gb": 512, "devices": devices, "stack": stack}


ESTATE = [
    {"kind": "Tenant", "name": "org"},
    {"kind": "Tenant", "name": "org/a"},
    {"kind": "Tenant", "name": "org/b"},
    {"kind": "Cluster", "name": "c1"},
    _node("g1", A100, CUDA),
    _node("g2", A100, CUDA),
    _node("h1", H800, CUDA),
    _node("n1", B3, CANN),
    {"kind": "Pool", "name": "a100", "cluster": "c1", "model": A100, "nodes": ["g1", "g2"]},
    {"kind": "Pool", "name": "h800", "cluster": "c1", "model": H800, "nodes": ["h1"]},
    {"kind": "Pool", "name": "ascend", "cluster": "c1", "model": B3, "nodes": ["n1"]},
]
QUOTAS = [
    {"kind": "Quota", "name": "org", "tenant": "org", "limits": [{"resource": A100, "nominal": 16}, {"resource": H800, "nominal": 8}]},
    {"kind": "Quota", "name": "team-a", "tenant": "org/a", "limits": [{"resource": A100, "nominal": 4, "borrowing_limit": 2}]},
    {"kind": "Quota", "name": "team-b", "tenant": "org/b", "limits": [{"resource": A100, "nominal": 8}]},
]


@pytest.fixture
def estate(api: TestClient) -> TestClient:
    response = api.post("/api/v1/apply", json={"documents": ESTATE})
    assert response.status_code == 200, response.text
    return api


def apply(api: TestClient, *documents: dict) -> None:
    response = api.post("/api/v1/apply", json={"documents": list(documents)})
    assert response.status_code == 200, response.text


def task(name: str, tenant: str = "org/a", devices: dict | None = None, workers: int = 1, **fields) -> dict:
    body = {"name": name, "tenant": tenant, "type": "training", "image": "img", "command": "sleep 60", "workers": workers}
    body["per_worker"] = {"devices": devices or {"class": "gpu", "count": 1}, "cpu": 1, "memory_gb": 1}
    return {**body, **fields}


# ------------------------------------------------------------------ item 2: quota ceiling


def test_a_task_above_nominal_plus_borrowing_is_refused_at_submit_naming_the_quota(estate: TestClient) -> None:
    apply(estate, *QUOTAS)
    big = task("too-big", devices={"class": "gpu", "models": [A100], "count": 8})  # 8 A100 > 4 nominal + 2 borrowable
    response = estate.post("/api/v1/tasks", json=big)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "exceeds_quota"
    assert "team-a" in body["message"] and "borrowing limit 2" in body["message"]
    [detail] = body["details"]
    assert (detail["loc"], detail["quota"], detail["resource"], detail["requested"], detail["nominal"], detail["borrowing_limit"]) == (
        "quota",
        "team-a",
        A100,
        8,
        4,
        2,
    )
    assert detail["borrowable"] == 2
    assert estate.get("/api/v1/tasks").json() == [] or all(t["name"] != "too-big" for t in estate.get("/api/v1/tasks").json())
    # plan gives the same verdict, with no placement, no wait and no start estimate.
    plan = estate.post("/api/v1/tasks/plan", json=big).json()
    assert plan["feasible"] is False and plan["placements"] == []
    expl = plan["explanation"]
    assert expl["reason"] == "exceeds_quota" and expl["quota"] == "team-a" and expl["eta_basis"] == "none"
    assert "exceeds quota team-a even with borrowing" in expl["summary"]
    assert plan.get("estimated_start") is None and plan.get("estimated_wait_s") is None
    # Within nominal + borrowing: accepted.
    ok = estate.post("/api/v1/tasks", json=task("fits", devices={"class": "gpu", "models": [A100], "count": 6}))
    assert ok.status_code == 201, ok.text


def test_a_task_that_may_also_use_an_h800_is_not_refused(estate: TestClient) -> None:
    apply(estate, *QUOTAS)
    either = task("either", devices={"class": "gpu", "models": [A100], "count": 8}, fallback=["h800"])
    response = estate.post("/api/v1/tasks", json=either)
    assert response.status_code == 201, response.text  # no A100 placement fits team-a, the H800 one does


def test_an_approval_policy_for_over_quota_work_takes_precedence_over_the_refusal(estate: TestClient) -> None:
    apply(estate, *QUOTAS)
    apply(estate, {"kind": "ApprovalPolicy", "name": "big", "tenant": "org", "over_quota": True, "budget_exceeded": False})
    response = estate.post("/api/v1/tasks", json=task("too-big", devices={"class": "gpu", "models": [A100], "count": 8}))
    assert response.status_code == 201, response.text
    assert response.json()["state"] == "pending_approval" and "over quota" in response.json()["message"]


# ------------------------------------------------------------------ item 6: unknown names


@pytest.mark.parametrize(
    ("fields", "loc", "close"),
    [
        ({"fallback": ["h800", "nvidia-a100-80gb"]}, "fallback[1]", "nvidia-a100-80g"),
        ({"any_of": ["nvidia-h80", "a100"]}, "any_of[0]", "nvidia-h800"),
        ({"fallback": ["a10o"]}, "fallback[0]", "a100"),
    ],
)
def test_a_mistyped_model_or_pool_is_a_422_listing_close_matches(estate: TestClient, fields: dict, loc: str, close: str) -> None:
    body = task("typo", devices={"class": "gpu", "count": 1}, **fields)
    for path in ("/api/v1/tasks", "/api/v1/tasks/plan"):
        response = estate.post(path, json=body)
        assert response.status_code == 422, response.text
        assert response.json()["code"] == "invalid_spec"
        [detail] = response.json()["details"]
        assert detail["loc"] == loc and close in detail["close_matches"], detail
        assert loc in response.json()["message"] and close in response.json()["message"]


def test_a_mistyped_devices_model_and_framework_are_refused_with_close_matches(estate: TestClient) -> None:
    body = task("typo", devices={"class": "gpu", "models": ["nvidia-h8oo"], "count": 1}, framework={"name": "pytorh"})
    response = estate.post("/api/v1/tasks", json=body)
    assert response.status_code == 422, response.text
    details = {d["loc"]: d for d in response.json()["details"]}
    assert "nvidia-h800" in details["per_worker.devices.models[0]"]["close_matches"]
    assert details["framework.name"]["close_matches"][0] == "pytorch"
    # Package names people use are not typos.
    for name in ("torch", "Torch", "vllm-ascend", "none"):
        ok = estate.post("/api/v1/tasks/plan", json=task("ok", devices={"class": "npu", "count": 1}, framework={"name": name}))
        assert ok.status_code == 200, ok.text


def test_a_template_with_a_mistyped_fallback_is_refused_when_applied_and_when_used(estate: TestClient) -> None:
    template = {"kind": "TaskTemplate", "name": "sft", "type": "training", "defaults": {"fallback": ["h80"], "framework": {"name": "pytorh"}}}
    response = estate.post("/api/v1/apply", json={"documents": [template]})
    assert response.status_code == 422, response.text
    assert "fallback[0]" in response.json()["message"] and "h800" in response.json()["message"]
    good = {**template, "defaults": {"fallback": ["h800"], "framework": {"name": "pytorh"}}}
    apply(estate, good)  # framework names are checked when a task uses the template
    response = estate.post("/api/v1/tasks", json=task("from-template", template="sft", devices={"class": "gpu", "models": [A100], "count": 1}))
    assert response.status_code == 422 and response.json()["details"][0]["loc"] == "framework.name"


def test_a_queued_task_whose_candidate_disappeared_fails_without_preempting(ctx: ServiceContext, estate: TestClient) -> None:
    apply(estate, _node("h2", H800, CUDA), {"kind": "Pool", "name": "spare", "cluster": "c1", "model": H800, "nodes": ["h2"]})
    gang = estate.post("/api/v1/tasks", json=task("gang", tenant="org/b", devices={"class": "gpu", "models": [A100], "count": 8}, workers=2))
    assert gang.status_code == 201, gang.text
    gang_id = gang.json()["id"]
    drive_until(ctx, lambda: task_state(estate, gang_id) == "running")
    urgent = task("urgent", tenant="org/a", devices={"class": "gpu", "models": [A100], "count": 8}, fallback=["spare"], priority="high")
    response = estate.post("/api/v1/tasks", json=urgent)
    assert response.status_code == 201, response.text
    urgent_id = response.json()["id"]
    assert estate.delete("/api/v1/objects/pools/spare").status_code in (200, 204)
    drive_until(ctx, lambda: task_state(estate, urgent_id) == "failed")
    assert "spec no longer valid" in estate.get(f"/api/v1/tasks/{urgent_id}").json()["message"]
    assert task_state(estate, gang_id) == "running"  # not preempted for a task that can never be judged
    estate.post(f"/api/v1/tasks/{gang_id}/cancel")


# ------------------------------------------------------------------ item 7: package names


def test_vllm_ascend_is_checked_as_the_vllm_ascend_matrix(estate: TestClient) -> None:
    # As an extra: only the Ascend pool can run it (it used to fit the A100s, "not checked").
    framework = {"name": "torch", "extras": {"vllm-ascend": "0.7.3"}}
    body = task("serve", devices={"class": "gpu", "count": 1}, any_of=["a100", "ascend"], framework=framework)
    plan = estate.post("/api/v1/tasks/plan", json=body).json()
    assert plan["feasible"] and plan["chosen"].startswith("any_of") and plan["placements"][0]["model"] == B3, plan
    a100_only = estate.post("/api/v1/tasks/plan", json={**body, "any_of": ["a100", "h800"]}).json()
    assert not a100_only["fits_when_idle"] and any("Ascend NPUs" in d for a in a100_only["explanation"]["attempts"] for d in a["details"])
    # As the framework name.
    as_framework = {**body, "framework": {"name": "vllm_ascend", "version": "0.7.3"}}
    assert estate.post("/api/v1/tasks/plan", json=as_framework).json()["placements"][0]["model"] == B3
    refused = estate.post("/api/v1/tasks", json={**as_framework, "any_of": ["a100", "h800"]})
    assert refused.status_code == 422 and refused.json()["code"] == "unschedulable"
