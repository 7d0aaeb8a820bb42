"""`hetpool agent`: register this host as a node, then send heartbeats."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.markup import escape

from hetpool import __version__
from hetpool.cli.render import console
from hetpool.server.schemas.agent import RegisterResponse


def _register(client, report, pool: str | None) -> RegisterResponse:
    """Register the node, with DeviceModel documents for its uncatalogued devices."""
    return client.register_node(report.node, pool, __version__, report.models)


def register(app: typer.Typer) -> None:
    from hetpool.cli.main import TokenOpt, UrlOpt, _client, handles_errors

    @app.command()
    @handles_errors
    def agent(
        cluster: str = typer.Option(..., "--cluster", help="the (existing) cluster this host belongs to"),
        pool: str = typer.Option(None, "--pool", help="add the node to this existing pool"),
        name: str = typer.Option(None, "--name", help="node name (default: the host name)"),
        interval: float = typer.Option(10.0, "--interval", min=0.5, help="seconds between heartbeats"),
        once: bool = typer.Option(False, "--once", help="register and send one heartbeat, then exit"),
        tool_output: list[str] = typer.Option(None, "--tool-output", help="TOOL=FILE: use a saved tool output instead of running tools (repeatable)"),
        python_env: list[str] = typer.Option(
            None,
            "--python-env",
            help="report the frameworks installed in this Python environment: a python executable, a venv/conda prefix or a site-packages "
            "directory (repeatable)",
        ),
        url: str = UrlOpt,
        token: str = TokenOpt,
    ) -> None:
        """Report this host's CPUs, memory, devices (NVML, nvidia-smi, npu-smi, rocm-smi …, the PCI bus) and frameworks, and keep it alive."""
        from hetpool.agent.host import describe_host

        saved = None
        if tool_output:
            saved = {}
            for item in tool_output:
                tool, sep, path = item.partition("=")
                if not sep or not Path(path).is_file():
                    raise typer.BadParameter(f"--tool-output {item!r}: expected TOOL=FILE with an existing file")
                saved[tool] = Path(path).read_text(encoding="utf-8", errors="replace")
        for env in python_env or []:
            if not Path(env).expanduser().exists():
                raise typer.BadParameter(f"--python-env {env!r}: no such file or directory")
        report = describe_host(cluster, name, saved, python_envs=python_env or None)
        for warning in report.warnings:
            console.print(f"[yellow]warning[/yellow]: {escape(warning)}")
        with _client(url, token) as client:
            _register(client, report, pool)
            devices = ", ".join(f"{g['count']}x{g['model']}" for g in report.node["devices"])
            console.print(f"registered node {report.node['name']} in {cluster}: {report.node['cpu_cores']} CPUs, {devices}")
            for model in report.models:
                console.print(f"registered device model {model['name']} ({model['display_name']}, unverified)")
            frameworks = report.node.get("stack", {}).get("frameworks", {})
            if frameworks:
                console.print("frameworks: " + ", ".join(f"{k} {v}" for k, v in sorted(frameworks.items())))
            while True:
                client.heartbeat(report.node["name"], report.devices, __version__)
                if once:
                    return
                time.sleep(interval)
                # Fresh health and use each beat; the frameworks are only needed at registration.
                report = describe_host(cluster, name, saved)
