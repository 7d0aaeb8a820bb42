"""`hetpool sim run` and `hetpool plan-capacity`: the simulator from the command line.

Both run the real scheduler (`run_cycle`) on a virtual clock. Inputs come from files
(a JSONL trace, a directory of inventory YAML) or, for `plan-capacity --history`, from
the server: its task history and its inventory, through the HTTP API.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperCommand

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.cli.files import read_documents
from hetpool.cli.render import OutputFormat, console, emit_data, err_console, plain
from hetpool.core.errors import SpecError
from hetpool.core.interpreter import tuned_gc
from hetpool.core.inventory import ClusterSpec, DeviceModelSpec, NodeSpec, PoolSpec
from hetpool.core.specs import parse_documents
from hetpool.core.units import parse_duration
from hetpool.sim.capacity import change_inventory, parse_change, plan_capacity
from hetpool.sim.engine import SimConfig, Simulator
from hetpool.sim.report import plot, pyplot, summarize
from hetpool.sim.trace import parse_trace_line, read_trace

_COUNT = re.compile(r"\d+\s*[x*×]?", re.IGNORECASE)
SERVER_KINDS = ["devicemodels", "compatibilityrules", "tenants", "clusters", "nodes", "pools", "queues", "policies", "quotas"]


@dataclass
class SimInventory:
    clusters: list[ClusterSpec]
    nodes: list[NodeSpec]
    pools: list[PoolSpec]
    models: dict[str, DeviceModelSpec]
    config: SimConfig
    compat: CompatibilityKB  # the built-in tables with the inventory's CompatibilityRule rows


def collect(specs: list[BaseModel]) -> SimInventory:
    """Typed inventory for the simulator: models are the built-in catalog plus DeviceModel
    specs; tenants' weights, queues, quotas and the `default` scheduling policy go to SimConfig."""
    by_kind: dict[str, list] = {}
    for spec in specs:
        by_kind.setdefault(spec.kind, []).append(spec)
    catalog = DeviceCatalog.builtin().with_models(by_kind.get("DeviceModel", []))
    policies = {p.name: p for p in by_kind.get("SchedulingPolicy", [])}
    config = SimConfig(
        policy=policies.get("default"),
        queues=by_kind.get("Queue", []),
        tenant_weights={t.name: t.weight for t in by_kind.get("Tenant", [])},
        quotas=by_kind.get("Quota", []),
    )
    rules = sorted(by_kind.get("CompatibilityRule", []), key=lambda r: r.name)
    compat = CompatibilityKB.builtin().with_rows([row for rule in rules for row in rule.parsed_rows()]) if rules else CompatibilityKB.builtin()
    models = {m.name: m for m in catalog.all()}
    return SimInventory(by_kind.get("Cluster", []), by_kind.get("Node", []), by_kind.get("Pool", []), models, config, compat)


def offline_inventory(path: Path) -> SimInventory:
    documents, sources = read_documents([str(path)])
    specs = parse_documents([(s, d) for s, d in zip(sources, documents, strict=True) if isinstance(d, dict) and d.get("kind") != "Task"])
    inventory = collect(specs)
    if not inventory.pools:
        raise SpecError(f"{path}: no Pool documents; the simulator needs an inventory (clusters, nodes, pools)")
    return inventory


def server_inventory(client) -> SimInventory:
    documents = [(f"{kind}[{i}]", doc) for kind in SERVER_KINDS for i, doc in enumerate(client.list_objects(kind))]
    return collect(parse_documents(documents))


def join_change_args(args: list[str]) -> list[str]:
    """`--add 16x ascend-910b2` (two words, unquoted) → `--add '16x ascend-910b2'`; also
    `--add 16 x ascend-910b2`. Anything else is left for the parser (and parse_change)."""
    out, i = [], 0
    while i < len(args):
        out.append(args[i])
        i += 1
        if out[-1] in ("--add", "--remove") and i + 1 < len(args) and _COUNT.fullmatch(args[i]):
            words = 3 if args[i + 1].lower() in ("x", "*", "×") and i + 2 < len(args) else 2
            if not args[i + words - 1].startswith("-"):
                out.append(" ".join(args[i : i + words]))
                i += words
    return out


class ChangeArgsCommand(TyperCommand):
    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, join_change_args(list(args)))


def history_days(text: str) -> float:
    """'30d', '12h', '2d12h' or a bare number of days."""
    try:
        days = float(text) if re.fullmatch(r"\s*\d+(\.\d+)?\s*", text) else parse_duration(text) / 86400
    except ValueError as exc:
        raise SpecError(f"--history {text!r}: {exc}") from None
    if days <= 0:
        raise SpecError(f"--history {text!r}: must be more than zero, e.g. '30d'")
    return days


def parse_quotas(values: list[str]) -> dict[str, float] | None:
    quotas = {}
    for value in values:
        team, sep, devices = value.partition("=")
        try:
            quotas[team.strip()] = float(devices)
        except ValueError:
            sep = ""
        if not sep or not team.strip():
            raise SpecError(f"--quota {value!r}: expected TEAM=DEVICES, e.g. 'ai-lab/nlp=16'")
    return quotas or None


