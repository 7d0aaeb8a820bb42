"""`hetpool cost`: chargeback reports, the usage ledger and budget status."""

from __future__ import annotations

import typer
from rich.text import Text

from hetpool.cli.render import OutputFormat, console, emit_data, table

BY_HELP = "tenant, org, team, project, env, type, pool, cluster, backend or model"
PERIOD_HELP = "2026-11 (month), 2026-W48 (ISO week), 2026-11-30 (day) or 2026 (year), UTC; default: this month"


def _money(value: float) -> str:
    return f"{value:,.2f}"


def _hours(value: float) -> str:
    # Short tasks use small fractions of an hour; two decimals would show them as nothing.
    return f"{value:,.2f}" if value >= 0.01 or value == 0 else f"{value:.2g}"


def _sums_row(key: str, s: dict) -> list:
    return [key, _money(s["cost"]), s["currency"], _hours(s["device_hours"]), _hours(s["cpu_core_hours"]), _hours(s["memory_gib_hours"]), s["tasks"]]


def register(app: typer.Typer) -> None:
    from hetpool.cli.main import OutOpt, TokenOpt, UrlOpt, _client, handles_errors

    cost_app = typer.Typer(no_args_is_help=True, help="Cost: chargeback reports, the usage ledger and budgets.")
    app.add_typer(cost_app, name="cost")
    kit = (UrlOpt, TokenOpt, OutOpt, _client, handles_errors)
    _register_spending(cost_app, kit)
    _register_budgets(cost_app, kit)


def _register_spending(cost_app: typer.Typer, kit: tuple) -> None:
    """cost report | ledger."""
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit

    @cost_app.command("report")
    @handles_errors
    def report(
        by: str = typer.Option("team", "--by", help=BY_HELP),
        period: str = typer.Option(None, "--period", help=PERIOD_HELP),
        tenant: str = typer.Option(None, "--tenant", help="only this tenant's subtree"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Cost and usage per group for a period; the total is the sum of the period's ledger rows."""
        with _client(url, token) as client:
            data = client.cost_report(by=by, period=period, tenant=tenant)
        if emit_data(data, output):
            return
        scope = f" of {data.tenant}" if data.tenant else ""
        title = f"cost by {data.by}{scope}, {data.period} ({data.start} – {data.end}, UTC, end excluded)"
        rows = [_sums_row(g["key"], g) for g in data.groups] + [_sums_row("TOTAL", t) for t in data.totals.values()]
        if not data.groups:
            console.print(f"{title}: no usage recorded")
            return
        table([data.by.upper(), "COST", "CURRENCY", "DEVICE-H", "CPU-CORE-H", "MEM-GIB-H", "TASKS"], rows, title=title)

    @cost_app.command("ledger")
    @handles_errors
    def ledger(
        period: str = typer.Option(None, "--period", help=PERIOD_HELP),
        tenant: str = typer.Option(None, "--tenant", help="only this tenant's subtree"),
        task: str = typer.Option(None, "--task", help="only this task"),
        limit: int = typer.Option(1000, "--limit", min=1, max=10000),
        offset: int = typer.Option(0, "--offset", min=0),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Usage ledger rows: one per worker, attempt and UTC day, with hours and cost."""
        with _client(url, token) as client:
            data = client.cost_ledger(period=period, tenant=tenant, task=task, limit=limit, offset=offset)
        if emit_data(data, output):
            return
        table(
            ["DAY", "TASK", "ATTEMPT", "RANK", "TENANT", "POOL", "FROM", "TO", "DEVICE-H", "CPU-CORE-H", "COST"],
            [
                [
                    r.day,
                    r.task_id,
                    r.attempt,
                    r.rank,
                    r.tenant,
                    r.pool,
                    r.interval_start[11:19],
                    r.interval_end[11:19],
                    _hours(r.device_hours),
                    _hours(r.cpu_core_hours),
                    f"{_money(r.cost)} {r.currency}",
                ]
                for r in data.rows
            ],
            title=f"ledger {data.period}",
        )
        totals = ", ".join(f"{_money(v)} {c}" for c, v in data.cost_by_currency.items()) or "0"
        console.print(f"rows {data.offset + 1 if data.rows else 0}–{data.offset + len(data.rows)} of {data.count}; total {totals}")


def _register_budgets(cost_app: typer.Typer, kit: tuple) -> None:
    """cost budgets."""
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit

    @cost_app.command("budgets")
    @handles_errors
    def budgets(
        tenant: str = typer.Option(None, "--tenant", help="budgets of this subtree and of its ancestors"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Each budget: spent this period against its amount, and the alerts raised."""
        with _client(url, token) as client:
            data = client.budget_status(tenant)
        if emit_data(data, output):
            return
        if not data:
            console.print("no budgets (apply a kind: Budget)")
            return
        table(
            ["NAME", "TENANT", "PERIOD", "SPENT", "AMOUNT", "CURRENCY", "USED", "ALERTS", "HARD STOP", "STATE"],
            [
                [
                    b.name,
                    b.tenant,
                    b.period,
                    _money(b.spent),
                    _money(b.amount),
                    b.currency or "-",
                    f"{b.fraction:.0%}",
                    ", ".join(f"{a.threshold:.0%}" for a in b.alerts) or "-",
                    "yes" if b.hard_stop else "no",
                    Text.from_markup("[red]invalid[/red] (-o json: why)")
                    if b.invalid
                    else Text.from_markup("[red]stopped[/red]" if b.hard_stop else "[red]exceeded[/red]")
                    if b.exceeded
                    else "ok",
                ]
                for b in data
            ],
        )
