"""What the two task pages (pages/tasks.py: list, new, plan; pages/tasks_detail.py: one
task and its log) show in common: short timestamps and durations, a device request as one
line, the candidates a plan or a placement tried, and the inventory lists the forms offer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hetpool.core.clock import as_utc
from hetpool.core.states import TERMINAL_STATES, TaskState
from hetpool.core.units import format_duration
from hetpool.server.schemas.inventory import ObjectList
from hetpool.server.schemas.tasks import TaskResponse
from hetpool.web.session import ApiError, Viewer

STATES = [s.value for s in TaskState]
TERMINAL = {s.value for s in TERMINAL_STATES}


def parse_ts(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return as_utc(ts)


def short_ts(text: str | None) -> str:
    """'2026-01-01T00:00:00.000000Z' → '2026-01-01 00:00:00' (UTC), '—' when unset."""
    ts = parse_ts(text)
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "—"


def duration(seconds: float | None) -> str:
    return "—" if seconds is None else format_duration(max(float(seconds), 0.0))


def num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def devices_text(devices: dict | None) -> str:
    """A device request as one short line: '4 × gpu · nvidia-a100-80g · ≥64 GB'."""
    if not devices:
        return "—"
    parts = [f"{num(devices.get('count', 1))} × {devices.get('class', '?')}"]
    if devices.get("models"):
        parts.append(", ".join(devices["models"]))
    if devices.get("min_memory_gb"):
        parts.append(f"≥{num(devices['min_memory_gb'])} GB")
    if devices.get("memory_gb"):
        parts.append(f"{num(devices['memory_gb'])} GB")
    if devices.get("cores_percent"):
        parts.append(f"{num(devices['cores_percent'])}%")
    return " · ".join(parts)


def host_text(per_worker: dict | None) -> str:
    if not per_worker:
        return "—"
    return f"{num(per_worker.get('cpu', 1))} CPU · {num(per_worker.get('memory_gb', 1))} GB"


def framework_text(framework: dict | None) -> str:
    if not framework:
        return "—"
    text = f"{framework.get('name', '')} {framework.get('version') or ''}".strip()
    extras = framework.get("extras") or {}
    return text + ("".join(f" + {k} {v}" for k, v in extras.items()) if extras else "")


def covers(scopes: Any, tenant: str) -> bool:
    """Does an action's scope from whoami ('*' or tenant roots) reach `tenant`?"""
    if scopes == "*":
        return True
    return any(tenant == s or tenant.startswith(s + "/") for s in scopes or [])


async def objects(user: Viewer, kind: str) -> tuple[list[dict], str]:
    """An inventory list, or [] and the API's message (a viewer without inventory.read
    still gets the page)."""
    try:
        return await user.api.get_as(ObjectList, f"/api/v1/objects/{kind}"), ""
    except ApiError as exc:
        return [], exc.message


async def tenants_for(user: Viewer, action: str) -> list[str]:
    tenants, _ = await objects(user, "tenants")
    scopes = user.actions.get(action)
    return sorted(t["name"] for t in tenants if covers(scopes, t["name"]))


def wait_seconds(task: TaskResponse, now: datetime) -> float | None:
    """From submission to start; until now while it has not started; None if unknown."""
    created = parse_ts(task.created_at)
    if created is None:
        return None
    started = parse_ts(task.started_at)
    if started:
        return (started - created).total_seconds()
    if task.state in TERMINAL:
        finished = parse_ts(task.finished_at)
        return (finished - created).total_seconds() if finished else None
    return max((now - created).total_seconds(), 0.0)


def attempt_rows(attempts: list[dict], chosen: str | None) -> list[dict]:
    """Candidates in the order tried: the first is the preferred one, later ones fallbacks."""
    rows = []
    for i, attempt in enumerate(attempts):
        rows.append(
            {
                "candidate": attempt.get("candidate", ""),
                "role": "preferred" if i == 0 else "fallback",
                "pools": attempt.get("pools") or [],
                "outcome": attempt.get("outcome", ""),
                "workers_fit": attempt.get("workers_fit"),
                "chosen": bool(chosen) and attempt.get("candidate") == chosen and attempt.get("outcome") == "fit",
                "reasons": attempt.get("reasons") or {},  # shown with reasons(): translated
                "details": attempt.get("details") or [],
            }
        )
    return rows