class SimProgress:
    """A Rich progress bar per run on stderr (tasks arrived, virtual clock); off when quiet."""

    def __init__(self, labels: list[str], total: int, quiet: bool) -> None:
        self.bar = Progress(
            TextColumn("{task.description:<9}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("arrived · virtual clock {task.fields[clock]}"),
            TimeElapsedColumn(),
            console=err_console,
            disable=quiet,
        )
        self.ids = {label: self.bar.add_task(label, total=total, clock="0.0 h") for label in labels}
        self.last: str | None = None

    def __enter__(self) -> SimProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for task_id in self.ids.values():
            self.bar.update(task_id, completed=self.bar.tasks[task_id].total)
        self.bar.__exit__(*exc)

    def __call__(self, label: str, now: float, arrived: int, total: int) -> None:
        if self.last and self.last != label:
            self.bar.update(self.ids[self.last], completed=total)
        self.last = label
        self.bar.update(self.ids[label], completed=arrived, clock=f"{now / 3600:.1f} h")


def _num(value, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def _delta(pair: dict, fmt: str = "{:+.2f}") -> str:
    return "-" if pair["delta"] is None else fmt.format(pair["delta"])


def summary_table(summary: dict, out: Console = console) -> None:
    overview = Table(title="simulation", header_style="bold")
    for col in ("TASKS", "COMPLETED", "NEVER STARTED", "AVG WAIT H", "P90 WAIT H", "AVG JCT H", "MAKESPAN H", "PREEMPTIONS", "COST"):
        overview.add_column(col)
    w = summary["wait_hours"]
    overview.add_row(
        *map(str, (summary["tasks"], summary["completed"], summary["never_started"])),
        _num(w["avg"]),
        _num(w["p90"]),
        _num(summary["avg_jct_hours"]),
        _num(summary["makespan_hours"]),
        str(summary["preemptions"]),
        _num(summary["cost"]),
    )
    out.print(overview)
    pools = Table(title="per pool", header_style="bold")
    for col in ("POOL", "TASKS", "UTILISATION", "AVG WAIT H", "P90 WAIT H", "COST"):
        pools.add_column(col)
    for pool, util in sorted(summary["utilisation"].items()):
        group = summary["per_pool"].get(pool)
        wait = group["wait_hours"] if group else {"avg": None, "p90": None}
        pools.add_row(pool, str(group["tasks"] if group else 0), f"{util:.0%}", _num(wait["avg"]), _num(wait["p90"]), _num(group and group["cost"]))
    out.print(pools)


def comparison_table(report: dict, out: Console = console) -> None:
    delta, devices = report["delta"], report["changes"]["devices"]
    t = Table(title="baseline vs changed", header_style="bold")
    for col in ("METRIC", "BASELINE", "CHANGED", "Δ"):
        t.add_column(col, justify="left" if col == "METRIC" else "right")
    for model in sorted(set(devices["baseline"]) | set(devices["changed"])):
        before, after = devices["baseline"].get(model, 0), devices["changed"].get(model, 0)
        if before != after:
            t.add_row(f"devices {model}", str(before), str(after), f"{after - before:+d}")
    for key, label, fmt, dfmt in [
        ("avg_wait_hours", "avg wait (h)", "{:.3g}", "{:+.3g}"),
        ("p90_wait_hours", "p90 wait (h)", "{:.3g}", "{:+.3g}"),
        ("avg_jct_hours", "avg JCT (h)", "{:.3g}", "{:+.3g}"),
        ("makespan_hours", "makespan (h)", "{:.3g}", "{:+.3g}"),
        ("never_started", "never started", "{:d}", "{:+d}"),
        ("cost", "total cost", "{:.2f}", "{:+.2f}"),
    ]:
        pair = delta[key]
        t.add_row(label, _num(pair["baseline"], fmt), _num(pair["changed"], fmt), _delta(pair, dfmt))
    t.add_section()
    for pool, pair in delta["utilisation"].items():
        t.add_row(f"utilisation {pool}", _num(pair["baseline"], "{:.0%}"), _num(pair["changed"], "{:.0%}"), _delta(pair, "{:+.0%}"))
    t.add_section()
    for team, pair in delta["cost_per_team"].items():
        t.add_row(f"cost {team}", _num(pair["baseline"]), _num(pair["changed"]), _delta(pair))
    out.print(t)
    recs = Table(title="recommendations (from the baseline)", header_style="bold")
    for col in ("KIND", "NAME", "METRIC", "DETAIL"):
        recs.add_column(col)
    for r in report["recommendations"]:
        recs.add_row(r["kind"], r["name"], _num(r["metric"], "{:.4g}"), r["detail"])
    if not report["recommendations"]:
        recs.add_row("-", "-", "-", "no saturated or idle pools, no team over quota")
    out.print(recs)


def register(app: typer.Typer) -> None:
    """Add `sim run` and `plan-capacity` to the CLI (called at the end of cli/main.py)."""
    from hetpool.cli import main as cli  # here, not at the top: main imports this module

    sim_app = typer.Typer(no_args_is_help=True, help="Simulation: replay a trace through the real scheduler on a virtual clock.")
    app.add_typer(sim_app, name="sim")

    @sim_app.command("run")
    @cli.handles_errors
    def sim_run(
        trace: Path = typer.Option(..., "--trace", help="JSONL trace (hetpool.sim.trace format)"),
        inventory: Path = typer.Option(..., "--inventory", help="directory (or file) of inventory YAML"),
        out: Path = typer.Option(None, "--out", help="write utilisation.png, queue.png and summary.json here"),
        output: OutputFormat = cli.OutOpt,
    ) -> None:
        """Replay a trace on an inventory offline and summarise waits, JCT, utilisation and cost."""
        if out is not None:
            pyplot()  # matplotlib is an extra: say so before simulating, not after
        inv = offline_inventory(inventory)
        tasks = read_trace(trace)
        sim = Simulator(inv.clusters, inv.nodes, inv.pools, inv.models, inv.compat.check, inv.config)
        with tuned_gc(), SimProgress(["simulate"], len(tasks), quiet=output != OutputFormat.TABLE) as bar:
            result = sim.run(tasks, progress=lambda now, arrived, total: bar("simulate", now, arrived, total))
        summary = summarize(result)
        if out is not None:
            summary["files"] = [str(p) for p in plot(result, out, title=trace.stem)]
            (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
        if not emit_data(summary, output):
            summary_table(summary)
            if out is not None:
                console.print(f"plots and summary.json written to {out}")

    @app.command("plan-capacity", cls=ChangeArgsCommand)
    @cli.handles_errors
    def plan_capacity_cmd(
        add: list[str] = typer.Option([], "--add", help="devices to add, e.g. '16x ascend-910b2' (repeatable)"),
        remove: list[str] = typer.Option([], "--remove", help="devices to remove (whole nodes), e.g. '8x nvidia-a100-80g'"),
        history: str = typer.Option(None, "--history", help="replay the server's finished tasks of this period, e.g. 30d"),
        trace: Path = typer.Option(None, "--trace", help="replay this JSONL trace instead"),
        inventory: Path = typer.Option(None, "--inventory", help="inventory YAML directory (default: the server's inventory)"),
        out: Path = typer.Option(Path("capacity-report"), "--out", help="plots (baseline/, changed/) and report.json"),
        wait_target: float = typer.Option(1.0, "--wait-target", help="hours; a pool whose p90 wait exceeds it is saturated"),
        idle_below: float = typer.Option(0.3, "--idle-below", help="utilisation under which a pool is idle (0-1)"),
        quota: list[str] = typer.Option([], "--quota", help="TEAM=DEVICES, flags teams demanding more on average"),
        url: str = cli.UrlOpt,
        token: str = cli.TokenOpt,
        output: OutputFormat = cli.OutOpt,
    ) -> None:
        """What if: replay history (or a trace) on today's inventory and on a changed one."""
        adds = [parse_change(v, "--add") for v in add]
        removes = [parse_change(v, "--remove") for v in remove]
        quotas = parse_quotas(quota)
        if (history is None) == (trace is None):
            raise SpecError("give exactly one of --history (e.g. 30d) and --trace FILE")
        pyplot()  # the report's plots need matplotlib (an extra): say so before simulating
        lines = None
        if history is not None or inventory is None:
            with cli._client(url, token) as client:
                inv = server_inventory(client) if inventory is None else offline_inventory(inventory)
                # Trace lines are parsed below as from a trace file: their JSON form.
                lines = plain(client.history_trace(history_days(history))) if history is not None else None
        else:
            inv = offline_inventory(inventory)
        change_inventory(inv.nodes, inv.pools, inv.models, adds, removes)  # bad models / counts: fail before simulating
        tasks = read_trace(trace) if lines is None else [parse_trace_line(r, f"history[{i}]") for i, r in enumerate(lines)]
        if not tasks:
            raise SpecError("the trace is empty: no finished tasks in that period" if history else f"{trace}: no tasks")
        with SimProgress(["baseline", "changed"], len(tasks), quiet=output != OutputFormat.TABLE) as bar:
            report = plan_capacity(
                inv.clusters, inv.nodes, inv.pools, inv.models, inv.compat.check, tasks, adds, removes,
                wait_target_h=wait_target, idle_below=idle_below, quotas=quotas, progress=bar, config=inv.config,
            )  # fmt: skip
        data = {"source": f"history {history}" if history else str(trace), **report}
        data["files"] = write_report(report, data, out)
        if not emit_data(data, output):
            comparison_table(data)
            console.print(f"{len(tasks)} tasks replayed; plots and report.json written to {out}")


def write_report(report, data: dict, out: Path) -> list[str]:
    files = [str(p) for p in plot(report.baseline_result, out / "baseline", title="baseline")]
    files += [str(p) for p in plot(report.changed_result, out / "changed", title="changed")]
    files.append(str(out / "report.json"))
    (out / "report.json").write_text(json.dumps({**data, "files": files}, indent=2, ensure_ascii=False))
    return files
