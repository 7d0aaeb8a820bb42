"""`hetpool up`: migrate, create the admin token once, load the demo, serve."""

from __future__ import annotations

import os
from pathlib import Path

import uvicorn
from rich.console import Console

from hetpool.cli.files import read_documents
from hetpool.core import interpreter
from hetpool.core.specs import parse_documents
from hetpool.server import tracing
from hetpool.server.app import create_app, make_context
from hetpool.server.config_file import ConfigError, load_settings
from hetpool.server.logging_setup import configure_logging
from hetpool.server.services import auth
from hetpool.server.services.inventory import apply_specs, load_inventory

console = Console(stderr=True, soft_wrap=True)  # keep the token on one line


def load_demo(ctx, demo_dir: Path) -> int:
    """Apply the demo inventory if the catalog is still empty; returns objects applied."""
    if not demo_dir.is_dir():
        raise SystemExit(f"--demo: {demo_dir} is not a directory (run from the repository root or pass --demo-dir)")
    documents, sources = read_documents([str(demo_dir)])
    specs = parse_documents([(s, d) for s, d in zip(sources, documents, strict=True) if d.get("kind") != "Task"])
    with ctx.db.transaction() as session:
        if load_inventory(ctx, session).clusters:
            return 0
        return len(apply_specs(ctx, session, specs, actor="system"))


def engine_clusters(slurm_conf: str, ray_address: str) -> list[dict]:
    """Cluster documents for the demo's Slurm cluster and Ray head (deploy/slurm.sh, deploy/ray.sh)."""
    docs = []
    if slurm_conf:
        config = {"conf": slurm_conf, "gres_models": "gpu:a100=nvidia-a100-80g", "sync_interval_s": "10"}
        # Jobs run as hetpool-task (deploy/slurm-accounts.sh), which cannot enter the server's
        # private data dir: their directories live beside deploy/slurm.sh's cluster instead.
        config["jobs_dir"] = str(Path(slurm_conf).parent / "hetpool-jobs")
        docs.append({"kind": "Cluster", "name": "hpc", "backend": "slurm", "zone": "hpc", "backend_config": config})
    if ray_address:
        config = {"address": ray_address, "sync_interval_s": "10"}
        docs.append({"kind": "Cluster", "name": "ray-lab", "backend": "ray", "zone": "ray", "backend_config": config})
    return docs


def load_engines(ctx, slurm_conf: str, ray_address: str) -> list[str]:
    """Apply the engines' clusters and sync them once, so their nodes and pools are there at start."""
    from hetpool.server.services.connector_sync import sync_cluster

    docs = engine_clusters(slurm_conf, ray_address)
    with ctx.db.transaction() as session:
        apply_specs(ctx, session, parse_documents([(f"engine {i}", d) for i, d in enumerate(docs)]), actor="system")
    lines = []
    for doc in docs:
        summary = sync_cluster(ctx, doc["name"])
        lines.append(f"{doc['name']} ({doc['backend']}): {summary['nodes']} nodes, pools {sorted(summary['devices']) or ['cpu']}")
    return lines


def serve(
    *,
    demo: bool,
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    database_url: str,
    demo_dir: Path,
    workers: bool | None,
    slurm_conf: str = "",
    ray_address: str = "",
    config: Path | None = None,
    log_format: str | None = None,
) -> None:
    # Whatever the server creates (database, keys, task records) is its own: tasks run as
    # other users. The local backend sets modes explicitly where others need access.
    os.umask(0o077)
    # Flags left unset (None) fall back to the environment, then the config file (config_file.py).
    overrides = {"host": host, "port": port, "run_workers": workers, "data_dir": data_dir, "database_url": database_url or None}
    overrides["log_format"] = log_format
    try:
        settings = load_settings(config, overrides)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    configure_logging(settings.log_format, settings.log_level)
    try:
        tracing.configure(settings.tracing)  # off by default; spans per task (docs/operations-tracing.md)
    except tracing.TracingUnavailableError as exc:
        raise SystemExit(f"error: {exc}") from None
    host, port = settings.host, settings.port
    try:
        ctx = make_context(settings)
    except ConfigError as exc:  # an unsafe or missing audit key file (services/audit_anchor.py)
        raise SystemExit(f"error: {exc}") from None
    with ctx.db.transaction() as session:
        token = auth.ensure_admin(session, ctx.clock.now())
    url = f"http://{host}:{port}"
    if token:
        console.print("[bold]Admin API token (shown once; only its hash is stored):[/bold]")
        console.print(f"  {token}")
        console.print(f"Use it:  hetpool login {url} --token {token}")
        console.print("         (or export HETPOOL_TOKEN=...; lost it? `hetpool admin reset-token`)")
    if demo:
        applied = load_demo(ctx, demo_dir)
        console.print(f"demo inventory: {applied} objects applied from {demo_dir}" if applied else "demo inventory already present")
    if slurm_conf or ray_address:
        for line in load_engines(ctx, slurm_conf, ray_address):
            console.print(f"engine cluster {line}")
    console.print(f"hetpool {settings.data_dir} · database {ctx.db.dialect} · serving on {url}")
    interpreter.tune_for_server()  # fewer collections, sooner thread switches: one interpreter lock for all
    # log_config=None: uvicorn's loggers go through configure_logging's handler (JSON or text).
    uvicorn.run(create_app(settings, ctx), host=host, port=port, log_level="warning", log_config=None)
