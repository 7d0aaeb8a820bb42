"""POST /api/v1/capacity/what-if: the server's own history replayed on today's inventory and
on a changed one, its bounds (named fields, allowed model ids, task and time limits), and
who may run it (inventory.read; a scoped user replays only its own subtrees)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from hetpool.server.db.models import TaskRow
from hetpool.server.services import capacity_whatif
from hetpool.server.services.context import ServiceContext
from tests.server.helpers import TERMINAL, drive_until, example_task
from tests.server.test_access_api import make_user

WHAT_IF = "/api/v1/capacity/what-if"
# (example task, created, started, finished: seconds before now). The two MindSpore jobs
# share the one 8-device 910B3 node, so the second waits about an hour.
HISTORY = [
    ("mindspore-ascend.yaml", 7200, 7200, 3600),
    ("mindspore-ascend.yaml", 7100, 3600, 600),
    ("llm-inference.yaml", 6000, 6000, 2400),
    ("data-prep.yaml", 5000, 5000, 4700),
    ("batch-inference.yaml", 4000, 4000, 1200),
]


def finished_history(ctx: ServiceContext, api: TestClient, rows=HISTORY) -> list[str]:
    """Run the examples to the end, then spread their times over the last two hours."""
    ids = []
    for name, *_ in rows:
        response = api.post("/api/v1/tasks", json=example_task(name))
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    drive_until(ctx, lambda: all(api.get(f"/api/v1/tasks/{i}").json()["state"] in TERMINAL for i in ids), 40)
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        for task_id, (_, created, started, finished) in zip(ids, rows, strict=True):
            at = {"created_at": created, "started_at": started, "finished_at": finished}
            session.execute(update(TaskRow).where(TaskRow.id == task_id).values(**{k: now - timedelta(seconds=s) for k, s in at.items()}))
    return ids


@pytest.fixture
def history(ctx: ServiceContext, demo: TestClient) -> TestClient:
    finished_history(ctx, demo)
    return demo


def test_adding_devices_to_a_saturated_pool_cuts_its_wait(history: TestClient) -> None:
    body = {"days": 1, "add": [{"count": 8, "model": "ascend-910b3"}], "remove": [{"count": 8, "model": "nvidia-a100-80g"}], "wait_target_hours": 0.5}
    response = history.post(WHAT_IF, json=body)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["history"] == {
        "days": 1.0,
        "since": report["history"]["since"],
        "finished_tasks": 5,
        "replayed_tasks": 5,
        "truncated": False,
        "max_tasks": capacity_whatif.MAX_TASKS,
    }
    assert report["elapsed_s"] < 10
    devices = report["changes"]["devices"]
    assert devices["changed"]["ascend-910b3"] == devices["baseline"]["ascend-910b3"] + 8
    assert devices["changed"].get("nvidia-a100-80g", 0) <= devices["baseline"]["nvidia-a100-80g"] - 8
    pools = {p["name"]: p for p in report["pools"]}
    mindspore = pools["sh-910b3-mindspore"]
    assert mindspore["model"] == "ascend-910b3" and mindspore["changed"]["devices"] == mindspore["baseline"]["devices"] + 8
    assert mindspore["baseline"]["wait_p90_hours"] > 0.5 and mindspore["changed"]["wait_p90_hours"] == 0
    assert set(mindspore["baseline"]) >= {"wait_p50_hours", "wait_p90_hours", "jct_p50_hours", "utilisation", "cost", "tasks"}
    assert report["totals"]["baseline"]["tasks"] == report["totals"]["changed"]["tasks"] == 5
    assert report["totals"]["changed"]["wait_p90_hours"] < report["totals"]["baseline"]["wait_p90_hours"]
    assert set(report["cost_per_team"]) == {"ai-lab/cv", "ai-lab/nlp", "infra/data"}
    saturated = [r for r in report["recommendations"] if r["kind"] == "saturated-pool"]
    assert saturated and saturated[0]["name"] == "sh-910b3-mindspore"
    assert saturated[0]["model"] == "ascend-910b3" and saturated[0]["devices"] == 8 and saturated[0]["target_hours"] == 0.5
    # A display name is as good as the id.
    by_name = history.post(WHAT_IF, json={"days": 1, "add": [{"count": 8, "model": "Huawei Ascend 910B2"}]})
    assert by_name.status_code == 200 and by_name.json()["changes"]["add"] == ["8x ascend-910b2"]


def test_bad_changes_name_the_field_and_what_is_allowed(demo: TestClient) -> None:
    def refused(body: dict) -> str:  # changes are checked before the history is read
        response = demo.post(WHAT_IF, json={"days": 1, **body})
        assert response.status_code == 422, response.text
        return response.json()["message"]

    unknown = refused({"add": [{"count": 8, "model": "ascend-910b3"}, {"count": 16, "model": "nvidia-x9000"}]})
    assert unknown.startswith("add[1].model: unknown device model 'nvidia-x9000'; allowed model ids: ") and "ascend-910b2" in unknown
    assert refused({"remove": [{"count": 8, "model": "amd-mi250x"}]}).startswith("remove[0].model: no pool holds device model 'amd-mi250x'; allowed")
    too_many = refused({"remove": [{"count": 8, "model": "nvidia-h800"}, {"count": 800, "model": "nvidia-h800"}]})
    assert too_many.startswith("remove[1].count: 808 nvidia-h800 device(s) to remove in all, but the pools hold only")
    assert refused({"add": [{"count": 0, "model": "ascend-910b2"}]}).startswith("body.add[0].count:")
    assert refused({"add": [{"count": 8}]}).startswith("body.add[0].model:")
    assert refused({"days": 0}).startswith("body.days:")
    assert refused({"bogus": 1}).startswith("body.bogus:")


def test_no_history_is_a_clear_refusal(demo: TestClient) -> None:
    response = demo.post(WHAT_IF, json={"days": 7})
    assert response.status_code == 422
    assert response.json()["message"] == "days: no finished tasks in the last 7 day(s) to replay; choose a longer period"


def test_the_task_count_time_and_concurrency_are_bounded(history: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity_whatif, "MAX_TASKS", 2)
    report = history.post(WHAT_IF, json={"days": 1}).json()
    assert report["history"]["finished_tasks"] == 5 and report["history"]["replayed_tasks"] == 2 and report["history"]["truncated"]
    assert report["totals"]["baseline"]["tasks"] == 2
    monkeypatch.setattr(capacity_whatif, "MAX_SECONDS", 0.0)
    slow = history.post(WHAT_IF, json={"days": 1})
    assert slow.status_code == 422 and slow.json()["message"].startswith("days: replaying 2 task(s) took over 0 s")
    monkeypatch.setattr(capacity_whatif, "MAX_SECONDS", 30.0)
    held = [capacity_whatif._running.acquire(blocking=False) for _ in range(capacity_whatif.MAX_CONCURRENT)]
    try:
        assert all(held)
        busy = history.post(WHAT_IF, json={"days": 1})
        assert busy.status_code == 409 and "already running" in busy.json()["message"]
    finally:
        for _ in held:
            capacity_whatif._running.release()
    assert history.post(WHAT_IF, json={"days": 1}).status_code == 200


def test_access_follows_the_history_endpoint(history: TestClient) -> None:
    assert TestClient(history.app).post(WHAT_IF, json={"days": 1}).status_code == 401
    auditor = make_user(history, "audrey", ("auditor", None))
    denied = auditor.post(WHAT_IF, json={"days": 1})
    assert denied.status_code == 403 and "inventory.read" in denied.json()["message"]
    # A member of infra replays only infra's tasks (data prep, batch inference), on the whole inventory.
    infra = make_user(history, "ivan", ("member", "infra"))
    report = infra.post(WHAT_IF, json={"days": 1}).json()
    assert report["history"]["replayed_tasks"] == 2
    assert set(report["cost_per_team"]) == {"infra/data"}
    assert {p["name"] for p in report["pools"]} == {p["name"] for p in history.post(WHAT_IF, json={"days": 1}).json()["pools"]}
