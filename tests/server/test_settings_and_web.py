"""Operator overrides of the compatibility KB, the SQLite journal mode, the home page."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import text

from hetpool.server.services.context import ServiceContext
from tests.server.helpers import example_task

OVERRIDE = """
table: torch-npu
rows:
  - {cann: "8.0.RC1", torch_npu: ["2.4.0", "2.2.0", "2.1.0.post4", "1.11.0.post11"], source: "site validation 2026-11", checked: "2026-11-30"}
"""


def test_compat_overrides_from_settings_change_placement(ctx: ServiceContext, demo: TestClient, tmp_path: Path) -> None:
    task = {**example_task("pytorch24-npu.yaml"), "image": "registry.local/pt:2.4-npu"}
    check = {"pool": "sh-910b2-cann80rc1", "framework": {"name": "pytorch", "version": "2.4"}, "has_image": True}
    before = demo.post("/api/v1/catalog/compat-check", json=check).json()
    assert before["ok"] is False and "CANN" in before["reason"]
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "torch-npu.site.yaml").write_text(OVERRIDE)  # a directory of table files
    ctx.settings.compat_overrides = tmp_path / "tables"
    ctx.__dict__.pop("base_compat", None)  # a restarted server reads the files again
    after = demo.post("/api/v1/catalog/compat-check", json=check).json()
    assert after["ok"] is True and after["status"] == "compatible"
    assert any("site validation 2026-11" in row and "torch-npu.site.yaml" in row for row in after["rows"])
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
