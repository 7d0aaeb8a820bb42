"""GET /metrics: Prometheus text that matches the inventory, follows the queue and the
task states, records scheduling cycles, waits and backend errors, needs no token and
shows no tenant data; each app has its own registry."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from hetpool.server.app import create_app
from hetpool.server.metrics import BACKEND_ERROR_LOGS
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.dispatcher import dispatch_once
from hetpool.server.workers.loop import run_pass
from hetpool.server.workers.reconciler import reconcile_once
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task
from tests.server.test_stats_api import DEMO_CLASSES, DEMO_POOLS


def scrape(client: TestClient) -> dict[str, list]:
    """Family name → samples, scraped without a token as Prometheus does."""
    response = client.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {family.name: family.samples for family in text_string_to_metric_families(response.text)}


def value(families: dict[str, list], family: str, sample: str | None = None, **labels: str) -> float:
    matches = [s.value for s in families[family] if s.name == (sample or family) and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (family, labels, matches)
    return matches[0]


def submit(api: TestClient, example: str, **fields) -> str:
    response = api.post("/api/v1/tasks", json={**example_task(example), "command": "true", **fields})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_pool_gauges_match_the_demo_inventory_without_a_token(demo: TestClient) -> None:
    families = scrape(TestClient(demo.app))
    totals = {s.labels["pool"]: s.value for s in families["hetpool_pool_devices"]}
    assert totals == DEMO_POOLS
    by_class: dict[str, float] = {}
    for s in families["hetpool_pool_devices"]:
        by_class[s.labels["device_class"]] = by_class.get(s.labels["device_class"], 0) + s.value
    assert by_class == DEMO_CLASSES
    assert value(families, "hetpool_pool_devices_idle", pool="bj-h800", cluster="bj-train", model="nvidia-h800", device_class="gpu") == 8
    assert all(s.value == 0 for name in ("busy", "abnormal", "offline") for s in families[f"hetpool_pool_devices_{name}"])
    assert value(families, "hetpool_backend_up", cluster="sh-ascend", backend="local") == 1
    assert value(families, "hetpool_nodes", cluster="sh-ascend", state="ready") == 6
    assert value(families, "hetpool_database_up") == 1
    assert value(families, "hetpool_tasks", state="queued") == 0


def test_a_submitted_task_changes_the_queue_and_state_gauges(demo: TestClient) -> None:
    submit(demo, "mindspore-ascend.yaml")
    families = scrape(demo)
    assert value(families, "hetpool_queue_length", queue="default") == 1
    assert value(families, "hetpool_pool_queue_length", pool="sh-910b3-mindspore") == 1
    assert value(families, "hetpool_pool_queue_length", pool="bj-h800") == 0
    assert value(families, "hetpool_tasks", state="queued") == 1


def test_a_scheduling_cycle_records_its_latency_and_the_wait(ctx: ServiceContext, demo: TestClient) -> None:
    before = scrape(demo)
    assert value(before, "hetpool_scheduling_cycle_seconds", "hetpool_scheduling_cycle_seconds_count") == 0
    run_pass(ctx, (schedule_once,))  # nothing queued: no cycle
    assert value(scrape(demo), "hetpool_scheduling_cycle_seconds", "hetpool_scheduling_cycle_seconds_count") == 0
    submit(demo, "mindspore-ascend.yaml")
    ctx.clock.advance(90)
    run_pass(ctx, (schedule_once,))
    after = scrape(demo)
    assert value(after, "hetpool_scheduling_cycle_seconds", "hetpool_scheduling_cycle_seconds_count") == 1
    assert value(after, "hetpool_scheduling_cycle_seconds", "hetpool_scheduling_cycle_seconds_sum") > 0
    labels = {"pool": "sh-910b3-mindspore", "task_type": "training"}
    assert value(after, "hetpool_task_wait_seconds", "hetpool_task_wait_seconds_count", **labels) == 1
    assert value(after, "hetpool_task_wait_seconds", "hetpool_task_wait_seconds_sum", **labels) == 90
    assert value(after, "hetpool_task_wait_seconds", "hetpool_task_wait_seconds_bucket", le="60.0", **labels) == 0
    assert value(after, "hetpool_task_wait_seconds", "hetpool_task_wait_seconds_bucket", le="120.0", **labels) == 1
    assert value(after, "hetpool_tasks", state="admitted") == 1 and value(after, "hetpool_queue_length", queue="default") == 0
    assert value(after, "hetpool_pool_devices_busy", pool="sh-910b3-mindspore", cluster="sh-ascend", model="ascend-910b3", device_class="npu") == 8


class FlakyBackend:
    """The local backend, except that `submit` or `poll` fail on request (as a network error would)."""

    def __init__(self, inner) -> None:
        self.inner, self.failing = inner, set()
        self.kind = inner.kind

    def __getattr__(self, name):
        if name in self.failing:
            raise ConnectionError("connection refused (engine down)")
        return getattr(self.inner, name)


def test_backend_errors_and_failing_steps_are_counted(ctx: ServiceContext, demo: TestClient) -> None:
    backend = FlakyBackend(ctx.backends["local"])
    ctx.backends["local"] = backend
    backend.failing = {"submit"}
    submit(demo, "data-prep.yaml")
    run_pass(ctx, (schedule_once, dispatch_once))
    families = scrape(demo)
    assert value(families, "hetpool_backend_errors", "hetpool_backend_errors_total", operation="dispatch") == 1
    assert value(families, "hetpool_tasks", state="admitted") == 1  # a transient error: it waits and is retried
    backend.failing = {"poll"}
    submit(demo, "data-prep.yaml", name="second")
    run_pass(ctx, (schedule_once, dispatch_once, reconcile_once))
    families = scrape(demo)
    assert value(families, "hetpool_backend_errors", "hetpool_backend_errors_total", operation="poll") == 1
    assert value(families, "hetpool_backend_up", cluster="gz-general", backend="local") == 0
    assert value(families, "hetpool_backend_up", cluster="bj-train", backend="local") == 1

    def broken(_ctx):
        raise RuntimeError("boom")

    run_pass(ctx, (broken,))  # logged, counted, and the pass goes on
    assert value(scrape(demo), "hetpool_worker_step_errors", "hetpool_worker_step_errors_total", step="broken") == 1


def test_backend_error_log_lines_are_the_ones_the_workers_write() -> None:
    """The counter reads the workers' log lines: if one is reworded, this fails first."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "src"
    for (logger, message), _operation in BACKEND_ERROR_LOGS.items():
        source = (root / (logger.replace(".", "/") + ".py")).read_text()
        assert f'"{message}"' in source, (logger, message)


def test_metrics_show_no_tenant_data(demo: TestClient) -> None:
    submit(demo, "mindspore-ascend.yaml", name="secret-project-x", command="echo top-secret-command")
    text = demo.get("/metrics").text
    for secret in ("secret-project-x", "top-secret-command", "ai-lab", "admin"):
        assert secret not in text


def test_each_app_has_its_own_registry(ctx: ServiceContext, demo: TestClient) -> None:
    with TestClient(create_app(ctx=ctx)) as second:  # a second app on the same server state
        assert scrape(second)["hetpool_pool_devices"] and scrape(demo)["hetpool_pool_devices"]
        assert second.app.state.metrics_registry is not demo.app.state.metrics_registry
