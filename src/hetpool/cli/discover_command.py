"""`hetpool discover`: parse a saved device-tool output and print the normalised result."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.markup import escape

from hetpool.cli.render import OutputFormat, console, emit_data, table


def register(app: typer.Typer) -> None:
    from hetpool.cli.main import handles_errors

    @app.command()
    @handles_errors
    def discover(
        tool: str = typer.Option(
            ...,
            "--tool",
            help="nvidia-smi-xml, nvidia-smi-csv, nvidia-smi-capture, npu-smi, npu-smi-mapping, npu-smi-board, "
            "rocm-smi-json, hy-smi, cnmon, xpu-smi, lspci",
        ),
        input_file: str = typer.Option("-", "--input", "-i", help="saved tool output ('-' for stdin)"),
        output: OutputFormat = typer.Option(OutputFormat.TABLE, "-o", "--output"),
    ) -> None:
        """Parse a saved tool output into devices mapped onto the catalog (no server needed)."""
        from hetpool.agent.discovery import parse_tool_output
        from hetpool.core.errors import SpecError

        if input_file == "-":
            text = sys.stdin.read()
        else:
            path = Path(input_file)
            if not path.is_file():
                raise SpecError(f"--input: no such file {input_file!r}")
            text = path.read_text(encoding="utf-8", errors="replace")
        result = parse_tool_output(tool, text).to_dict()
        if emit_data(result, output):
            return
        runtime = result.get("runtime") or {}
        console.print(
            f"{result['tool']}: {len(result['devices'])} device(s); driver {result.get('driver_version') or '-'}; "
            f"runtime {(runtime.get('name', '') + ' ' + runtime.get('version', '')).strip() or '-'}"
        )
        table(
            ["INDEX", "NAME", "MODEL", "VENDOR", "MEMORY MiB", "HEALTH"],
            [[d["index"], d["name"], d["model"], d["vendor"], d.get("memory_mib") or "-", d["health"]] for d in result["devices"]],
        )
        for warning in result.get("warnings", []):
            console.print(f"[yellow]warning[/yellow]: {escape(warning)}")
