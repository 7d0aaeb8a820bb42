"""`hetpool cost` against a real `hetpool up --demo` server: tasks run, the worker writes the
ledger, and the report's total (table and JSON) equals the sum of the ledger rows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.cli.test_cli_e2e import Server, server  # noqa: F401 (the fixture)
from tests.conftest import TASKS_DIR

# Prices high enough that a task of a second costs something visible.
PRICES = [
    {"kind": "PriceList", "name": "default", "per_cpu_core_hour": 3600.0, "per_memory_gib_hour": 36.0},
    {"kind": "Budget", "name": "etl", "tenant": "infra/data", "amount": 1.0, "alert_at": [0.5], "hard_stop": True},
]

# The CLI is the same on both databases; the API tests cover PostgreSQL (this keeps the suite short).
pytestmark = pytest.mark.parametrize("db_kind", ["sqlite"])


def test_cost_report_matches_the_ledger_through_the_cli(server: Server, tmp_path: Path) -> None:  # noqa: F811
    prices = tmp_path / "prices.yaml"
    prices.write_text(yaml.safe_dump_all(PRICES))
    server.cli("apply", "-f", str(prices))
    # Each CLI call starts a Python process (seconds): tasks go in through the API.
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=10)
    tasks = [yaml.safe_load((TASKS_DIR / name).read_text()) for name in ("data-prep.yaml", "batch-inference.yaml")]
    ids = [api.post("/api/v1/tasks", json=task).json()["id"] for task in tasks]
    deadline = time.monotonic() + 120  # two short tasks; generous for a loaded machine (it failed once at 40 s under 2x CPU load)
    while time.monotonic() < deadline:  # the cost worker closes each attempt on the pass after it ends
        rows = api.get("/api/v1/cost/ledger").json()["rows"]
        if {r["task_id"] for r in rows} == set(ids) and all(api.get(f"/api/v1/tasks/{i}").json()["state"] == "succeeded" for i in ids):
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"ledger incomplete: {rows}; server log:\n{server.log.read_text()[-3000:]}")
    ledger = json.loads(server.cli("cost", "ledger", "-o", "json").stdout)
    assert ledger["count"] == len(ledger["rows"]) == 2 and all(r["cost_micros"] > 0 for r in ledger["rows"])
    report = json.loads(server.cli("cost", "report", "--by", "team", "-o", "json").stdout)
    assert report["total"]["cost_micros"] == sum(r["cost_micros"] for r in ledger["rows"])
    assert {g["key"] for g in report["groups"]} == {r["team"] for r in ledger["rows"]} == {"infra/data"}
    text = server.cli("cost", "report", "--by", "team", "--period", report["period"]).stdout
    assert "TOTAL" in text and "infra/data" in text and "ai-lab/nlp" not in text
    budgets = server.cli("cost", "budgets").stdout
    assert "etl" in budgets and "infra/data" in budgets
