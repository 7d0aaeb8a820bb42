"""`hetpool` — the command line. Every command except `up` and `admin` talks to the API."""

from __future__ import annotations

import sys
import time
import uuid
from functools import wraps
from pathlib import Path

import typer
from rich.markup import escape

from hetpool import __version__
from hetpool.cli import render
from hetpool.cli.config import load_config, save_config
from hetpool.cli.files import read_documents, read_single_task
from hetpool.cli.render import OutputFormat, console, emit_data, err_console, placements_text, plain, plan_report, recommend_report, table
from hetpool.client import ApiError, HetpoolClient
from hetpool.core.errors import HetpoolError
from hetpool.core.specs import resolve_kind
from hetpool.server.schemas.agent import NodeStatus
from hetpool.server.schemas.tasks import TaskResponse

app = typer.Typer(no_args_is_help=True, add_completion=False, help="hetpool: unified scheduling of heterogeneous compute.")
audit_app = typer.Typer(no_args_is_help=True, help="The audit trail.")
admin_app = typer.Typer(no_args_is_help=True, help="Local administration of a server's data directory.")
app.add_typer(audit_app, name="audit")
app.add_typer(admin_app, name="admin")

UrlOpt = typer.Option(None, "--url", envvar="HETPOOL_URL", help="server URL (default http://127.0.0.1:8080)")
TokenOpt = typer.Option(None, "--token", envvar="HETPOOL_TOKEN", help="API token")
OutOpt = typer.Option(OutputFormat.TABLE, "-o", "--output", help="table, wide (never truncated), json or yaml")
FileOpt = typer.Option(..., "-f", "--file", help="YAML file, directory or '-' for stdin")


def _client(url: str | None, token: str | None) -> HetpoolClient:
    cfg = load_config(url, token)
    return HetpoolClient(cfg.url, cfg.token)


