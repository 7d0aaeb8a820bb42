"""Tasks through the API: plan, submit, run on the local backend, logs, cancel, failures, audit."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, example_task, run_to_end, task_state


def submit(api: TestClient, task: dict) -> str:
    response = api.post("/api/v1/tasks", json=task)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_example_tasks_run_to_completion_on_compatible_devices(ctx: ServiceContext, demo: TestClient) -> None:
    expected_models = {
        "pytorch-ddp-training.yaml": {"nvidia-a100-80g"},
        "llm-inference.yaml": {"nvidia-h800"},  # the only GPU stack with vLLM installed
        "mindspore-ascend.yaml": {"ascend-910b3"},
        "batch-inference.yaml": {"ascend-310p", "ascend-910b2"},
    }
    ids = {name: submit(demo, example_task(name)) for name in expected_models}
    for name, task_id in ids.items():
        task = run_to_end(ctx, demo, task_id)
        assert task["state"] == "succeeded", (name, task["message"])
        assert {p["model"] for p in task["placements"]} <= expected_models[name]
        text = demo.get(f"/api/v1/tasks/{task_id}/logs").json()["text"]
        assert text.strip(), name
    ddp = demo.get(f"/api/v1/tasks/{ids['pytorch-ddp-training.yaml']}").json()
    assert len(ddp["placements"]) == 2
    rank1 = demo.get(f"/api/v1/tasks/{ddp['id']}/logs", params={"rank": 1}).json()["text"]
    assert "rank 1/2" in rank1 and "rank 1 done" in rank1
    # The visible-devices variable equals the assigned indices.
    devices = ",".join(str(d) for d in ddp["placements"][1]["devices"])
    assert f"devices {devices}" in rank1


def test_mindspore_never_lands_on_a_gpu_even_when_npus_are_busy(ctx: ServiceContext, demo: TestClient) -> None:
    task = example_task("mindspore-ascend.yaml")
    task["per_worker"]["devices"] = {"class": "npu", "count": 8}
    task["command"] = "sleep 30"
    first = submit(demo, task)
    drive_until(ctx, lambda: task_state(demo, first) == "running")
    plan = demo.post("/api/v1/tasks/plan", json={**task, "any_of": ["ascend-910b3", "nvidia-a100-80g", "nvidia-h800"]}).json()
    assert plan["feasible"] is False and plan["fits_when_idle"] is True
    assert any(reason.startswith("incompatible software stack") for reason in plan["reasons"])
    demo.post(f"/api/v1/tasks/{first}/cancel")
    drive_until(ctx, lambda: task_state(demo, first) == "cancelled")


def test_pytorch_24_on_npu_never_uses_a_cann_that_cannot_run_it(ctx: ServiceContext, demo: TestClient) -> None:
    task = {**example_task("pytorch24-npu.yaml"), "command": "sleep 30"}
    ids = [submit(demo, {**task, "name": f"pt24-{i}"}) for i in range(3)]
    drive_until(ctx, lambda: sum(task_state(demo, i) == "running" for i in ids) == 2)
    tasks = [demo.get(f"/api/v1/tasks/{i}").json() for i in ids]
    pools = {p["pool"] for t in tasks for p in t["placements"]}
    assert pools == {"sh-910b2-cann800"}
    # The 3rd waits although npu-b03 (CANN 8.0.RC1) has 8 idle 910B2s, and says why.
    [third] = [t for t in tasks if t["state"] == "queued"]
    reasons = third["pending"]["reasons"]
    assert any("CANN" in r or "incompatible" in r for r in reasons), reasons
    assert reasons.get("not enough free devices") == 2  # the two CANN 8.0.0 nodes are busy
    for i in ids:
        demo.post(f"/api/v1/tasks/{i}/cancel")
    drive_until(ctx, lambda: all(task_state(demo, i) == "cancelled" for i in ids))


def test_plan_explains_a_task_that_cannot_fit_anywhere(demo: TestClient) -> None:
    plan = demo.post("/api/v1/tasks/plan", json=example_task("impossible.yaml")).json()
    assert plan["feasible"] is False and plan["fits_when_idle"] is False
    assert plan["placements"] == [] and plan["fallback_used"] is False
    assert plan["reasons"] == {"fewer devices per node than requested": 3}
    assert [a["candidate"] for a in plan["explanation"]["attempts"]] == ["nvidia-h800", "nvidia-a100-80g"]
    assert "cannot run anywhere" in plan["explanation"]["summary"]
    # Submitting it is refused with the same reasons; nothing is stored.
    refused = demo.post("/api/v1/tasks", json=example_task("impossible.yaml"))
    assert refused.status_code == 422 and refused.json()["code"] == "unschedulable"
    assert demo.get("/api/v1/tasks").json() == []


def test_plan_commits_nothing_and_shows_fallback(ctx: ServiceContext, demo: TestClient) -> None:
    blocker = example_task("pytorch-ddp-training.yaml")
    blocker.update(name="blocker", command="sleep 30", workers=1, per_worker={"devices": {"class": "gpu", "count": 8}, "cpu": 8, "memory_gb": 64})
    blocker.pop("fallback")
    blocker["per_worker"]["devices"]["models"] = ["nvidia-a100-80g"]
    ids = [submit(demo, {**blocker, "name": f"blocker-{i}"}) for i in range(2)]
    drive_until(ctx, lambda: all(task_state(demo, i) == "running" for i in ids))
    plan = demo.post("/api/v1/tasks/plan", json=example_task("pytorch-ddp-training.yaml")).json()
    assert plan["feasible"] and plan["fallback_used"] is True
    assert {p["model"] for p in plan["placements"]} == {"nvidia-h800"}
    assert plan["explanation"]["attempts"][0]["candidate"] == "nvidia-a100-80g"
    assert plan["explanation"]["attempts"][0]["outcome"] == "no-fit"
    assert plan["cost_per_hour"] == 8 * 32.0
    assert len(demo.get("/api/v1/tasks").json()) == 2  # plan stored nothing
    for i in ids:
        demo.post(f"/api/v1/tasks/{i}/cancel")
    drive_until(ctx, lambda: all(task_state(demo, i) == "cancelled" for i in ids))


def test_failure_reports_exit_code_and_frees_capacity(ctx: ServiceContext, demo: TestClient) -> None:
    task = {**example_task("data-prep.yaml"), "command": "echo broken >&2; exit 3"}
    done = run_to_end(ctx, demo, submit(demo, task))
    assert done["state"] == "failed" and done["exit_code"] == 3
    assert "broken" in demo.get(f"/api/v1/tasks/{done['id']}/logs").json()["text"]


def test_cancel_stops_running_work(ctx: ServiceContext, demo: TestClient) -> None:
    task_id = submit(demo, {**example_task("data-prep.yaml"), "command": "echo started; sleep 60"})
    drive_until(ctx, lambda: "started" in demo.get(f"/api/v1/tasks/{task_id}/logs").json()["text"])
    assert demo.post(f"/api/v1/tasks/{task_id}/cancel").status_code == 200
    drive_until(ctx, lambda: task_state(demo, task_id) == "cancelled")
    again = demo.post(f"/api/v1/tasks/{task_id}/cancel")
    assert again.status_code == 409


def test_cancel_queued_task_never_runs(ctx: ServiceContext, demo: TestClient) -> None:
    task_id = submit(demo, example_task("data-prep.yaml"))
    assert demo.post(f"/api/v1/tasks/{task_id}/cancel").json()["state"] == "cancelled"
    drive_until(ctx, lambda: True)
    task = demo.get(f"/api/v1/tasks/{task_id}").json()
    assert task["state"] == "cancelled" and task["placements"] == []


def test_task_validation_errors_name_the_field(demo: TestClient) -> None:
    bad = {**example_task("data-prep.yaml"), "type": "trainig"}
    response = demo.post("/api/v1/tasks", json=bad)
    assert response.status_code == 422
    assert "training" in response.json()["message"] and "type" in response.json()["message"]
    unknown_tenant = demo.post("/api/v1/tasks", json={**example_task("data-prep.yaml"), "tenant": "nobody/x"})
    assert unknown_tenant.status_code == 422 and "tenant" in unknown_tenant.json()["message"]
    unknown_template = demo.post("/api/v1/tasks", json={**example_task("data-prep.yaml"), "template": "nope"})
    assert "unknown template 'nope'" in unknown_template.json()["message"]
    assert demo.get("/api/v1/tasks/t-missing").status_code == 404


def test_lifecycle_is_audited_in_order_and_the_chain_detects_tampering(ctx: ServiceContext, demo: TestClient) -> None:
    task_id = submit(demo, example_task("data-prep.yaml"))
    run_to_end(ctx, demo, task_id)
    actions = [e["action"] for e in demo.get(f"/api/v1/tasks/{task_id}").json()["events"]]
    assert actions == ["task.submit", "task.admitted", "task.dispatched", "task.running", "task.succeeded"] or actions == [
        "task.submit",
        "task.admitted",
        "task.dispatched",
        "task.succeeded",
    ]
    assert demo.get("/api/v1/audit/verify").json()["ok"] is True
    from sqlalchemy import text

    with ctx.db.transaction() as session:
        victim = session.execute(text("SELECT id FROM audit_events WHERE action = 'task.submit'")).scalar_one()
        session.execute(text("UPDATE audit_events SET actor = 'mallory' WHERE id = :i"), {"i": victim})
    result = demo.get("/api/v1/audit/verify").json()
    assert result["ok"] is False and result["first_bad_event"] == victim


def test_tenant_and_template_of_a_waiting_task_cannot_be_deleted(demo: TestClient) -> None:
    task_id = submit(demo, example_task("data-prep.yaml"))
    conflict = demo.delete("/api/v1/objects/tenants/infra/data/etl")
    assert conflict.status_code == 409 and f"Task/{task_id}" in conflict.json()["message"]
    assert demo.delete("/api/v1/objects/templates/data-prep").status_code == 409
    demo.post(f"/api/v1/tasks/{task_id}/cancel")
    assert demo.delete("/api/v1/objects/templates/data-prep").status_code == 204
