"""Helpers for server tests: drive the workers until a condition holds (bounded)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import yaml
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.loop import run_pass

TASKS_DIR = Path(__file__).resolve().parents[2] / "examples" / "tasks"
TERMINAL = {"succeeded", "failed", "cancelled"}


def example_task(name: str) -> dict:
    return yaml.safe_load((TASKS_DIR / name).read_text())


def drive_until(ctx: ServiceContext, condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Run worker passes until `condition()` holds; fail after `timeout_s` (real processes run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run_pass(ctx)
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def task_state(api: TestClient, task_id: str) -> str:
    return api.get(f"/api/v1/tasks/{task_id}").json()["state"]


def run_to_end(ctx: ServiceContext, api: TestClient, task_id: str, timeout_s: float = 20.0) -> dict:
    drive_until(ctx, lambda: task_state(api, task_id) in TERMINAL, timeout_s)
    return api.get(f"/api/v1/tasks/{task_id}").json()
