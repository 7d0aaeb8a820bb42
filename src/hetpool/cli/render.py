"""Output for humans (Rich tables) and machines (-o json / yaml)."""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum

import yaml
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hetpool.server.schemas.tasks import PlanResponse, RecommendResponse

# Piped or redirected (not a terminal, no COLUMNS set), a table is never cut to 80 columns:
# what a script greps for (a pool name, a node) must be there whole.
UNBOUNDED = 100_000
_width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else UNBOUNDED
# soft_wrap: long tokens, ids and messages stay on one line, so they can be copied.
console = Console(soft_wrap=True, width=_width)
err_console = Console(stderr=True, soft_wrap=True)
_wide = [False]  # -o wide asked for (see emit_data and table)


class OutputFormat(StrEnum):
    TABLE = "table"
    WIDE = "wide"  # the table, never truncated to the terminal's width
    JSON = "json"
    YAML = "yaml"


def plain(data):
    """The JSON form of API models (as the server sent them: absent keys stay absent)."""
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json", exclude_unset=True)
    if isinstance(data, list):
        return [plain(item) for item in data]
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    return data


def emit_data(data, fmt: OutputFormat) -> bool:
    """Print `data` (API models, or plain JSON values) as JSON/YAML; False when the caller should print a table."""
    _wide[0] = fmt == OutputFormat.WIDE
    data = plain(data)
    if fmt == OutputFormat.JSON:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return True
    if fmt == OutputFormat.YAML:
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
        return True
    return False


def wide() -> bool:
    """Was -o wide asked for (nothing is shortened)?"""
    return _wide[0]


def cell(value) -> Text:
    """A table cell as plain text: names, messages and patterns such as `[a-z0-9]` are not
    Rich markup (pass a `Text` for styled cells, e.g. Text.from_markup)."""
    if isinstance(value, Text):
        return value
    return Text("" if value is None else str(value))


def table(columns: list[str], rows: list[list], title: str | None = None) -> None:
    t = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*[cell(v) for v in row])
    if _wide[0]:
        Console(soft_wrap=True, width=UNBOUNDED).print(t)  # -o wide: every cell whole, whatever the terminal
    else:
        console.print(t)


def placements_text(placements: list) -> str:
    parts = []
    for p in plain(placements):  # a task's PlacementView models or a plan's placement dicts
        devices = ",".join(str(d) for d in p.get("devices", []))
        parts.append(f"{p['node']}/{p['model']}[{devices}]" if devices else p["node"])
    return " ".join(parts)


def _sent(model: BaseModel, field: str, default):
    """A field's value when the server sent it (even as null), else `default`."""
    return getattr(model, field) if field in model.model_fields_set else default


def plan_report(plan: PlanResponse) -> None:
    if plan.feasible:
        console.print(f"[green]feasible[/green] — {escape(plan.explanation['summary'])}")
        table(
            ["rank", "node", "pool", "model", "devices"],
            [[p["rank"], p["node"], p["pool"], p["model"], ",".join(map(str, p["devices"])) or "-"] for p in plan.placements],
        )
        console.print(
            f"fallback used: {'yes' if plan.fallback_used else 'no'} · estimated runtime: {_sent(plan, 'estimated_runtime', '-')}"
            f" · cost/hour: {_sent(plan, 'cost_per_hour', 0)}"
        )
        backend = plan.backend or {}
        if backend:
            console.print(f"runs on: {escape(str(backend['kind']))} backend of cluster {escape(str(backend['cluster']))}")
            for gap in backend.get("unsupported", []):
                console.print(f"[red]cannot dispatch[/red]: {escape(gap['reason'])}")
            for limit in backend.get("limits", []):
                console.print(f"engine limits: {escape(limit['feature'])}: {escape(limit['reason'])}")
    elif plan.explanation.get("reason") == "exceeds_quota":
        # A verdict, not a wait: submit refuses it (422 exceeds_quota).
        console.print(f"[red]refused at submit[/red] — {escape(plan.explanation['summary'])}")
    else:
        colour = "red" if not plan.fits_when_idle else "yellow"
        console.print(f"[{colour}]not feasible now[/{colour}] — {escape(plan.explanation['summary'])}")
        table(["reason", "count"], [[r, c] for r, c in sorted(plan.reasons.items(), key=lambda x: -x[1])])
    attempts = plan.explanation["attempts"]
    if attempts:
        table(
            ["candidate", "outcome", "workers fit", "reasons"],
            [[a["candidate"], a["outcome"], a["workers_fit"], "; ".join(f"{k} ({v})" for k, v in a["reasons"].items())] for a in attempts],
            title="candidates tried (in order)",
        )


def recommend_report(answer: RecommendResponse) -> None:
    """The ranked options side by side, each option's reasons, and the pools left out."""
    model = answer.model
    sized = model.get("name") or f"{model.get('params_b')}B parameters (shaped like {model.get('shape_from')})"
    deadline = f" · deadline {_minute(answer.deadline)} UTC" if answer.deadline else ""
    console.print(f"goal: {escape(str(answer.goal.get('method')))} of {escape(str(sized))}{deadline}")
    if not answer.options:
        console.print("[red]no option[/red]: no pool can run it (see the pools left out below)")
    rows = []
    for i, o in enumerate(answer.options, 1):
        missed = [k for k, ok in o.meets.items() if not ok]
        meets = ("misses " + ",".join(missed)) if missed else ("all targets" if o.meets else "-")
        start = "now" if o.startable_now else (_minute(o.estimated_start) if o.estimated_start else "unknown")
        cost = f"{o.cost:,.2f}" if o.cost is not None else f"{o.cost_per_hour:,.2f}/h"
        rows.append(
            [
                i,
                o.model,
                o.count,
                o.pool,
                start,
                _minute(o.estimated_completion) if o.estimated_completion else "-",
                o.estimated_runtime or "-",
                cost,
                meets,
            ]
        )
    if rows:
        headers = ["#", "model", "count", "pool", "start (UTC)", "completion (UTC)", "runtime", "cost", "targets"]
        table(headers, rows, title="options (best first)")
        for i, o in enumerate(answer.options, 1):
            console.print(f"{i}. " + escape("; ".join(o.reasons)))
    if answer.excluded:
        table(["pool", "model", "why not"], [[e.get("pool"), e.get("model"), e.get("reason")] for e in answer.excluded], title="pools left out")


def _minute(iso: str) -> str:
    """An ISO time as a person reads it in a table: to the minute, in UTC."""
    return iso[:16].replace("T", " ") if len(iso) >= 16 and iso.endswith(("+00:00", "Z")) else iso
