"""`hetpool sync`: read a Slurm / Kubernetes / Ray cluster now, or show every cluster's last sync."""

from __future__ import annotations

import typer
from rich.markup import escape

from hetpool.cli.render import OutputFormat, console, emit_data, table


def register(app: typer.Typer) -> None:
    from hetpool.cli.main import OutOpt, TokenOpt, UrlOpt, _client, handles_errors

    @app.command()
    @handles_errors
    def sync(
        cluster: str = typer.Argument(None, help="cluster to sync now; omit to list the last sync of every connector cluster"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Pull a cluster's nodes, devices and states from its engine (the server also does this periodically)."""
        with _client(url, token) as client:
            data = client.sync_cluster(cluster) if cluster else client.connector_syncs()
        if emit_data(data, output):
            return
        if cluster:
            states = ", ".join(f"{n} {s}" for s, n in sorted(data.states.items())) or "no nodes"
            console.print(f"cluster/{cluster} synced from {data.connector}: {data.nodes} nodes ({states})")
            for change in data.changes:
                console.print(f"  {change['kind'].lower()}/{change['name']} {change['action']}")
            for name in data.removed:
                console.print(f"  node/{name} removed")
            for name in data.kept_down:
                console.print(f"  node/{name} gone from {data.connector}; kept as down until its work ends")
            for warning in data.warnings:
                console.print(f"  [yellow]warning[/yellow]: {escape(warning)}")
            return
        table(
            ["CLUSTER", "CONNECTOR", "OK", "LAST ATTEMPT", "NODES", "ERROR"],
            [[s.cluster, s.connector, s.ok, s.last_attempt_at, s.summary.get("nodes", "-"), s.error[:60]] for s in data],
        )