def handles_errors(fn):
    """Turn API and spec errors into a message on stderr and exit code 1 (2 for bad input)."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            # escape: a message is text, not markup ("pip install 'hetpool[plot]'" would lose "[plot]")
            err_console.print(f"[red]error[/red] ({exc.status or 'no connection'} {exc.code}): {escape(exc.message)}")
            for detail in exc.details[:20]:
                err_console.print(f"  - {escape(str(detail.get('loc', '')))}: {escape(str(detail.get('msg', '')))}")
            raise typer.Exit(2 if exc.status in (400, 409, 413, 422) else 1) from None
        except HetpoolError as exc:
            err_console.print(f"[red]error[/red]: {escape(exc.message)}")
            for detail in exc.details[:20]:
                err_console.print(f"  - {escape(str(detail.get('loc', '')))}: {escape(str(detail.get('msg', '')))}")
            raise typer.Exit(2) from None

    return wrapper


@app.command()
def version() -> None:
    """Print the hetpool version."""
    print(__version__)


@app.command()
def up(
    demo: bool = typer.Option(False, "--demo", help="load the demo inventory from examples/demo"),
    data_dir: Path = typer.Option(None, "--data-dir", envvar="HETPOOL_DATA_DIR", help="default: ~/.hetpool"),
    host: str = typer.Option(None, "--host", envvar="HETPOOL_HOST", help="default: 127.0.0.1"),
    port: int = typer.Option(None, "--port", envvar="HETPOOL_PORT", help="default: 8080"),
    database_url: str = typer.Option("", "--database-url", envvar="HETPOOL_DATABASE_URL", help="default: SQLite in the data dir"),
    demo_dir: Path = typer.Option(Path("examples/demo"), "--demo-dir", help="inventory loaded by --demo"),
    workers: bool = typer.Option(None, "--workers/--no-workers", envvar="HETPOOL_RUN_WORKERS", help="run the scheduler, dispatcher and reconciler"),
    config: Path = typer.Option(None, "--config", envvar="HETPOOL_CONFIG", help="YAML settings file; HETPOOL_* and flags override it"),
    log_format: str = typer.Option(None, "--log-format", envvar="HETPOOL_LOG_FORMAT", help="text or json (one object per line)"),
    slurm_conf: str = typer.Option("", "--slurm-conf", envvar="HETPOOL_DEMO_SLURM_CONF", help="also import this Slurm cluster as 'hpc'"),
    ray_address: str = typer.Option("", "--ray-address", envvar="HETPOOL_DEMO_RAY_ADDRESS", help="also import this Ray head as 'ray-lab'"),
) -> None:
    """Start the server: API, scheduler, dispatcher and home page."""
    from hetpool.cli.serve import serve

    serve(
        demo=demo,
        data_dir=data_dir,
        host=host,
        port=port,
        database_url=database_url,
        demo_dir=demo_dir,
        workers=workers,
        slurm_conf=slurm_conf,
        ray_address=ray_address,
        config=config,
        log_format=log_format,
    )


@app.command()
@handles_errors
def login(url: str = typer.Argument(..., help="server URL"), token: str = typer.Option(..., "--token", prompt=True, hide_input=True)) -> None:
    """Check the token against the server and remember both (~/.config/hetpool/config.json, mode 600)."""
    with HetpoolClient(url, token) as client:
        client.whoami()  # works for every role (an auditor may not list clusters)
    path = save_config(url, token)
    console.print(f"logged in to {url}; saved to {path}")


@app.command()
@handles_errors
def apply(files: list[str] = FileOpt, url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutOpt) -> None:
    """Create or update objects from YAML (all or nothing); Task documents are submitted."""
    documents, sources = read_documents(files)
    with _client(url, token) as client:
        results = client.apply(documents, sources)
    if not emit_data(results, output):
        for r in results:
            suffix = f" ({r.id})" if r.id else ""
            console.print(f"{r.kind.lower()}/{r.name} {r.action}{suffix}")


@app.command()
@handles_errors
def get(
    kind: str = typer.Argument(..., help="tasks, clusters, nodes, pools, tenants, templates, devicemodels"),
    state: str = typer.Option(None, "--state", help="tasks only: filter by state"),
    tenant: str = typer.Option(None, "--tenant", help="tasks only: a tenant subtree"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutOpt,
) -> None:
    """List objects of a kind."""
    resolved = resolve_kind(kind)
    with _client(url, token) as client:
        items = client.list_tasks(state=state, tenant=tenant) if resolved == "Task" else client.list_objects(kind)
        status = {s.node: s for s in client.node_status()} if resolved == "Node" else {}
    if emit_data(items, output):
        return
    if resolved == "Task":
        table(
            ["ID", "NAME", "TENANT", "TYPE", "STATE", "PLACEMENT", "MESSAGE"],
            [[t.id, t.name, t.tenant, t.type, t.state, placements_text(t.placements), _task_message(t)] for t in items],
        )
    elif resolved == "DeviceModel":
        table(
            ["NAME", "CLASS", "VENDOR", "MEMORY GB", "BF16 TFLOPS", "RUNTIME"],
            [[m["name"], m["class"], m["vendor"], m["memory_gb"], m.get("bf16_tflops") or "-", m["runtime"]] for m in items],
        )
    elif resolved == "Node":
        table(
            ["NAME", "CLUSTER", "STATUS", "CPU", "MEMORY GB", "DEVICES", "DRIVER", "RUNTIME"],
            [
                [
                    n["name"],
                    n["cluster"],
                    _node_status_text(status.get(n["name"])),
                    n["cpu_cores"],
                    n["memory_gb"],
                    " ".join(f"{g['count']}x{g['model']}" for g in n["devices"]) or "-",
                    (n.get("stack") or {}).get("driver") or "-",
                    _runtime_text((n.get("stack") or {}).get("runtime")),
                ]
                for n in items
            ],
        )
    elif resolved == "Pool":
        table(
            ["NAME", "CLUSTER", "MODEL", "NODES", "PRICE/H", "SHAREABLE"],
            [[p["name"], p["cluster"], p["model"], len(p["nodes"]), p["price_per_hour"], p["shareable"]] for p in items],
        )
    elif resolved == "Cluster":
        table(
            ["NAME", "BACKEND", "ZONE", "REGION", "OWNER", "DESCRIPTION"],
            [
                [c["name"], c.get("backend", "-"), c.get("zone", "-"), c.get("region") or "-", c.get("owner") or "-", c.get("description", "")]
                for c in items
            ],
        )
    else:
        table(["NAME", "DESCRIPTION"], [[o["name"], o.get("description") or o.get("display_name", "")] for o in items])


def _node_status_text(status: NodeStatus | None) -> str:
    """ready / draining (reason) / offline …; "-" for a node nobody reports on."""
    if status is None:
        return "-"
    abnormal = [d["index"] for d in status.devices or [] if d.get("health") == "abnormal"]
    text = status.state + (f" ({status.reason[:40]})" if status.reason else "")
    return text + (f", abnormal devices {abnormal}" if abnormal else "")


def _task_message(task: TaskResponse) -> str:
    """The task's message, or for a queued task why it waits."""
    text = task.message or (task.pending or {}).get("summary") or ""
    return text if render.wide() else text[:80]


