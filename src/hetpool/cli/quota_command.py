"""`hetpool quota usage`: nominal, used, borrowed, lent and headroom per quota."""

from __future__ import annotations

import typer

from hetpool.cli.render import OutputFormat, emit_data, table

quota_app = typer.Typer(help="Quotas: usage, borrowing and headroom (quotas are applied as kind: Quota)", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    from hetpool.cli.main import OutOpt, TokenOpt, UrlOpt, _client, handles_errors

    @quota_app.command("usage")
    @handles_errors
    def usage(url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt) -> None:
        """Per quota and resource: nominal, used, borrowed (over nominal), lent (to siblings), headroom."""
        with _client(url, token) as client:
            rows = client.quota_usage()
        if emit_data(rows, output):
            return
        table(
            ["QUOTA", "TENANT", "ENV", "TYPE", "RESOURCE", "NOMINAL", "USED", "BORROWED", "LENT", "HEADROOM"],
            [
                [r.quota, r.tenant, r.env or "*", r.type or "*", r.resource, f"{r.nominal:g}", f"{r.used:g}"]
                + [f"{r.borrowed:g}", f"{r.lent:g}", f"{r.headroom:g}"]
                for r in rows
            ],
        )

    app.add_typer(quota_app, name="quota")
