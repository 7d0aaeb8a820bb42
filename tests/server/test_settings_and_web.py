"""Operator overrides of the compatibility KB, the SQLite journal mode, the home page."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import text

from hetpool.server.app import create_app
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


def test_home_page_in_english_and_chinese(ctx: ServiceContext, demo: TestClient) -> None:
    with TestClient(create_app(ctx=ctx)) as browser:
        english = browser.get("/")
        assert english.status_code == 200 and "Pools" in english.text and "sh-910b2-cann800" in english.text
        chinese = browser.get("/?lang=zh-CN")
        assert "资源池" in chinese.text and "异构算力统一调度" in chinese.text
        assert browser.cookies.get("hetpool_lang") == "zh-CN"
        assert "资源池" in browser.get("/").text  # the choice is remembered


def test_openapi_is_served(demo: TestClient) -> None:
    spec = demo.get("/openapi.json").json()
    assert "/api/v1/tasks/plan" in spec["paths"] and "/api/v1/apply" in spec["paths"]


def test_home_page_shows_nodes_needing_attention_in_both_languages(ctx: ServiceContext, demo: TestClient) -> None:
    from hetpool.server.services.nodes import mark_offline

    with TestClient(create_app(ctx=ctx)) as browser:
        assert "All reported nodes are ready" in browser.get("/?lang=en").text
        node = {"name": "agent-x", "cluster": "bj-train", "cpu_cores": 8, "memory_gb": 32, "devices": [{"model": "nvidia-t4", "count": 2}]}
        assert demo.post("/api/v1/agent/register", json={"node": node}).status_code == 200
        beat = {"node": "agent-x", "devices": [{"index": 1, "model": "nvidia-t4", "health": "abnormal"}]}
        assert demo.post("/api/v1/agent/heartbeat", json=beat).status_code == 200
        page = browser.get("/?lang=en").text
        assert 'data-node="agent-x" data-state="ready"' in page and "<td>1</td>" in page
        ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
        mark_offline(ctx)
        assert 'data-state="offline"' in browser.get("/?lang=en").text and ">offline<" in browser.get("/?lang=en").text
        chinese = browser.get("/?lang=zh-CN").text
        assert "需关注的节点" in chinese and ">离线<" in chinese
