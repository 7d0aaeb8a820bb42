"""`hetpool audit list | export | verify | checkpoint`: read, export and check the audit trail,
and anchor it (checkpoints under a key outside the database: services/audit_anchor.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from hetpool.cli.audit_offline import verify_offline
from hetpool.cli.render import OutputFormat, console, emit_data, plain, table


def _anchoring(result: dict) -> str:
    last = result.get("last_checkpoint")
    waiting = result.get("unanchored_events", result["events"])
    if last is None:
        return f"no checkpoint yet: {waiting} events not yet anchored"
    return f"anchored by checkpoint {last['seq']} of {last['ts']} up to event {last['event_id']}; {waiting} events not yet anchored"


def show_verify(result: dict, output: OutputFormat) -> None:
    """Print a verify answer (the API's or the offline one); exit 1 when anything is wrong."""
    if not emit_data(result, output):
        if result.get("first_bad_event") is not None:
            console.print(f"[red]audit chain broken[/red] at event {result['first_bad_event']}: {result['problem']}", highlight=False)
        if result.get("checkpoint_problem"):
            console.print(f"[red]audit checkpoints damaged[/red]: {result['checkpoint_problem']}", highlight=False)
        if result["ok"]:
            console.print(f"[green]audit chain intact[/green]: {result['events']} events", highlight=False)
        console.print(_anchoring(result), highlight=False)
    if not result["ok"]:
        raise typer.Exit(1)


def register(audit_app: typer.Typer) -> None:
    from hetpool.cli.main import OutOpt, TokenOpt, UrlOpt, _client, handles_errors

    kit = (UrlOpt, TokenOpt, OutOpt, _client, handles_errors)
    _register_reading(audit_app, kit)
    _register_checking(audit_app, kit)


def _register_reading(audit_app: typer.Typer, kit: tuple) -> None:
    """audit list | export."""
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit
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
                [[e.id, e.ts, e.actor, e.action, f"{e.object_kind}/{e.object_id}"] for e in events],
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


def _register_checking(audit_app: typer.Typer, kit: tuple) -> None:
    """audit verify | checkpoint."""
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit

    @audit_app.command("verify")
    @handles_errors
    def audit_verify(
        offline: bool = typer.Option(False, "--offline", help="read the database, key and checkpoint file directly (no server)"),
        config: Path = typer.Option(None, "--config", envvar="HETPOOL_CONFIG", help="--offline: the server's YAML settings file"),
        data_dir: Path = typer.Option(None, "--data-dir", help="--offline: default ~/.hetpool (or the config / HETPOOL_DATA_DIR)"),
        database_url: str = typer.Option(None, "--database-url", help="--offline: default SQLite in the data dir"),
        key_file: Path = typer.Option(None, "--key-file", help="--offline: default <data-dir>/audit.key"),
        checkpoints: list[Path] = typer.Option(None, "--checkpoints", help="--offline: checkpoint file(s); default in the data dir"),
        logs: list[Path] = typer.Option(None, "--log", help="--offline: server log file(s) holding 'audit checkpoint' lines"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Check the audit hash chain against the checkpoints; exit 1 and name the first bad event if broken."""
        if offline:
            where = {"config": config, "data_dir": data_dir, "database_url": database_url, "key_file": key_file}
            result = verify_offline(**where, checkpoints=checkpoints or None, logs=logs or [])
        else:
            if any(v for v in (config, data_dir, database_url, key_file, checkpoints, logs)):
                raise typer.BadParameter("--config, --data-dir, --database-url, --key-file, --checkpoints and --log go with --offline")
            with _client(url, token) as client:
                result = plain(client.audit_verify())  # printed as the offline verify's dict
        show_verify(result, output)

    @audit_app.command("checkpoint")
    @handles_errors
    def audit_checkpoint(url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt) -> None:
        """Checkpoint the audit chain head now (platform-admin, auditor); refused if the trail broke since the last one."""
        with _client(url, token) as client:
            cp = client.audit_checkpoint()
        if not emit_data(cp, output):
            what = f"checkpoint {cp.seq} written to {cp.file}" if cp.written else f"nothing new since checkpoint {cp.seq}"
            console.print(f"{what}: event {cp.event_id} ({cp.events} events), {cp.ts}", highlight=False)
