"""`hetpool audit list | export | verify`: read, export and check the audit trail."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from hetpool.cli.render import OutputFormat, console, emit_data, table


def register(audit_app: typer.Typer) -> None:
    from hetpool.cli.main import OutOpt, TokenOpt, UrlOpt, _client, handles_errors

    object_opt = typer.Option(None, "--object", help="object id (task id, node, pool …)")
    kind_opt = typer.Option(None, "--kind", help="object kind: Task, Node, Pool, Quota …")
    actor_opt = typer.Option(None, "--actor", help="who did it (user, scheduler, reclaimer …)")
    action_opt = typer.Option(None, "--action", help="exact action, or a prefix ending in '*' (task.reclaim*)")
    since_opt = typer.Option(None, "--since", help="ISO time (UTC if no zone) or a duration back from now (2h)")
    until_opt = typer.Option(None, "--until", help="ISO time or a duration back from now; exclusive")

    @audit_app.command("list")
    @handles_errors
    def audit_list(
        object_id: str = object_opt,
        kind: str = kind_opt,
        actor: str = actor_opt,
        action: str = action_opt,
        since: str = since_opt,
        until: str = until_opt,
        limit: int = typer.Option(500, "--limit", min=1, max=5000),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Audit events, oldest first."""
        with _client(url, token) as client:
            events = client.audit_events(object_id=object_id, object_kind=kind, actor=actor, action=action, since=since, until=until, limit=limit)
        if not emit_data(events, output):
            table(
                ["ID", "TIME", "ACTOR", "ACTION", "OBJECT"],
                [[e["id"], e["ts"], e["actor"], e["action"], f"{e['object_kind']}/{e['object_id']}"] for e in events],
            )

    @audit_app.command("export")
    @handles_errors
    def audit_export(
        fmt: str = typer.Option("jsonl", "--format", help="jsonl or csv"),
        file: Path = typer.Option(None, "-f", "--file", help="write here instead of stdout"),
        object_id: str = object_opt,
        kind: str = kind_opt,
        actor: str = actor_opt,
        action: str = action_opt,
        since: str = since_opt,
        until: str = until_opt,
        url: str = UrlOpt,
        token: str = TokenOpt,
    ) -> None:
        """Every matching event with its hashes, as JSON lines or CSV (for archiving or a SIEM)."""
        if fmt not in ("jsonl", "csv"):
            raise typer.BadParameter("--format must be jsonl or csv")
        filters = {"object_id": object_id, "object_kind": kind, "actor": actor, "action": action, "since": since, "until": until}
        with _client(url, token) as client:
            chunks = client.audit_export(fmt, **filters)
            if file is None:
                for chunk in chunks:
                    sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                return
            # Written beside the target and renamed, so a failed export leaves no half file.
            partial = file.with_name(file.name + ".partial")
            try:
                with open(partial, "wb") as out:
                    for chunk in chunks:
                        out.write(chunk)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            partial.replace(file)
        console.print(f"audit events written to {file}", highlight=False)

    @audit_app.command("verify")
    @handles_errors
    def audit_verify(url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt) -> None:
        """Check the audit hash chain; exit 1 and name the first bad event if broken."""
        with _client(url, token) as client:
            result = client.audit_verify()
        if not emit_data(result, output):
            if result["ok"]:
                console.print(f"[green]audit chain intact[/green]: {result['events']} events")
            else:
                console.print(f"[red]audit chain broken[/red] at event {result['first_bad_event']}: {result['problem']}")
        if not result["ok"]:
            raise typer.Exit(1)
