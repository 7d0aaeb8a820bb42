"""Issue 14, finding 2: one member's input never stops the scheduler loop for everyone.

Numbers are bounded at the API (core/limits.py: a 422 naming the field and the limit; NaN
and ±Infinity refused in JSON and in YAML); a task whose evaluation still raises is set
aside (failed, with the reason and an audit event) while the cycle goes on for the
others; data already bad in the database (written before a limit existed, or by hand)
stops neither scheduling nor cost accrual, and the tenant it belongs to gets answers,
not 500s.
"""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from hetpool.cli import main as cli
from hetpool.client import HetpoolClient
from hetpool.scheduling import cycle, forecast
from hetpool.server.db.models import InventoryObjectRow, PlacementRow, TaskRow
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.cost import accrue_usage
from hetpool.server.workers.dispatcher import dispatch_once
from hetpool.server.workers.loop import run_pass
from hetpool.server.workers.reclaim import reclaim_once
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import drive_until, example_task, run_to_end, task_state
from tests.server.test_access_api import make_user, submitted

NLP, INFRA = "ai-lab/nlp", "infra"


def _training(**fields) -> dict:
    return {**example_task("pytorch-ddp-training.yaml"), **fields}


def _refused(response: httpx.Response, field: str, limit: str) -> None:
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) >= {"code", "message", "details"}, body
    named = [d for d in body["details"] if d["loc"].endswith(field)]
    assert named and limit in named[0]["msg"], body


# ----------------------------------------------------------------------- bounds at the API
@pytest.mark.parametrize(
    ("fields", "field", "limit"),
    [
        ({"runtime_estimate": "99999999999999999999d"}, "runtime_estimate", "366d"),
        ({"runtime_estimate": "3000000d"}, "runtime_estimate", "366d"),
        ({"max_runtime": "400d"}, "max_runtime", "366d"),
        ({"workers": 10**12}, "workers", "1024"),
        ({"per_worker": {"cpu": 10**9, "memory_gb": 1}}, "per_worker.cpu", "4096"),
        ({"per_worker": {"cpu": 1, "memory_gb": 1e15}}, "per_worker.memory_gb", "65536"),
        ({"per_worker": {"devices": {"class": "gpu", "count": 10**6}, "cpu": 1, "memory_gb": 1}}, "per_worker.devices.count", "64"),
        ({"relative_performance": {"nvidia-a100-80g": 1e-300}}, "relative_performance.nvidia-a100-80g", "0.001"),
    ],
)
def test_a_member_submitting_overflowing_durations_or_huge_counts_gets_a_422_naming_field_and_limit(
    demo: TestClient, fields: dict, field: str, limit: str
) -> None:
    alice = make_user(demo, "alice", ("member", NLP))
    for path in ("/api/v1/tasks", "/api/v1/tasks/plan"):
        _refused(alice.post(path, json=_training(**fields)), field, limit)
    assert demo.get("/api/v1/tasks").json() == []


NON_FINITE = ["Infinity", "-Infinity", "NaN", "1e309"]


@pytest.mark.parametrize("number", NON_FINITE)
def test_non_finite_budget_amounts_and_prices_are_refused_naming_field_and_limit(demo: TestClient, number: str) -> None:
    documents = [
        ('{"kind": "Budget", "name": "b", "tenant": "ai-lab", "amount": %s}', "amount", "1000000000000"),
        (
            '{"kind": "Pool", "name": "p", "cluster": "bj-train", "model": "nvidia-h800", "nodes": ["gpu-h01"], "price_per_hour": %s}',
            "price_per_hour",
            "1000000",
        ),
        ('{"kind": "PriceList", "name": "l", "devices": [{"model": "nvidia-h800", "per_device_hour": %s}]}', "devices[0].per_device_hour", "1000000"),
        ('{"kind": "PriceList", "name": "l", "per_cpu_core_hour": %s}', "per_cpu_core_hour", "1000000"),
        ('{"kind": "PriceList", "name": "l", "per_memory_gib_hour": %s}', "per_memory_gib_hour", "1000000"),
        ('{"kind": "Quota", "name": "q", "tenant": "ai-lab", "limits": [{"resource": "gpu", "nominal": %s}]}', "limits[0].nominal", "1000000000"),
    ]
    for template, field, limit in documents:
        # Raw text: a JSON encoder would refuse to write these numbers; a hostile client does not.
        body = '{"documents": [%s]}' % (template % number)
        _refused(demo.post("/api/v1/apply", content=body, headers={"Content-Type": "application/json"}), field, limit)
    assert demo.get("/api/v1/budgets/status").json() == []
    assert "p" not in {p["name"] for p in demo.get("/api/v1/objects/pools").json()}