def _runtime_text(runtime: dict | None) -> str:
    return f"{runtime['name']} {runtime['version']}" if runtime else "-"


@app.command()
@handles_errors
def describe(
    kind: str, name: str, url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = typer.Option(OutputFormat.YAML, "-o", "--output")
) -> None:
    """Show one object in full (tasks: placement, explanation, timeline; pools: capability profile)."""
    resolved = resolve_kind(kind)
    with _client(url, token) as client:
        if resolved == "Task":
            data = client.get_task(name)
        elif resolved == "Pool":
            data = {"spec": client.get_object(kind, name), **plain(client.pool_profile(name))}
        elif resolved == "CompatibilityRule":  # the rows as they take effect, and the built-in rows they replace
            rows = client.compat_rows(origin=f"CompatibilityRule {name}")
            in_effect = [{"row": r.values, "source": r.source, "checked": r.checked, "replaces": r.replaces or ["nothing (a new row)"]} for r in rows]
            data = {**client.get_object(kind, name), "in_effect": in_effect}
        else:
            data = client.get_object(kind, name)
            if resolved == "Node" and not data.get("zone"):
                # The zone it is scheduled in: its cluster's, when it names none itself.
                cluster = client.get_object("cluster", data["cluster"])
                data = {**data, "zone": cluster.get("zone"), "zone_from": f"cluster {data['cluster']}"}
    emit_data(data, output if output != OutputFormat.TABLE else OutputFormat.YAML)


@app.command()
@handles_errors
def delete(kind: str, name: str, url: str = UrlOpt, token: str = TokenOpt) -> None:
    """Delete an object that nothing uses any more."""
    if resolve_kind(kind) == "Task":
        raise typer.BadParameter("tasks are not deleted; use `hetpool cancel ID`")
    with _client(url, token) as client:
        held = client.delete_object(kind, name)
    if held:  # an approval policy holds the delete: nothing is deleted until someone else approves
        console.print(f"{kind}/{name} held for approval ({held.id}); see `hetpool approvals get {held.id}`")
        return
    console.print(f"{kind}/{name} deleted")


@app.command()
@handles_errors
def submit(
    file: str = FileOpt,
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutOpt,
    idempotency_key: str = typer.Option("", "--idempotency-key", help="Reuse to make a repeated submit return the first task (default: random)"),
) -> None:
    """Submit a task; prints its id. A lost connection is retried once with the same Idempotency-Key, never creating two tasks."""
    task = read_single_task(file)
    with _client(url, token) as client:
        created = client.submit(task, idempotency_key=idempotency_key or f"cli-{uuid.uuid4()}")
    if not emit_data(created, output):
        print(created.id)


