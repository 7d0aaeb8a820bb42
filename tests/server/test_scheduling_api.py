"""The scheduling core through the API: preemption end to end, queues and policy objects,
queue position and estimated start in plan, slices on shareable pools, explanations."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, task_state

A100_TASK = {
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "framework": {"name": "pytorch", "version": ">=2.4"},
    "per_worker": {"devices": {"class": "gpu", "models": ["nvidia-a100-80g"], "count": 8}, "cpu": 8, "memory_gb": 64},
}


def submit(api: TestClient, **fields) -> str:
    response = api.post("/api/v1/tasks", json=fields)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def events(api: TestClient, task_id: str) -> list[str]:
    return [e["action"] for e in api.get(f"/api/v1/tasks/{task_id}").json()["events"]]


def test_high_priority_preempts_low_priority_running_work_which_is_requeued(ctx: ServiceContext, demo: TestClient) -> None:
    low = submit(demo, **A100_TASK, name="low-sweep", workers=2, priority="low", command="echo low-start; sleep 60")
    drive_until(ctx, lambda: task_state(demo, low) == "running")
    high = submit(demo, **A100_TASK, name="urgent-fix", priority="high", command="echo high-done")
    drive_until(ctx, lambda: task_state(demo, high) == "succeeded", timeout_s=30)
    victim = demo.get(f"/api/v1/tasks/{low}").json()
    assert "task.preempted" in events(demo, low)
    assert "preempted by" in " ".join(e.get("after", {}).get("message", "") or "" for e in victim["events"] if e["after"])
    # The victim went back to its queue and runs again as attempt 2 once capacity is back.
    drive_until(ctx, lambda: demo.get(f"/api/v1/tasks/{low}").json()["attempt"] == 2 and task_state(demo, low) == "running", timeout_s=30)
    assert demo.get(f"/api/v1/tasks/{low}").json()["job_id"] == f"hetpool-{low}-2"
    demo.post(f"/api/v1/tasks/{low}/cancel")
    drive_until(ctx, lambda: task_state(demo, low) == "cancelled")


def test_policy_object_can_switch_preemption_off_for_gpus(ctx: ServiceContext, demo: TestClient) -> None:
    policy = {"kind": "SchedulingPolicy", "name": "default", "classes": {"gpu": {"preemption": False}}}
    assert demo.post("/api/v1/apply", json={"documents": [policy]}).status_code == 200
    low = submit(demo, **A100_TASK, name="low-sweep", workers=2, priority="low", command="sleep 60")
    drive_until(ctx, lambda: task_state(demo, low) == "running")
    high = submit(demo, **A100_TASK, name="urgent", priority="high", command="true", fallback=[])
    drive_until(ctx, lambda: (demo.get(f"/api/v1/tasks/{high}").json().get("pending") or {}).get("summary") is not None)
    pending = demo.get(f"/api/v1/tasks/{high}").json()["pending"]
    # It waits holding a reservation (backfill may not delay it); nothing is preempted.
    assert pending["reason"] == "holds_reservation" and "— 0/12 nodes available" in pending["summary"]
    assert task_state(demo, low) == "running" and "preempting" not in pending
    demo.post(f"/api/v1/tasks/{low}/cancel")
    drive_until(ctx, lambda: task_state(demo, low) == "cancelled")


def test_a_minimum_run_time_keeps_young_work_from_being_preempted(ctx: ServiceContext, demo: TestClient) -> None:
    """SchedulingPolicy.preempt_exempt_time (Slurm's PreemptExemptTime): the high task waits
    until the low one has run an hour, then preempts it."""
    policy = {"kind": "SchedulingPolicy", "name": "default", "preempt_exempt_time": "1h"}
    assert demo.post("/api/v1/apply", json={"documents": [policy]}).status_code == 200
    low = submit(demo, **A100_TASK, name="low-sweep", workers=2, priority="low", command="sleep 120")
    drive_until(ctx, lambda: task_state(demo, low) == "running")
    high = submit(demo, **A100_TASK, name="urgent", priority="high", command="true", fallback=[])
    drive_until(ctx, lambda: (demo.get(f"/api/v1/tasks/{high}").json().get("pending") or {}).get("summary") is not None)
    pending = demo.get(f"/api/v1/tasks/{high}").json()["pending"]
    assert "preempting" not in pending and task_state(demo, low) == "running"
    ctx.clock.advance(3601)
    drive_until(ctx, lambda: "task.preempted" in events(demo, low), timeout_s=30)
    drive_until(ctx, lambda: task_state(demo, high) == "succeeded", timeout_s=30)
    demo.post(f"/api/v1/tasks/{low}/cancel")
    drive_until(ctx, lambda: task_state(demo, low) == "cancelled")


def test_queue_object_restricts_pools_and_is_shown_in_the_explanation(ctx: ServiceContext, demo: TestClient) -> None:
    queue = {"kind": "Queue", "name": "serving", "task_types": ["inference"], "pools": ["bj-h800"]}
    assert demo.post("/api/v1/apply", json={"documents": [queue]}).status_code == 200
    bad = demo.post("/api/v1/apply", json={"documents": [{**queue, "name": "bad", "pools": ["nope"]}]})
    assert bad.status_code == 422 and "unknown pool or device model 'nope'" in bad.text
    task = {
        "tenant": "ai-lab/nlp/llm-serving",
        "type": "inference",
        "framework": {"name": "pytorch", "version": ">=2.4"},
        "per_worker": {"devices": {"class": "gpu", "count": 8}, "cpu": 4, "memory_gb": 16},
        "image": "registry.local/serve:1",
    }
    first = submit(demo, **task, name="serve-a", command="sleep 30")
    drive_until(ctx, lambda: task_state(demo, first) == "running")
    assert {p["pool"] for p in demo.get(f"/api/v1/tasks/{first}").json()["placements"]} == {"bj-h800"}
    # plan agrees with the scheduler: the idle A100s are not this queue's to use.
    planned = demo.post("/api/v1/tasks/plan", json={**task, "name": "serve-b", "command": "true"}).json()
    assert planned["feasible"] is False and planned["reasons"].get("pool not available to the task's queue", 0) >= 2
    second = submit(demo, **task, name="serve-b", command="true")
    drive_until(ctx, lambda: (demo.get(f"/api/v1/tasks/{second}").json().get("pending") or {}).get("queue") == "serving")
    pending = demo.get(f"/api/v1/tasks/{second}").json()["pending"]
    assert pending["reasons"].get("pool not available to the task's queue", 0) >= 2  # the idle A100 nodes
    assert task_state(demo, second) == "queued"
    demo.post(f"/api/v1/tasks/{first}/cancel")
    drive_until(ctx, lambda: task_state(demo, second) in {"running", "succeeded"})


def test_plan_shows_queue_position_and_estimated_start(ctx: ServiceContext, demo: TestClient) -> None:
    h800 = {
        "tenant": "ai-lab/nlp/llm-sft",
        "type": "training",
        "framework": {"name": "pytorch", "version": ">=2.5"},
        "per_worker": {"devices": {"class": "gpu", "models": ["nvidia-h800"], "count": 8}, "cpu": 8, "memory_gb": 64},
        "runtime_estimate": "2h",
    }
    running = submit(demo, **h800, name="long-train", command="sleep 60")
    drive_until(ctx, lambda: task_state(demo, running) == "running")
    plan = demo.post("/api/v1/tasks/plan", json={**h800, "name": "next-train", "command": "true"}).json()
    assert plan["feasible"] is False and plan["fits_when_idle"] is True
    assert plan["queue_position"] == 1
    # 2h on the reference device, scaled by the H800's relative training performance.
    from hetpool.catalog.devices import DeviceCatalog
    from hetpool.core.inventory import TaskType

    expected = 7200 / DeviceCatalog.builtin().get("nvidia-h800").perf_for(TaskType.TRAINING)
    assert plan["estimated_start"] is not None and abs(plan["estimated_wait_s"] - expected) < 5
    assert plan["estimated_pool"] == "bj-h800"
    demo.post(f"/api/v1/tasks/{running}/cancel")
    drive_until(ctx, lambda: task_state(demo, running) == "cancelled")


def test_memory_slices_share_a_device_on_a_shareable_pool(ctx: ServiceContext, demo: TestClient) -> None:
    slice_task = {
        "tenant": "ai-lab/nlp/llm-serving",
        "type": "inference",
        "framework": {"name": "pytorch", "version": ">=2.3"},
        "per_worker": {"devices": {"class": "npu", "models": ["ascend-310p"], "memory_gb": 10}, "cpu": 2, "memory_gb": 8},
        "command": "sleep 20",
    }
    ids = [submit(demo, **slice_task, name=f"slice-{i}") for i in range(3)]
    drive_until(ctx, lambda: all(task_state(demo, i) == "running" for i in ids))
    placements = [demo.get(f"/api/v1/tasks/{i}").json()["placements"][0] for i in ids]
    by_device: dict[tuple, float] = {}
    for p in placements:
        key = (p["node"], p["devices"][0])
        by_device[key] = by_device.get(key, 0) + p["device_fraction"]
    assert all(share <= 1.0 + 1e-9 for share in by_device.values())  # never oversubscribed
    assert max(by_device.values()) > 0.8  # two 10 GB slices of a 24 GB 310P share one device
    not_shareable = demo.post(
        "/api/v1/tasks/plan",
        json={
            **slice_task,
            "name": "x",
            "per_worker": {**slice_task["per_worker"], "devices": {"class": "npu", "models": ["ascend-910b2"], "memory_gb": 10}},
        },
    ).json()
    assert "pool does not allow fractional devices" in not_shareable["reasons"]
    for i in ids:
        demo.post(f"/api/v1/tasks/{i}/cancel")
    drive_until(ctx, lambda: all(task_state(demo, i) == "cancelled" for i in ids))


def test_unknown_queue_is_rejected_at_submit(demo: TestClient) -> None:
    response = demo.post("/api/v1/tasks", json={**A100_TASK, "name": "x", "queue": "nope", "command": "true"})
    assert response.status_code == 422
    assert "queue: unknown queue 'nope'; known: default" in response.json()["message"]


def test_a_task_preempted_too_often_is_not_evicted_again(ctx: ServiceContext, demo: TestClient) -> None:
    from sqlalchemy import update

    from hetpool.server.db.models import TaskRow

    low = submit(demo, **A100_TASK, name="low-sweep", workers=2, priority="low", command="sleep 60")
    drive_until(ctx, lambda: task_state(demo, low) == "running")
    with ctx.db.transaction() as session:  # it has already given way three times (the default limit)
        session.execute(update(TaskRow).where(TaskRow.id == low).values(preemptions=3))
    high = submit(demo, **A100_TASK, name="urgent", priority="high", command="true")
    drive_until(ctx, lambda: (demo.get(f"/api/v1/tasks/{high}").json().get("pending") or {}).get("summary") is not None)
    assert task_state(demo, low) == "running"
    assert "preempting" not in demo.get(f"/api/v1/tasks/{high}").json()["pending"]
    demo.post(f"/api/v1/tasks/{low}/cancel")
    drive_until(ctx, lambda: task_state(demo, high) == "succeeded", timeout_s=30)


def test_plan_names_the_backend_and_what_it_cannot_do(demo: TestClient) -> None:
    plan = demo.post("/api/v1/tasks/plan", json={**A100_TASK, "name": "where", "workers": 2}).json()
    assert plan["backend"]["kind"] == "local" and plan["backend"]["capabilities"]["gang"] is True
    assert plan["backend"]["unsupported"] == []
    # A Slurm cluster cannot share a device between tasks: plan says so before dispatch would fail.
    slurm = {"kind": "Cluster", "name": "hpc", "backend": "slurm", "backend_config": {"sync": "off"}}
    node = {"kind": "Node", "name": "s1", "cluster": "hpc", "cpu_cores": 32, "memory_gb": 256, "devices": [{"model": "nvidia-t4", "count": 4}]}
    pool = {"kind": "Pool", "name": "hpc-t4", "cluster": "hpc", "model": "nvidia-t4", "nodes": ["s1"], "shareable": True}
    assert demo.post("/api/v1/apply", json={"documents": [slurm, node, pool]}).status_code == 200
    sliced = {"name": "slice", "tenant": "ai-lab/nlp/llm-sft", "type": "inference", "image": "img", "any_of": ["hpc-t4"]}
    sliced["per_worker"] = {"devices": {"class": "gpu", "count": 1, "memory_gb": 4}}
    plan = demo.post("/api/v1/tasks/plan", json=sliced).json()
    assert plan["feasible"] and plan["backend"]["kind"] == "slurm"
    [gap] = plan["backend"]["unsupported"]
    assert gap["capability"] == "fractional-devices" and "slice of a device" in gap["reason"]


def test_a_shortest_first_queue_runs_the_shorter_estimate_first(ctx: ServiceContext, demo: TestClient) -> None:
    queue = {"kind": "Queue", "name": "sjf", "task_types": ["training"], "pools": ["bj-h800"], "ordering": "shortest-first"}
    bad = demo.post("/api/v1/apply", json={"documents": [{**queue, "ordering": "shortest"}]})
    assert bad.status_code == 422 and "ordering" in bad.text and "shortest-first" in bad.text
    assert demo.post("/api/v1/apply", json={"documents": [queue]}).status_code == 200
    h800 = {**A100_TASK, "per_worker": {**A100_TASK["per_worker"], "devices": {"class": "gpu", "models": ["nvidia-h800"], "count": 8}}}
    blocker = submit(demo, **h800, name="blocker", runtime_estimate="1h", command="sleep 60")
    drive_until(ctx, lambda: task_state(demo, blocker) == "running")
    long = submit(demo, **h800, name="long", runtime_estimate="5h", command="sleep 60")
    short = submit(demo, **h800, name="short", runtime_estimate="10m", command="sleep 60")
    plan = demo.post("/api/v1/tasks/plan", json={**h800, "name": "medium", "runtime_estimate": "1h", "command": "true"}).json()
    assert plan["queue_position"] == 2  # behind the 10-minute task, ahead of the 5-hour one (submitted first)
    demo.post(f"/api/v1/tasks/{blocker}/cancel")
    drive_until(ctx, lambda: task_state(demo, short) == "running", timeout_s=30)
    assert task_state(demo, long) == "queued"
    for task_id in (short, long):
        demo.post(f"/api/v1/tasks/{task_id}/cancel")
    drive_until(ctx, lambda: task_state(demo, long) == "cancelled" and task_state(demo, short) == "cancelled")


def test_backfilled_work_that_overruns_its_estimate_gives_way_to_the_head(ctx: ServiceContext, demo: TestClient) -> None:
    """The backfill bound end to end: a 10-minute estimate lets work onto the node a waiting
    gang has reserved; it overruns, and once the gang could otherwise start and the overrun
    passes the allowance (5 min by default), the work is preempted for it (requeued)
    instead of delaying it for as long as it runs."""
    bad = demo.post("/api/v1/apply", json={"documents": [{"kind": "SchedulingPolicy", "name": "default", "backfill_overrun_allowance": "soon"}]})
    assert bad.status_code == 422 and "backfill_overrun_allowance" in bad.text
    holder = submit(demo, **A100_TASK, name="holder", runtime_estimate="1h", command="sleep 120")
    drive_until(ctx, lambda: task_state(demo, holder) == "running")
    head = submit(demo, **A100_TASK, name="gang", workers=2, runtime_estimate="1h", command="sleep 120")
    drive_until(ctx, lambda: (demo.get(f"/api/v1/tasks/{head}").json().get("pending") or {}).get("reason") == "holds_reservation")
    ctx.clock.advance(60)
    late = submit(demo, **A100_TASK, name="late", runtime_estimate="10m", command="sleep 120")
    drive_until(ctx, lambda: task_state(demo, late) == "running")
    ctx.clock.advance(12 * 60)  # 2 minutes past its estimate: within the allowance
    demo.post(f"/api/v1/tasks/{holder}/cancel")
    drive_until(ctx, lambda: task_state(demo, holder) == "cancelled")
    for _ in range(3):
        drive_until(ctx, lambda: True)
    assert task_state(demo, head) == "queued" and task_state(demo, late) == "running"
    ctx.clock.advance(5 * 60)  # 7 minutes past it
    drive_until(ctx, lambda: task_state(demo, head) == "running", timeout_s=40)
    victim = demo.get(f"/api/v1/tasks/{late}").json()
    assert "task.preempted" in events(demo, late)
    messages = " ".join((e.get("after") or {}).get("message", "") or "" for e in victim["events"])
    assert "overran its runtime estimate" in messages and head in messages
    for task_id in (head, late):
        demo.post(f"/api/v1/tasks/{task_id}/cancel")
    drive_until(ctx, lambda: all(task_state(demo, t) == "cancelled" for t in (head, late)), timeout_s=30)