@pytest.mark.parametrize("db_kind", ["sqlite"])  # the CLI reads the file before any database is involved
def test_hetpool_apply_f_refuses_yaml_inf_and_nan_naming_the_file_field_and_limit(demo: TestClient, tmp_path, monkeypatch) -> None:
    def forward(request: httpx.Request) -> httpx.Response:
        answer = demo.request(request.method, request.url.path, content=request.content, headers=dict(request.headers))
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    monkeypatch.setattr(cli, "_client", lambda url, token: HetpoolClient("http://hetpool", "tok", transport=httpx.MockTransport(forward)))
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "kind: Budget\nname: lab\ntenant: ai-lab\namount: .inf\n---\nkind: Pool\nname: p\ncluster: bj-train\nmodel: nvidia-h800\n"
        "nodes: [gpu-h01]\nprice_per_hour: .nan\n"
    )
    result = CliRunner().invoke(cli.app, ["apply", "-f", str(prices)], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception  # an error, not a traceback
    out = " ".join(result.output.split())
    assert str(prices) in out and "amount" in out and "1000000000000" in out and "price_per_hour" in out and "finite" in out, out
    assert demo.get("/api/v1/budgets/status").json() == []


# ------------------------------------------------------------------ the loop survives a task
def _poison(real, name: str = "poison"):
    """`real`, except that it raises for the task called `name`: evaluating that one task fails."""

    def evaluate(snapshot, spec, *args, **kwargs):
        if spec.name == name:
            raise OverflowError("date value out of range")
        return real(snapshot, spec, *args, **kwargs)

    return evaluate


def _events(api: TestClient, task_id: str) -> list[dict]:
    return [e for e in api.get("/api/v1/audit", params={"object_id": task_id}).json()]


def test_a_task_whose_evaluation_raises_is_set_aside_and_another_tenants_task_runs(ctx: ServiceContext, demo: TestClient, monkeypatch) -> None:
    monkeypatch.setattr(cycle, "assign", _poison(cycle.assign))
    alice = make_user(demo, "alice", ("member", NLP))
    bob = make_user(demo, "bob", ("member", INFRA))
    poison = submitted(alice, _training(name="poison"))  # older, higher priority: evaluated first
    etl = submitted(bob, example_task("data-prep.yaml"))
    final = run_to_end(ctx, demo, etl)
    assert final["state"] == "succeeded", final
    shown = demo.get(f"/api/v1/tasks/{poison}").json()
    assert shown["state"] == "failed", shown
    assert "set aside" in shown["message"] and "OverflowError: date value out of range" in shown["message"], shown["message"]
    failed = [e for e in _events(demo, poison) if e["action"] == "task.failed"]
    assert len(failed) == 1 and "set aside" in failed[0]["after"]["message"], failed
    assert alice.get(f"/api/v1/tasks/{poison}").json()["message"] == shown["message"]  # its owner sees why
    # Pass after pass: the tenant's next task, and the other tenant's, are scheduled as usual.
    later = submitted(alice, example_task("data-prep.yaml") | {"name": "later", "tenant": "ai-lab/nlp/llm-sft"})
    again = submitted(bob, example_task("data-prep.yaml") | {"name": "again"})
    for task_id in (later, again):
        assert run_to_end(ctx, demo, task_id)["state"] == "succeeded"


def test_many_tasks_that_raise_cost_a_bounded_number_of_cycles_per_pass(ctx: ServiceContext, demo: TestClient, monkeypatch) -> None:
    real = cycle.assign

    def evaluate(snapshot, spec, *args, **kwargs):
        if spec.name.startswith("bad-"):
            raise ValueError("broken")
        return real(snapshot, spec, *args, **kwargs)

    monkeypatch.setattr(cycle, "assign", evaluate)
    alice = make_user(demo, "alice", ("member", NLP))
    bob = make_user(demo, "bob", ("member", INFRA))
    bad = [submitted(alice, _training(name=f"bad-{i}")) for i in range(cycle.MAX_SET_ASIDE + 4)]
    etl = submitted(bob, example_task("data-prep.yaml"))
    run_pass(ctx, (schedule_once,))  # a pass re-runs the cycle at most MAX_SET_ASIDE times
    assert [task_state(demo, t) for t in bad].count("failed") == cycle.MAX_SET_ASIDE
    run_pass(ctx, (schedule_once,))
    assert {task_state(demo, t) for t in bad} == {"failed"} and task_state(demo, etl) == "admitted"


def test_a_failing_start_estimate_for_one_task_leaves_every_other_task_scheduled(ctx: ServiceContext, demo: TestClient, monkeypatch) -> None:
    monkeypatch.setattr(forecast, "candidate_groups", _poison(forecast.candidate_groups, "second"))
    alice = make_user(demo, "alice", ("member", NLP))
    bob = make_user(demo, "bob", ("member", INFRA))
    # Both want every A100: the second waits, and only the start estimate looks at it.
    whole = {"per_worker": {"devices": {"class": "gpu", "count": 8}, "cpu": 16, "memory_gb": 128}, "fallback": ["nvidia-a100-80g"]}
    first = submitted(alice, _training(name="first", **whole))
    ctx.clock.advance(1)  # queue order: oldest first
    waiting = submitted(alice, _training(name="second", **whole))
    etl = submitted(bob, example_task("data-prep.yaml"))
    run_pass(ctx, (schedule_once,))
    assert task_state(demo, first) == task_state(demo, etl) == "admitted"
    shown = demo.get(f"/api/v1/tasks/{waiting}").json()
    assert shown["state"] == "queued", shown
    assert "OverflowError" in shown["pending"]["estimate_error"], shown["pending"]


def _rewrite(ctx: ServiceContext, model, where, change) -> None:
    """What a database writer (or a row stored before a limit existed) leaves behind."""
    with ctx.db.transaction() as session:
        for row in session.execute(select(model).where(where)).scalars():
            change(row)


def test_a_stored_runtime_that_overflows_a_date_stops_neither_the_loop_nor_other_tenants(ctx: ServiceContext, demo: TestClient) -> None:
    alice = make_user(demo, "alice", ("member", NLP))
    bob = make_user(demo, "bob", ("member", INFRA))
    running = submitted(alice, example_task("data-prep.yaml") | {"name": "running-bad", "tenant": "ai-lab/nlp/llm-sft", "command": "sleep 60"})
    run_pass(ctx, (schedule_once,))
    assert task_state(demo, running) == "admitted"
    queued = submitted(alice, _training(name="queued-bad"))
    held = demo.get(f"/api/v1/tasks/{running}").json()["placements"]
    # Both specs now say "3000000d" (8,200 years): what the API accepted before the limit.
    overflow = {"runtime_estimate": "3000000d"}
    _rewrite(ctx, TaskRow, TaskRow.id.in_([queued, running]), lambda row: setattr(row, "spec", {**row.spec, **overflow}))
    etl = submitted(bob, example_task("data-prep.yaml"))
    run_pass(ctx, (schedule_once,))
    assert task_state(demo, etl) == "admitted"
    shown = demo.get(f"/api/v1/tasks/{queued}").json()
    assert shown["state"] == "failed" and "runtime_estimate" in shown["message"] and "366d" in shown["message"], shown
    # The admitted task keeps its devices: nothing else is placed on them.
    assert task_state(demo, running) == "admitted"
    taken = {(p["node"], tuple(p["devices"])) for p in held if p["devices"]}
    assert not taken & {(p["node"], tuple(p["devices"])) for p in demo.get(f"/api/v1/tasks/{etl}").json()["placements"] if p["devices"]}
    for _ in range(3):
        assert run_pass(ctx, (schedule_once,))


def test_an_admitted_task_that_cannot_be_launched_is_set_aside_and_the_others_are_dispatched(ctx: ServiceContext, demo: TestClient) -> None:
    alice = make_user(demo, "alice", ("member", NLP))
    bob = make_user(demo, "bob", ("member", INFRA))
    broken = submitted(alice, example_task("data-prep.yaml") | {"name": "broken", "tenant": "ai-lab/nlp/llm-sft"})
    etl = submitted(bob, example_task("data-prep.yaml"))
    run_pass(ctx, (schedule_once,))
    assert task_state(demo, broken) == task_state(demo, etl) == "admitted"
    _rewrite(ctx, TaskRow, TaskRow.id == broken, lambda row: setattr(row, "spec", {**row.spec, "env_vars": "not a mapping"}))
    run_pass(ctx, (dispatch_once,))
    assert task_state(demo, etl) in ("dispatched", "running", "succeeded")
    shown = demo.get(f"/api/v1/tasks/{broken}").json()
    assert shown["state"] == "failed" and shown["message"].startswith("set aside by the dispatcher"), shown


def test_a_stored_lease_or_reclaim_policy_past_the_limits_stops_reclaim_for_no_one_else(ctx: ServiceContext, demo: TestClient) -> None:
    policies = [
        {"kind": "ReclaimPolicy", "name": "infra-lease", "tenant": INFRA, "idle_for": None, "max_runtime": "2h", "notice": "5m", "action": "stop"},
        {"kind": "ReclaimPolicy", "name": "lab-idle", "tenant": "ai-lab", "idle_for": "1h"},
    ]
    assert demo.post("/api/v1/apply", json={"documents": policies}).status_code == 200
    alice = make_user(demo, "alice", ("member", NLP))
    bob = make_user(demo, "bob", ("member", INFRA))
    mine = submitted(alice, example_task("data-prep.yaml") | {"name": "long", "tenant": "ai-lab/nlp/llm-sft", "command": "sleep 60"})
    etl = submitted(bob, example_task("data-prep.yaml") | {"command": "sleep 60"})
    drive_until(ctx, lambda: task_state(demo, mine) == task_state(demo, etl) == "running")
    # Stored before durations were bounded: a 5000-day lease and a 400-day idle period.
    _rewrite(ctx, TaskRow, TaskRow.id == mine, lambda row: setattr(row, "spec", {**row.spec, "max_runtime": "5000d"}))
    _rewrite(ctx, InventoryObjectRow, InventoryObjectRow.name == "lab-idle", lambda row: setattr(row, "spec", {**row.spec, "idle_for": "400d"}))
    ctx.clock.advance(2 * 3600 + 60)
    reclaim_once(ctx)
    assert demo.get(f"/api/v1/tasks/{etl}").json()["message"].startswith("reclaim notice: past max_runtime 2h")
    for task_id in (mine, etl):
        demo.post(f"/api/v1/tasks/{task_id}/cancel")
    drive_until(ctx, lambda: {task_state(demo, mine), task_state(demo, etl)} == {"cancelled"})


# ------------------------------------------------------------------ cost with bad stored data
COST_STEPS = (schedule_once, accrue_usage)


def test_a_bad_price_or_budget_in_the_database_stops_neither_accrual_nor_answers_for_the_tenant(ctx: ServiceContext, demo: TestClient) -> None:
    apply = demo.post(
        "/api/v1/apply",
        json={
            "documents": [
                {"kind": "PriceList", "name": "default", "per_cpu_core_hour": 1.0, "per_memory_gib_hour": 0.01},
                {"kind": "Budget", "name": "lab", "tenant": NLP, "amount": 1000, "alert_at": [0.5]},
                {"kind": "Budget", "name": "etl", "tenant": "infra", "amount": 2, "alert_at": [0.5]},
            ]
        },
    )
    assert apply.status_code == 200, apply.text
    alice = make_user(demo, "alice", ("member", NLP))
    bob = make_user(demo, "bob", ("member", INFRA))
    sft = submitted(alice, _training(command="sleep 600"))
    etl = submitted(bob, example_task("data-prep.yaml") | {"command": "sleep 600"})
    run_pass(ctx, COST_STEPS)
    assert task_state(demo, sft) == task_state(demo, etl) == "admitted"
    sft_pool = demo.get(f"/api/v1/tasks/{sft}").json()["placements"][0]["pool"]
    # A database writer makes ai-lab's pool price and budget absurd (1e308: valid JSON on
    # PostgreSQL too) and the price recorded with the task's placement as well.
    huge = 1e308
    _rewrite(ctx, InventoryObjectRow, InventoryObjectRow.name == sft_pool, lambda row: setattr(row, "spec", {**row.spec, "price_per_hour": huge}))
    _rewrite(ctx, InventoryObjectRow, InventoryObjectRow.name == "lab", lambda row: setattr(row, "spec", {**row.spec, "amount": huge}))
    _rewrite(ctx, PlacementRow, PlacementRow.task_id == sft, lambda row: setattr(row, "price_per_hour", huge))
    for _ in range(3):
        ctx.clock.advance(3600)
        assert run_pass(ctx, COST_STEPS)
    # Accrual went on for the other tenant, and its budget alert was raised.
    rows = demo.get("/api/v1/cost/ledger", params={"limit": 1000}).json()["rows"]
    assert sum(r["cost_micros"] for r in rows if r["task_id"] == etl) == pytest.approx(3 * (8 * 1.0 + 32 * 0.01) * 1e6, abs=10)
    alerts = demo.get("/api/v1/audit", params={"action": "budget.alert"}).json()
    assert [e["object_id"] for e in alerts] == ["etl"], alerts
    # The affected tenant's own task is charged too (its CPU and memory), never with the absurd price.
    assert all(0 <= r["cost_micros"] < 10**12 for r in rows if r["task_id"] == sft) and any(r["task_id"] == sft for r in rows)
    # Budget status, plan and submit in the affected tenant answer, with the reason where one is due.
    for client in (demo, alice):
        status = client.get("/api/v1/budgets/status")
        assert status.status_code == 200, status.text
        lab = next(b for b in status.json() if b["name"] == "lab")
        assert "amount" in lab["invalid"] and "1000000000000" in lab["invalid"], lab
    plan = alice.post("/api/v1/tasks/plan", json=_training(name="next"))
    assert plan.status_code == 200, plan.text
    assert alice.post("/api/v1/tasks", json=_training(name="next")).status_code == 201
    assert demo.get("/api/v1/cost/report", params={"by": "tenant"}).status_code == 200


# ------------------------------------------------------------------ request bodies of the API
def _unbounded_numbers(schema: dict, components: dict, path: str, seen: frozenset = frozenset()) -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return [] if name in seen else _unbounded_numbers(components[name], components, path, seen | {name})
    found = [path] if schema.get("type") in ("number", "integer") and not {"maximum", "exclusiveMaximum"} & set(schema) else []
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            found += _unbounded_numbers(sub, components, path, seen)
    for name, sub in schema.get("properties", {}).items():
        found += _unbounded_numbers(sub, components, f"{path}.{name}", seen)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(schema.get(key), dict):
            found += _unbounded_numbers(schema[key], components, path + suffix, seen)
    return found


@pytest.mark.parametrize("db_kind", ["sqlite"])  # the OpenAPI document does not depend on the database
def test_every_number_in_every_api_request_body_has_an_upper_bound(api: TestClient) -> None:
    document = api.get("/openapi.json").json()
    components = document["components"]["schemas"]
    unbounded = []
    for route, methods in document["paths"].items():
        for method, operation in methods.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                unbounded += _unbounded_numbers(body, components, f"{method.upper()} {route}")
    assert unbounded == []


@pytest.mark.parametrize("db_kind", ["sqlite"])
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/capacity/what-if", '{"quotas": {"ai-lab/nlp": %s}}', "quotas.ai-lab/nlp"),
        ("/api/v1/capacity/what-if", '{"days": %s}', "days"),
        ("/api/v1/agent/heartbeat", '{"node": "gpu-a01", "devices": [{"index": 0, "utilisation_pct": %s}]}', "devices[0].utilisation_pct"),
    ],
)
@pytest.mark.parametrize("number", NON_FINITE)
def test_non_finite_numbers_in_other_request_bodies_are_a_422_naming_the_field(
    demo: TestClient, path: str, body: str, field: str, number: str
) -> None:
    response = demo.post(path, content=body % number, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert any(d["loc"].endswith(field) for d in response.json()["details"]), response.json()
