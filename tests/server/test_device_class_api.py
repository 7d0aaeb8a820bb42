"""Task type <-> device class rules and one-model gangs through the API (issue 16, items
4 and 5): `plan` and `describe pool` give the same answer for every task type on every
pool of the demo estate, offload work never lands on a GPU whatever the task names, and
a `class: gpu` gang runs on one device model unless it says `mix_models`."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hetpool.core.inventory import TaskType
from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, task_state

TENANT = "ai-lab/nlp/llm-sft"
TASK_TYPE_REASON = "device class does not take this task type"


def _pools(api: TestClient) -> list[dict]:
    return api.get("/api/v1/objects/pools").json()


def _plan(api: TestClient, **fields) -> dict:
    response = api.post("/api/v1/tasks/plan", json={"name": "probe", "tenant": TENANT, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def _one_device_on(pool: dict, device_class: str, task_type: TaskType) -> dict:
    devices = {"class": device_class, "count": 1}
    return {"type": task_type.value, "per_worker": {"devices": devices, "cpu": 1, "memory_gb": 1}, "any_of": [pool["name"]]}


@pytest.mark.parametrize("task_type", list(TaskType))
def test_plan_and_describe_pool_agree_for_every_pool(demo: TestClient, task_type: TaskType) -> None:
    """Every pool of the demo (every device class: gpu, npu, cpu, dpu) is idle, so a
    one-device task naming it fits exactly when its profile says it takes the type."""
    disagreements = []
    classes = set()
    for pool in _pools(demo):
        profile = demo.get(f"/api/v1/pools/{pool['name']}/profile").json()
        classes.add(profile["profile"]["class"])
        takes = next(t for t in profile["task_types"] if t["type"] == task_type.value)
        plan = _plan(demo, **_one_device_on(pool, profile["profile"]["class"], task_type))
        refused = TASK_TYPE_REASON in plan["explanation"]["reasons"]
        if takes["ok"] != plan["feasible"] or takes["ok"] == refused:
            disagreements.append((pool["name"], takes, plan["explanation"]["summary"]))
    assert classes == {"gpu", "npu", "cpu", "dpu"}
    assert not disagreements


@pytest.mark.parametrize(
    "choice",
    [
        {"per_worker": {"devices": {"class": "gpu", "count": 1}}},
        {"per_worker": {"devices": {"class": "dpu", "count": 1}}, "fallback": ["nvidia-bluefield-3", "bj-h800"]},
        {"per_worker": {"devices": {"class": "dpu", "count": 1}}, "any_of": ["gz-bluefield3", "nvidia-a100-80g"]},
        {"per_worker": {"devices": {"class": "dpu", "count": 1, "models": ["nvidia-h800"]}}},
    ],
    ids=["class-gpu", "fallback", "any_of", "models"],
)
def test_offload_work_is_never_placed_on_gpus(ctx: ServiceContext, demo: TestClient, choice: dict) -> None:
    # Fill the DPU node (two BlueField-3) so that, before, the named GPU took the work.
    hold = {"tenant": TENANT, "type": "offload", "per_worker": {"devices": {"class": "dpu", "count": 2}}, "command": "sleep 600"}
    response = demo.post("/api/v1/tasks", json={"name": "holder", **hold})
    assert response.status_code == 201, response.text
    holder = response.json()["id"]
    drive_until(ctx, lambda: task_state(demo, holder) == "running")
    plan = _plan(demo, type="offload", **choice)
    assert {p["model"] for p in plan["placements"]} <= {"nvidia-bluefield-3"}
    gpu_attempts = [a for a in plan["explanation"]["attempts"] if any(p.startswith("bj-") for p in a["pools"])]
    assert gpu_attempts and all(a["reasons"].get(TASK_TYPE_REASON) for a in gpu_attempts)
    demo.post(f"/api/v1/tasks/{holder}/cancel")
    drive_until(ctx, lambda: task_state(demo, holder) == "cancelled")


def test_offload_work_naming_only_gpus_is_refused_at_submit(demo: TestClient) -> None:
    spec = {"name": "ovs", "tenant": TENANT, "type": "offload", "per_worker": {"devices": {"class": "dpu", "count": 1}}, "fallback": ["bj-h800"]}
    response = demo.post("/api/v1/tasks", json=spec)
    assert response.status_code == 422, response.text
    assert TASK_TYPE_REASON in response.text or "do not take offload" in response.text


DDP = {"type": "training", "per_worker": {"devices": {"class": "gpu", "count": 8}, "cpu": 8, "memory_gb": 64}}


def test_a_ddp_gang_runs_on_two_idle_a100s_not_an_h800_plus_an_a100(demo: TestClient) -> None:
    plan = _plan(demo, **DDP, workers=2)
    assert plan["feasible"] and {p["model"] for p in plan["placements"]} == {"nvidia-a100-80g"}
    assert [a["candidate"] for a in plan["explanation"]["attempts"]] == ["class gpu: nvidia-h800", "class gpu: nvidia-a100-80g"]
    assert plan["fallback_used"] is False


def test_a_gang_larger_than_any_one_model_needs_mix_models(demo: TestClient) -> None:
    """Three 8-device workers: one H800 node and two A100 nodes hold them only mixed."""
    spec = {"name": "big-ddp", "tenant": TENANT, **DDP, "workers": 3}
    assert not _plan(demo, **spec)["fits_when_idle"]
    refused = demo.post("/api/v1/tasks", json=spec)
    assert refused.status_code == 422 and "fits only across device models (mix_models is off)" in refused.text
    mixed = {**spec, "per_worker": {**DDP["per_worker"], "devices": {"class": "gpu", "count": 8, "mix_models": True}}}
    plan = _plan(demo, **mixed)
    assert plan["feasible"] and {p["model"] for p in plan["placements"]} == {"nvidia-h800", "nvidia-a100-80g"}
    bogus = {**spec, "per_worker": {**DDP["per_worker"], "devices": {"class": "gpu", "count": 8, "mix_models": "maybe"}}}
    response = demo.post("/api/v1/tasks", json=bogus)
    assert response.status_code == 422 and "mix_models" in response.text
