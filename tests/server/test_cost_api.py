"""Cost through the API: the ledger written as tasks hold capacity, reports that sum to the
ledger, exactly-once accrual (repeated passes, crashes, restarts, preemption between
passes), prices from pools and price lists, budgets with alerts and a hard stop.

Only the scheduler and the cost worker run here: admitted tasks hold their placement (and
are billed) without starting processes, so the fixed clock decides every duration.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm.exc import StaleDataError

from hetpool.server.db.models import TaskRow
from hetpool.server.db.models_cost import CostAccrualRow, CostLedgerRow
from hetpool.server.services import cost as cost_service
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.task_lifecycle import get_row, preempt_now
from hetpool.server.workers import cost as cost_worker
from hetpool.server.workers.cost import accrue_usage
from hetpool.server.workers.loop import run_pass
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task

STEPS = (schedule_once, accrue_usage)
CPU_PRICE, MEM_PRICE = 0.05, 0.002
PRICES = [
    {"kind": "PriceList", "name": "default", "currency": "CNY", "per_cpu_core_hour": CPU_PRICE, "per_memory_gib_hour": MEM_PRICE},
    # gz-general's own list: CPU costs more there; memory falls through to the default list.
    {"kind": "PriceList", "name": "gz", "cluster": "gz-general", "per_cpu_core_hour": 0.08},
]


def set_clock(ctx: ServiceContext, when: datetime) -> None:
    ctx.clock.advance((when - ctx.clock.now()).total_seconds())


def hours(ctx: ServiceContext, h: float) -> None:
    ctx.clock.advance(h * 3600)


def apply(api: TestClient, *documents: dict) -> None:
    response = api.post("/api/v1/apply", json={"documents": list(documents)})
    assert response.status_code == 200, response.text


def submit(api: TestClient, task: dict) -> str:
    response = api.post("/api/v1/tasks", json=task)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def task(api: TestClient, task_id: str) -> dict:
    return api.get(f"/api/v1/tasks/{task_id}").json()


def cancel(api: TestClient, task_id: str) -> None:
    assert api.post(f"/api/v1/tasks/{task_id}/cancel").status_code == 200


def ledger_rows(api: TestClient, **params) -> list[dict]:
    response = api.get("/api/v1/cost/ledger", params={"limit": 10000, **params})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["count"] == len(body["rows"])
    return body["rows"]


def hourly(api: TestClient, task_id: str, cpu_price: float = CPU_PRICE, mem_price: float = MEM_PRICE) -> float:
    """What the task costs per hour: its pools' device prices, plus CPU and memory."""
    pools = {p["name"]: p for p in api.get("/api/v1/objects/Pool").json()}
    info = task(api, task_id)
    per_worker = info["placements"]
    spec = api.get(f"/api/v1/tasks/{task_id}").json()["spec"]["per_worker"]
    devices = sum(len(p["devices"]) * p["device_fraction"] * pools[p["pool"]]["price_per_hour"] for p in per_worker)
    return devices + len(per_worker) * (spec["cpu"] * cpu_price + spec["memory_gb"] * mem_price)


def micros_of(rows: list[dict], task_id: str | None = None) -> int:
    return sum(r["cost_micros"] for r in rows if task_id is None or r["task_id"] == task_id)


