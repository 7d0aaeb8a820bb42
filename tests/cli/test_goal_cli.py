"""`hetpool plan --goal` through the real CLI against a real `hetpool up --demo` server:
the ranked options as JSON (the shape scripts read) and as a table, and submitting one."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli_e2e import Server, server  # noqa: F401 - the fixture
from tests.conftest import TASKS_DIR

GOAL_FILE = str(TASKS_DIR / "goal-lora-8b.yaml")


@pytest.mark.parametrize("db_kind", ["sqlite"])  # CLI behaviour; the API tests cover PostgreSQL
def test_plan_goal_ranks_options_and_submits_one(server: Server) -> None:  # noqa: F811
    answer = json.loads(server.cli("plan", "--goal", "-f", GOAL_FILE, "-o", "json").stdout)
    options = answer["options"]
    assert options, answer
    for option in options:
        assert {"model", "count", "pool", "estimated_start", "estimated_completion", "cost", "meets", "reasons"} <= set(option)
        assert set(option["meets"]) == {"deadline", "max_cost"}
    assert all(options[0]["meets"].values())
    human = server.cli("plan", "--goal", "-f", GOAL_FILE).stdout
    assert "options (best first)" in human and "bj-a100-80g" in human and "pools left out" in human and "all targets" in human
    assert "sh-910b2-cann80rc1" in human  # left out, with its reason (old CANN, no PyTorch 2.4)
    task_id = server.cli("plan", "--goal", "-f", GOAL_FILE, "--submit", "1").stdout.strip()
    task = server.task(task_id)
    assert task["spec"]["per_worker"]["devices"]["count"] == options[0]["devices_per_worker"]
    assert task["spec"]["fallback"][0] == options[0]["pool"]
    too_far = server.cli("plan", "--goal", "-f", GOAL_FILE, "--submit", "99", check=False)
    assert too_far.returncode != 0 and "there are" in too_far.stderr
    # plain submit of the goal file queues the best option, and it runs
    auto = server.cli("submit", "-f", GOAL_FILE).stdout.strip()
    assert server.wait_for(auto, {"succeeded", "failed", "cancelled"})["state"] == "succeeded"
