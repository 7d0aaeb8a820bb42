"""Operator overrides of the compatibility KB, the SQLite journal mode, the home page."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import text

from hetpool.server.services.context import ServiceContext
from tests.server.helpers import example_task

OVERRIDE = """
cann:
  releases:
    "8.0.RC1": {torch_npu: ["2.4.0", "2.2.0", "2.1.0.post4", "1.11.0.post11"]}
"""


def test_compat_overrides_from_settings_change_placement(ctx: ServiceContext, demo: TestClient, tmp_path: Path) -> None:
    task = {**example_task("pytorch24-npu.yaml"), "image": "registry.local/pt:2.4-npu"}
    check = {"pool": "sh-910b2-cann80rc1", "framework": {"name": "pytorch", "version": "2.4"}, "has_image": True}
    before = demo.post("/api/v1/catalog/compat-check", json=check).json()
    assert before["ok"] is False and "CANN" in before["reason"]
    override = tmp_path / "compat-override.yaml"
    override.write_text(OVERRIDE)
    ctx.settings.compat_overrides = override
    ctx.__dict__.pop("compat", None)  # a restarted server reads the file again
    after = demo.post("/api/v1/catalog/compat-check", json=check).json()
    assert after["ok"] is True
    plan = demo.post("/api/v1/tasks/plan", json=task).json()
    assert plan["feasible"]


def test_sqlite_runs_in_wal_mode(ctx: ServiceContext) -> None:
    if ctx.db.dialect != "sqlite":
        return
    with ctx.db.transaction() as session:
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_openapi_is_served(demo: TestClient) -> None:
    spec = demo.get("/openapi.json").json()
    assert "/api/v1/tasks/plan" in spec["paths"] and "/api/v1/apply" in spec["paths"]