def test_report_sums_equal_the_ledger_across_teams_orgs_and_a_month_boundary(ctx: ServiceContext, demo: TestClient) -> None:
    set_clock(ctx, datetime(2026, 11, 30, 21, 0, tzinfo=UTC))
    apply(demo, *PRICES)
    ids = {
        "sft": submit(demo, {**example_task("pytorch-ddp-training.yaml"), "command": "sleep 600"}),
        "serving": submit(demo, {**example_task("llm-inference.yaml"), "command": "sleep 600"}),
        "etl": submit(demo, {**example_task("batch-inference.yaml"), "command": "sleep 600"}),
        "detection": submit(demo, {**example_task("batch-inference.yaml"), "name": "det-eval", "tenant": "ai-lab/cv/detection"}),
        "org": submit(demo, {**example_task("data-prep.yaml"), "name": "org-wide", "tenant": "ai-lab"}),
    }
    run_pass(ctx, STEPS)
    assert {k: task(demo, i)["state"] for k, i in ids.items()} == dict.fromkeys(ids, "admitted")
    rates = {k: hourly(demo, i, 0.08 if k == "org" else CPU_PRICE) for k, i in ids.items()}
    hours(ctx, 1)  # 22:00
    run_pass(ctx, STEPS)
    cancel(demo, ids["sft"])
    hours(ctx, 2.5)  # 00:30 on 1 December: the others' intervals are split at midnight
    run_pass(ctx, STEPS)
    cancel(demo, ids["serving"])
    hours(ctx, 0.5)  # 01:00
    run_pass(ctx, STEPS)
    run_pass(ctx, STEPS)  # nothing is due: no change

    november, december = ledger_rows(demo, period="2026-11"), ledger_rows(demo, period="2026-12")
    assert {r["day"] for r in november} == {"2026-11-30"} and {r["day"] for r in december} == {"2026-12-01"}
    # Each task's charge is its hourly price × the time it held its placement.
    held = {"sft": 1.0, "serving": 3.5, "etl": 4.0, "detection": 4.0, "org": 4.0}
    for key, task_id in ids.items():
        charged = micros_of(november, task_id) + micros_of(december, task_id)
        assert charged == pytest.approx(rates[key] * held[key] * 1e6, abs=len(november) + len(december)), key
    sft = [r for r in november if r["task_id"] == ids["sft"]]
    assert len(sft) == 2 and sum(r["device_hours"] for r in sft) == pytest.approx(8.0)  # 2 workers × 4 devices × 1 h
    org_row = next(r for r in december if r["task_id"] == ids["org"])
    assert (org_row["team"], org_row["cluster"], org_row["type"], org_row["env"]) == ("ai-lab", "gz-general", "preprocessing", "dev")

    for period, rows in (("2026-11", november), ("2026-12", december)):
        for by, field in (("team", "team"), ("org", "org"), ("pool", "pool"), ("tenant", "tenant"), ("type", "type")):
            report = demo.get("/api/v1/cost/report", params={"by": by, "period": period}).json()
            expected = defaultdict(int)
            for r in rows:
                expected[r[field]] += r["cost_micros"]
            assert {g["key"]: g["cost_micros"] for g in report["groups"]} == dict(expected), (period, by)
            assert report["total"]["cost_micros"] == micros_of(rows) == sum(g["cost_micros"] for g in report["groups"])
            assert report["currency"] == "CNY" and report["total"]["rows"] == len(rows)
    by_team = demo.get("/api/v1/cost/report", params={"by": "team", "period": "2026-11"}).json()
    assert {g["key"] for g in by_team["groups"]} == {"ai-lab/nlp", "ai-lab/cv", "infra/data", "ai-lab"}
    # A tenant filter keeps that subtree; the ledger agrees with the report again.
    nlp = demo.get("/api/v1/cost/report", params={"by": "project", "period": "2026-11", "tenant": "ai-lab/nlp"}).json()
    assert nlp["total"]["cost_micros"] == micros_of(ledger_rows(demo, period="2026-11", tenant="ai-lab/nlp"))
    assert {g["key"] for g in nlp["groups"]} == {"ai-lab/nlp/llm-sft", "ai-lab/nlp/llm-serving"}
    year = demo.get("/api/v1/cost/report", params={"by": "org", "period": "2026"}).json()
    assert year["total"]["cost_micros"] == micros_of(november) + micros_of(december)


def test_accrual_is_exactly_once_through_repeats_crashes_and_restarts(ctx: ServiceContext, demo: TestClient, monkeypatch) -> None:
    apply(demo, *PRICES)
    task_id = submit(demo, {**example_task("llm-inference.yaml"), "command": "sleep 600"})
    run_pass(ctx, STEPS)
    rate = hourly(demo, task_id)
    hours(ctx, 2)
    # A crash in the middle of charging: nothing of that pass is kept.
    monkeypatch.setattr(cost_worker, "split_days", lambda *a: (_ for _ in ()).throw(RuntimeError("power cut")))
    accrue_usage(ctx)
    assert ledger_rows(demo, period="2026-01") == []
    monkeypatch.undo()
    for _ in range(3):
        accrue_usage(ctx)
    assert micros_of(ledger_rows(demo, period="2026-01")) == pytest.approx(2 * rate * 1e6, abs=2)
    # A restarted server (no worker memory) charges from the stored mark, not from the start.
    ctx.forget_process_state("cost_progress")
    hours(ctx, 1)
    accrue_usage(ctx)
    accrue_usage(ctx)
    cancel(demo, task_id)
    hours(ctx, 5)  # after the end: nothing more is charged
    ctx.forget_process_state("cost_progress")
    accrue_usage(ctx)
    rows = ledger_rows(demo, period="2026-01")
    assert micros_of(rows) == pytest.approx(3 * rate * 1e6, abs=3)
    assert len(rows) == 1 and rows[0]["seconds"] == 3 * 3600


