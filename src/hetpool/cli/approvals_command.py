"""`hetpool approvals list | get | approve | reject`: requests for tasks and quota changes that wait for someone's decision."""

from __future__ import annotations

import typer

from hetpool.cli.render import OutputFormat, console, emit_data, table

approvals_app = typer.Typer(help="Approval requests: tasks and quota changes waiting for a decision", no_args_is_help=True)


def _subject(a: dict) -> str:
    """task/ID, or the held object (quota/NAME, budget/NAME ...), prefixed with 'delete' for a held delete."""
    if a.kind == "task":
        return f"task/{a.task_id}"
    document = a.document or {}
    subject = f"{str(document.get('kind') or a.kind).lower()}/{document.get('name', '?')}"
    return f"delete {subject}" if a.operation == "delete" else subject


def register(app: typer.Typer) -> None:
    from hetpool.cli.main import OutOpt, TokenOpt, UrlOpt, _client, handles_errors

    @approvals_app.command("list")
    @handles_errors
    def list_(
        state: str = typer.Option(None, "--state", help="pending, approved, rejected, expired or withdrawn"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Requests you may see: yours, and those you may decide."""
        with _client(url, token) as client:
            rows = client.list_approvals(state=state)
        if emit_data(rows, output):
            return
        table(
            ["ID", "STATE", "SUBJECT", "TENANT", "REQUESTED BY", "EXPIRES", "REASONS"],
            [[a.id, a.state, _subject(a), a.tenant, a.requested_by, a.expires_at, "; ".join(r["message"] for r in a.reasons)] for a in rows],
        )

    @approvals_app.command("get")
    @handles_errors
    def get(approval_id: str, url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt) -> None:
        """One request with its reasons and decision."""
        with _client(url, token) as client:
            a = client.get_approval(approval_id)
        if emit_data(a, output):
            return
        console.print(f"{a.id} {a.state}: {_subject(a)} of {a.tenant}, requested by {a.requested_by} (expires {a.expires_at})")
        for r in a.reasons:
            console.print(f"  - {r['message']} (policy {r['policy']})")
        if a.reason:
            console.print(f"  requester says: {a.reason}")
        if a.decided_by:
            console.print(f"  {a.state} by {a.decided_by} at {a.decided_at}{': ' + a.comment if a.comment else ''}")

    @approvals_app.command("approve")
    @handles_errors
    def approve(
        approval_id: str, comment: str = typer.Option("", "--comment", "-m"), url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt
    ) -> None:
        """Approve: the task enters the queue, or the held Quota is applied."""
        with _client(url, token) as client:
            a = client.decide_approval(approval_id, approve=True, comment=comment)
        if not emit_data(a, output):
            console.print(f"{a.id}: approved ({_subject(a)})")

    @approvals_app.command("reject")
    @handles_errors
    def reject(
        approval_id: str,
        comment: str = typer.Option(..., "--comment", "-m", help="why (shown on the cancelled task)"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Reject with a comment: the task is cancelled, the Quota not applied."""
        with _client(url, token) as client:
            a = client.decide_approval(approval_id, approve=False, comment=comment)
        if not emit_data(a, output):
            console.print(f"{a.id}: rejected ({_subject(a)})")

    app.add_typer(approvals_app, name="approvals")