@app.command()
@handles_errors
def plan(
    file: str = FileOpt,
    goal: bool = typer.Option(False, "--goal", help="ranked options for the task's goal: device model × count × pool, start, completion, cost"),
    submit_option: int = typer.Option(None, "--submit", min=1, help="with --goal: submit option N (1 = the best) as an ordinary task"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutOpt,
) -> None:
    """Show where a task would run now, the fallback taken and why; commits nothing
    (with --goal: the ways to run its goal, best first; --submit N submits one)."""
    task = read_single_task(file)
    with _client(url, token) as client:
        if not goal:
            if submit_option is not None:
                raise typer.BadParameter("--submit needs --goal", param_hint="--submit")
            result = client.plan(task)
            if not emit_data(result, output):
                plan_report(result)
            return
        answer = client.recommend(task)
        if submit_option is None:
            if not emit_data(answer, output):
                recommend_report(answer)
            return
        if submit_option > len(answer.options):
            raise typer.BadParameter(f"there are {len(answer.options)} options", param_hint="--submit")
        created = client.submit(answer.options[submit_option - 1].task, idempotency_key=f"cli-{uuid.uuid4()}")
    if not emit_data(created, output):
        print(created.id)


@app.command()
@handles_errors
def logs(
    task_id: str,
    follow: bool = typer.Option(False, "-f", "--follow", help="keep printing until the task ends"),
    rank: int = typer.Option(None, "--rank", help="one worker (default: all, one after another)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
) -> None:
    """Print a task's output."""
    with _client(url, token) as client:
        task = client.get_task(task_id)
        ranks = [rank] if rank is not None else list(range(max(len(task.placements), 1)))
        offsets = dict.fromkeys(ranks, 0)
        done: set[int] = set()
        while True:
            for r in ranks:
                if r in done:
                    continue
                chunk = client.logs(task_id, rank=r, offset=offsets[r])
                if chunk.text:
                    prefix = f"[{r}] " if len(ranks) > 1 else ""
                    for line in chunk.text.splitlines(keepends=True):
                        sys.stdout.write(prefix + line)
                    sys.stdout.flush()
                offsets[r] = chunk.offset
                if chunk.complete:
                    done.add(r)
            if not follow or len(done) == len(ranks):
                break
            time.sleep(0.5)


@app.command()
@handles_errors
def cancel(task_id: str, url: str = UrlOpt, token: str = TokenOpt) -> None:
    """Cancel a task; running work is stopped on its backend."""
    with _client(url, token) as client:
        task = client.cancel(task_id)
    console.print(f"{task_id}: {'cancelling' if task.state in ('dispatched', 'running') else task.state}")


@admin_app.command("reset-token")
def admin_reset_token(
    data_dir: Path = typer.Option(None, "--data-dir", envvar="HETPOOL_DATA_DIR"),
    database_url: str = typer.Option("", "--database-url", envvar="HETPOOL_DATABASE_URL"),
) -> None:
    """Revoke the admin's tokens and print a new one (needs access to the database)."""
    from hetpool.server.db.session import Database
    from hetpool.server.services.auth import reset_admin_token
    from hetpool.server.settings import Settings

    settings = Settings(**{k: v for k, v in {"data_dir": data_dir, "database_url": database_url}.items() if v})
    db = Database(settings.resolved_database_url())
    db.migrate()
    from hetpool.core.clock import Clock

    with db.transaction() as session:
        token = reset_admin_token(session, Clock().now())
    print(token)


from hetpool.cli.sim_commands import register as _register_sim  # noqa: E402 (sim run, plan-capacity)

_register_sim(app)

from hetpool.cli.discover_command import register as _register_discover  # noqa: E402 (discover)

_register_discover(app)

from hetpool.cli.agent_command import register as _register_agent  # noqa: E402 (agent)

_register_agent(app)

from hetpool.cli.sync_command import register as _register_sync  # noqa: E402 (sync)

_register_sync(app)

from hetpool.cli.audit_command import register as _register_audit  # noqa: E402 (audit list, export, verify)

_register_audit(audit_app)

from hetpool.cli.quota_command import register as _register_quota  # noqa: E402 (quota usage)

_register_quota(app)

from hetpool.cli.approvals_command import register as _register_approvals  # noqa: E402 (approvals list, get, approve, reject)

_register_approvals(app)

from hetpool.cli.users_command import register as _register_users  # noqa: E402 (users, tokens, whoami)

_register_users(app)

from hetpool.cli.cost_command import register as _register_cost  # noqa: E402 (cost report, ledger, budgets)

_register_cost(app)

from hetpool.cli.compat_command import register as _register_compat  # noqa: E402 (compat check, matrix, rows)

_register_compat(app)

from hetpool.cli.db import register as _register_db  # noqa: E402 (db upgrade/current/backup/restore, config check)

_register_db(app)

if __name__ == "__main__":
    app()