def test_a_writer_that_lost_the_race_charges_nothing(ctx: ServiceContext, demo: TestClient) -> None:
    task_id = submit(demo, {**example_task("llm-inference.yaml"), "command": "sleep 600"})
    run_pass(ctx, STEPS)
    hours(ctx, 1)
    with pytest.raises(StaleDataError), ctx.db.transaction() as stale:
        acc = stale.get(CostAccrualRow, (task_id, 1))
        inv = load_inventory(ctx, stale)
        accrue_usage(ctx)  # another pass charges the hour and commits first
        cost_worker._advance(stale, inv, cost_worker.PriceBook([]), stale.get(TaskRow, task_id), acc, ctx.clock.now(), False)
    rows = ledger_rows(demo, period="2026-01")
    assert len(rows) == 1 and rows[0]["seconds"] == 3600


def test_two_workers_at_once_charge_each_instant_once(ctx: ServiceContext, demo: TestClient) -> None:
    """Two servers' cost workers on one database, racing: the ledger still holds each
    second of the attempt once (losers of a race roll back and retry)."""
    task_id = submit(demo, {**example_task("llm-inference.yaml"), "command": "sleep 600"})
    run_pass(ctx, STEPS)
    rate = hourly(demo, task_id, 0.0, 0.0)
    other = ServiceContext(settings=ctx.settings, db=ctx.db, clock=ctx.clock, backends=ctx.backends)
    stop = threading.Event()

    def accrue_every_pass(c: ServiceContext) -> None:
        accrue_usage(c, step_s=0)

    def worker(c: ServiceContext) -> None:
        while not stop.is_set():
            run_pass(c, (accrue_every_pass,))

    threads = [threading.Thread(target=worker, args=(c,)) for c in (ctx, other)]
    for t in threads:
        t.start()
    for _ in range(40):
        ctx.clock.advance(90)
        time.sleep(0.02)
    stop.set()
    for t in threads:
        t.join(30)
    cancel(demo, task_id)
    accrue_usage(ctx)
    rows = ledger_rows(demo, period="2026-01")
    assert sum(r["seconds"] for r in rows) == 3600
    assert micros_of(rows) == pytest.approx(rate * 1e6, abs=100)  # rounding of each increment to a micro-unit


def test_an_end_stamped_before_a_pass_that_charged_past_it_is_taken_back(ctx: ServiceContext, demo: TestClient) -> None:
    """A pass charges a running attempt up to its own start time; an end stamped a moment
    earlier but committed later is honoured: the overlap (here across midnight) is returned."""
    set_clock(ctx, datetime(2026, 3, 1, 23, 30, tzinfo=UTC))
    task_id = submit(demo, {**example_task("llm-inference.yaml"), "command": "sleep 600"})
    run_pass(ctx, STEPS)
    rate = hourly(demo, task_id, 0.0, 0.0)
    hours(ctx, 1)  # 00:30 on 2 March
    accrue_usage(ctx)
    assert {r["day"] for r in ledger_rows(demo, period="2026-03")} == {"2026-03-01", "2026-03-02"}
    hours(ctx, -40 / 60)  # the cancellation is stamped 23:50 …
    cancel(demo, task_id)
    hours(ctx, 1)  # … and seen later
    accrue_usage(ctx)
    rows = ledger_rows(demo, period="2026-03")
    assert [(r["day"], r["seconds"], r["interval_end"]) for r in rows] == [("2026-03-01", 1200, "2026-03-01T23:50:00Z")]
    assert micros_of(rows) == pytest.approx(rate / 3 * 1e6, abs=3)


def test_an_attempt_preempted_between_passes_is_charged_only_while_it_held(ctx: ServiceContext, demo: TestClient) -> None:
    accrue_usage(ctx)  # the worker is caught up: later attempts are found through the audit trail
    task_id = submit(demo, {**example_task("llm-inference.yaml"), "command": "sleep 600"})
    schedule_once(ctx)
    rate = hourly(demo, task_id, 0.0, 0.0)  # no price lists: the pool's device price only
    hours(ctx, 0.5)
    with ctx.db.transaction() as session:
        preempt_now(ctx, session, get_row(session, task_id), "preempted by a test")
    hours(ctx, 0.25)  # queued: holds nothing
    schedule_once(ctx)
    assert task(demo, task_id)["attempt"] == 2
    hours(ctx, 1)
    accrue_usage(ctx)
    rows = ledger_rows(demo, period="2026-01")
    by_attempt = {r["attempt"]: r for r in rows}
    assert by_attempt[1]["seconds"] == 1800 and by_attempt[2]["seconds"] == 3600
    assert micros_of(rows) == pytest.approx(1.5 * rate * 1e6, abs=2)


