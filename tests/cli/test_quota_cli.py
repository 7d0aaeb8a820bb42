"""`hetpool quota usage` (the CLI app, in-process) against a real server: quotas applied as
YAML, a task admitted by borrowing, the table and JSON showing used / borrowed / lent."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli_e2e import Server
from tests.cli.test_users_cli import run_as
from tests.conftest import database_url

QUOTAS = """
kind: Quota
name: lab
tenant: ai-lab
limits: [{resource: gpu, nominal: 16}]
---
kind: Quota
name: nlp
tenant: ai-lab/nlp
limits: [{resource: gpu, nominal: 1, borrowing_limit: 8}]
---
kind: Quota
name: cv
tenant: ai-lab/cv
limits: [{resource: gpu, nominal: 8, lending_limit: 4}]
"""
TASK = """
name: borrowed-a100s
tenant: ai-lab/nlp/llm-sft
type: training
image: img
command: sleep 30
per_worker: {devices: {class: gpu, models: [nvidia-a100-80g], count: 4}}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "data", database_url("sqlite", tmp_path))
    srv.start()
    yield srv
    srv.stop()


def test_quota_usage_shows_borrowing_through_the_cli(server: Server, tmp_path: Path) -> None:
    (tmp_path / "quotas.yaml").write_text(QUOTAS)
    assert run_as(server, None, "apply", "-f", str(tmp_path / "quotas.yaml")).exit_code == 0
    (tmp_path / "task.yaml").write_text(TASK)
    task_id = run_as(server, None, "submit", "-f", str(tmp_path / "task.yaml")).stdout.strip()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rows = {r["quota"]: r for r in json.loads(run_as(server, None, "quota", "usage", "-o", "json").stdout)}
        if rows["nlp"]["used"] == 4:
            break
        time.sleep(0.3)
    assert (rows["nlp"]["used"], rows["nlp"]["borrowed"], rows["cv"]["lent"], rows["lab"]["used"]) == (4, 3, 3, 4)
    assert rows["cv"]["headroom"] == 8 and rows["nlp"]["headroom"] == 1  # cv lends at most 4: 1 more
    table = run_as(server, None, "quota", "usage").stdout
    assert "BORROWED" in table and "ai-lab/nlp" in table
    run_as(server, None, "cancel", task_id)
