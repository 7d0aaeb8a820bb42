"""`hetpool compat`: ask the compatibility tables from the command line — check one
device + stack + framework, print the matrices, list the rows with their sources. The
server answers (it holds the operators' CompatibilityRule objects and table files)."""

from __future__ import annotations

import typer
from rich.markup import escape

from hetpool.catalog.compat_matrix import parse_framework, parse_stack
from hetpool.cli.render import OutputFormat, console, emit_data, table

_STATUS_STYLE = {"compatible": "green", "incompatible": "red", "unknown": "yellow"}
STACK_HELP = "the node's stack, key=value: driver=550.54.15, cann=8.0.RC2, rocm=6.2, dtk=24.04, xre=…, neuware=…; torch=2.4.0 (installed)"


def register(app: typer.Typer) -> None:
    from hetpool.cli.main import OutOpt, TokenOpt, UrlOpt, _client, handles_errors

    compat_app = typer.Typer(no_args_is_help=True, help="The compatibility tables: check, matrix, rows (each row with its source).")
    app.add_typer(compat_app, name="compat")
    kit = (UrlOpt, TokenOpt, OutOpt, _client, handles_errors)
    _register_check(compat_app, kit)
    _register_tables(compat_app, kit)


def _register_check(compat_app: typer.Typer, kit: tuple) -> None:
    """compat check."""
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit

    @compat_app.command("check")
    @handles_errors
    def check(
        device: str = typer.Option(..., "--device", help="a device model, e.g. nvidia-a100-80g, ascend-910b2"),
        framework: str = typer.Option(..., "--framework", help="e.g. pytorch==2.4, mindspore==2.3.1, vllm>=0.8, jax"),
        stack: list[str] = typer.Option([], "--stack", help=STACK_HELP),
        extra: list[str] = typer.Option([], "--extra", help="an extra package with its spec, e.g. vllm>=0.6 (repeatable)"),
        installed: bool = typer.Option(False, "--installed", help="the task has no image: the stack's installed version must run"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """Can this device with this stack run this framework? The verdict, the reasons and the rows used."""
        try:
            request = parse_framework(framework)
            extras = {p.name: p.version for p in map(parse_framework, extra)}
            node = parse_stack(stack)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        body = {"device": device, "framework": {**request.model_dump(), "extras": extras}, "has_image": not installed}
        if node is not None:
            body["stack"] = node.model_dump(mode="json", exclude_defaults=True)
        with _client(url, token) as client:
            answer = client.compat_check(body)
        if emit_data(answer, output):
            return
        style = _STATUS_STYLE[answer.status]
        console.print(f"[{style}]{answer.status}[/{style}]" + (f" — {escape(answer.reason)}: {escape(answer.detail)}" if answer.reason else ""))
        if answer.status == "unknown":
            console.print(f"policy: unknown verdicts {'block the pool' if answer.policy == 'block' else 'are allowed with a note'} on this server")
        for note in answer.notes:
            console.print(f"  note: {escape(note)}")
        if answer.rows:
            console.print("rows used:")
            for row in answer.rows:
                console.print(f"  {escape(row)}")
        if answer.nearest:
            console.print("nearest known rows:")
            for row in answer.nearest:
                console.print(f"  {escape(row)}")
        if answer.status != "compatible":
            raise typer.Exit(1)


def _register_tables(compat_app: typer.Typer, kit: tuple) -> None:
    """compat matrix | rows."""
    UrlOpt, TokenOpt, OutOpt, _client, handles_errors = kit

    @compat_app.command("matrix")
    @handles_errors
    def matrix(
        device: str = typer.Option(None, "--device", help="what this device model can run, per runtime release"),
        framework: str = typer.Option(None, "--framework", help="which device models (on which releases) run it, e.g. pytorch==2.8"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """The tables people otherwise look up by hand, from the rows the scheduler checks against."""
        if bool(device) == bool(framework):
            raise typer.BadParameter("give exactly one of --device or --framework")
        with _client(url, token) as client:
            answer = client.compat_matrix(device=device, framework=framework)
        if emit_data(answer, output):
            return
        if device:
            rows = [
                [
                    r.runtime,
                    _supported(r.supported, r.why_not),
                    "; ".join(f"{fw} {_versions(vs)}" for fw, vs in sorted(r.frameworks.items())) or "-",
                ]
                for r in answer.by_runtime
            ]
            table(["runtime release", "supports the device", "frameworks that run"], rows, title=f"{device} (tables of {answer.kb_version})")
            return
        rows = [[r.device, r.runtime, r.status, _releases(r.releases) or escape(r.detail)] for r in answer.by_device]
        table(["device", "runtime", "status", "runtime releases that run it"], rows, title=f"{framework} (tables of {answer.kb_version})")

    @compat_app.command("rows")
    @handles_errors
    def rows(
        table_name: str = typer.Option(None, "--table", help="only this table (torch-npu, pytorch, cuda-driver …)"),
        origin: str = typer.Option(None, "--origin", help="built-in, or 'CompatibilityRule NAME' / a table file"),
        url: str = UrlOpt,
        token: str = TokenOpt,
        output: OutputFormat = OutOpt,
    ) -> None:
        """The rows of the tables, each with its source, the date it was checked and where it came from."""
        with _client(url, token) as client:
            found = client.compat_rows(table=table_name, origin=origin)
        if emit_data(found, output):
            return
        shown = [
            [
                r.table,
                ", ".join(f"{k}={_cell(v)}" for k, v in r.values.items()),
                r.source,
                r.checked + ("" if r.verified else " (not verified)"),
                r.origin,
            ]
            for r in found
        ]
        table(["table", "row", "source", "checked", "origin"], shown)


def _supported(supported: bool, why_not: str) -> str:
    """'yes', or the short form of why not: 'no (first: CANN 6.3.RC2)'."""
    if supported:
        return "yes"
    for marker, label in (("(first supported in ", "first"), ("(last: ", "last")):
        if marker in why_not:
            return f"no ({label}: {why_not.split(marker, 1)[1].rstrip(')')})"
    return f"no: {why_not}"


def _cell(value) -> str:
    return "/".join(map(str, value)) if isinstance(value, list) else str(value)


def _versions(versions: list[str]) -> str:
    if versions == ["*"]:
        return "any"
    return ", ".join(versions[:6]) + (f" … ({len(versions)})" if len(versions) > 6 else "")


def _releases(releases: list[str]) -> str:
    if len(releases) <= 3:
        return ", ".join(releases)
    return f"{releases[0]} … {releases[-1]} ({len(releases)} releases)"