def test_budgets_alert_once_per_fraction_and_stop_when_spent(ctx: ServiceContext, demo: TestClient) -> None:
    task_id = submit(demo, {**example_task("llm-inference.yaml"), "command": "sleep 600"})
    run_pass(ctx, STEPS)
    rate = hourly(demo, task_id, 0.0, 0.0)
    apply(
        demo,
        {"kind": "Budget", "name": "nlp", "tenant": "ai-lab/nlp", "amount": round(rate * 4, 6), "alert_at": [0.5, 1.0], "hard_stop": True},
        {"kind": "Budget", "name": "lab", "tenant": "ai-lab", "amount": round(rate * 3, 6), "alert_at": [0.9]},
        {"kind": "Budget", "name": "infra", "tenant": "infra", "amount": 1000},
    )
    hours(ctx, 2.5)
    run_pass(ctx, STEPS)
    run_pass(ctx, STEPS)
    status = {b["name"]: b for b in demo.get("/api/v1/budgets/status").json()}
    assert [a["threshold"] for a in status["nlp"]["alerts"]] == [0.5]
    assert status["nlp"]["fraction"] == pytest.approx(0.625, abs=1e-5) and not status["nlp"]["exceeded"]
    assert status["infra"]["spent"] == 0 and status["infra"]["alerts"] == []
    assert status["nlp"]["period"] == "2026-01" and status["nlp"]["currency"] == "CNY"
    hours(ctx, 1)  # lab: 3.5 of 3 hours spent; nlp: 3.5 of 4
    run_pass(ctx, STEPS)
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        reason = cost_service.budget_exceeded(ctx, session, inv, "ai-lab/nlp/llm-sft")
        assert reason and "'lab'" in reason and "this month (2026-01)" in reason
        assert cost_service.budget_hard_stop(ctx, session, inv, "ai-lab/nlp/llm-sft") is None  # lab has no hard stop
        assert cost_service.budget_exceeded(ctx, session, inv, "infra/data/etl") is None
    hours(ctx, 1)
    run_pass(ctx, STEPS)
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        assert "'nlp'" in cost_service.budget_hard_stop(ctx, session, inv, "ai-lab/nlp/llm-serving")
        assert cost_service.budget_hard_stop(ctx, session, inv, "ai-lab/cv") is None
    # The hard stop refuses new work of the subtree at submission, saying why.
    refused = demo.post("/api/v1/tasks", json={**example_task("llm-inference.yaml"), "name": "one-more"})
    assert refused.status_code == 403 and refused.json()["code"] == "budget_exceeded" and "'nlp'" in refused.json()["message"]
    events = demo.get("/api/v1/audit", params={"action": "budget.alert"}).json()
    assert sorted((e["object_id"], e["after"]["threshold"]) for e in events) == [("lab", 0.9), ("nlp", 0.5), ("nlp", 1.0)]
    only_cv = demo.get("/api/v1/budgets/status", params={"tenant": "ai-lab/cv"}).json()
    assert [b["name"] for b in only_cv] == ["lab"]  # the ancestor's budget covers it


def test_bad_queries_are_refused_with_what_is_accepted(demo: TestClient) -> None:
    bad_by = demo.get("/api/v1/cost/report", params={"by": "colour"})
    assert bad_by.status_code == 422
    bad_period = demo.get("/api/v1/cost/report", params={"period": "November"})
    assert bad_period.status_code == 422 and "2026-W48" in bad_period.json()["message"]
    empty = demo.get("/api/v1/cost/report").json()
    assert empty["period"] == "2026-01" and empty["groups"] == [] and empty["total"] is None
    bad_price = demo.post("/api/v1/apply", json={"documents": [{"kind": "PriceList", "name": "x", "currency": "yuan"}]})
    assert bad_price.status_code == 422


def test_ledger_rows_survive_as_written(ctx: ServiceContext, demo: TestClient) -> None:
    """A closed attempt's rows never change again (later passes, price changes)."""
    task_id = submit(demo, {**example_task("llm-inference.yaml"), "command": "sleep 600"})
    run_pass(ctx, STEPS)
    hours(ctx, 1)
    cancel(demo, task_id)
    run_pass(ctx, STEPS)
    before = ledger_rows(demo, period="2026-01")
    apply(demo, {"kind": "PriceList", "name": "default", "per_cpu_core_hour": 100})
    hours(ctx, 48)
    run_pass(ctx, STEPS)
    assert ledger_rows(demo, period="2026-01") == before
    with ctx.db.transaction() as session:
        assert session.query(CostLedgerRow).count() == 1
