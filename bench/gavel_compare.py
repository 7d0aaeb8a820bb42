"""hetpool vs Gavel on Gavel's own traces: the real scheduler, in the discrete-event simulator.

Loads a Gavel trace and throughput table (/work/shared/bench/gavel), builds Gavel's
cluster (one GPU per node), runs `Simulator` — every decision comes from `run_cycle` — and
prints avg / p50 / p90 JCT, makespan and jobs done next to Gavel's max_min_fairness_perf
figures for the same trace (GAVEL_RESULTS.tsv).

    python bench/gavel_compare.py --trace static_n100_s0 --cluster 12:12:12 -o json
    python bench/gavel_compare.py --all

The scheduler knows only what the importer puts in each task: its job type, scale factor
(gang size), the per-model speeds (`relative_performance`, from the throughput table) and
a runtime estimate: `--estimates exact` (total steps / reference speed: the true runtime,
an oracle), `noisy` (true × exp(N(0, 0.5²)) per job, `--seed`) or `none`. In noisy and
none, the true durations are NaN in every task the simulator gets; it reads them only
through `truth`. Everything below is an operator's choice — policy settings and how the
script shapes each task — not a change to hetpool; the defaults were chosen on another
trace (bench/gavel_tune.py). Jobs declare a checkpoint and one queue moves them to faster
idle devices every 6 minutes (Gavel's round); Gavel time-slices and migrates for free,
hetpool pays a reload per resume. bench/gavel_table.py puts the results beside every Gavel policy.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec
from hetpool.core.policy import ClassRule, MigrationRule, QueueSpec, SchedulingPolicySpec
from hetpool.core.specs import parse_documents
from hetpool.sim.engine import SimConfig, Simulator
from hetpool.sim.importers.gavel import gavel_device_models, gavel_inventory, load_throughputs, model_name, read_gavel_trace
from hetpool.sim.report import summarize
from hetpool.sim.trace import TraceTask

GAVEL = Path("/work/shared/bench/gavel")
RESULTS = Path(__file__).parent / "results"
TRACES = ["static_n100_s0", "cont_n300_lam400_s1", "cont_multi_n200_lam600_s0", "max_min_fairness"]
GAVEL_POLICY = "max_min_fairness_perf"
PRIORITIES = ("critical", "high", "normal", "low")


def gavel_figures(trace_name: str, policy: str = GAVEL_POLICY, path: Path = GAVEL / "GAVEL_RESULTS.tsv") -> dict | None:
    with open(path, encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row["trace"] == f"{trace_name}.trace" and row["policy"] == policy:
                return {
                    "policy": policy,
                    "avg_jct_hours": float(row["avg_jct_h"]),
                    "makespan_hours": float(row["makespan_h"]),
                    "jobs_completed": int(row["jobs_done"]),
                }
    return None


def best_hours(task: TraceTask) -> float:
    """The job's estimated runtime on its fastest device (what the scheduler can know)."""
    return task.spec.runtime_estimate_s / max(task.spec.relative_performance.values()) / 3600


def typical_speeds(throughputs: dict) -> dict[str, float]:
    """Each worker type's median speed relative to the v100 over the whole table (job-independent)."""
    ratios: dict[str, list[float]] = {}
    for speeds in throughputs.values():
        for worker, value in speeds.items():
            if speeds.get("v100"):
                ratios.setdefault(model_name(worker), []).append(value / speeds["v100"])
    return {m: max(float(np.median(r)), 1e-3) for m, r in ratios.items()}


def with_estimates(tasks: list[TraceTask], mode: str, seed: int) -> list[TraceTask]:
    """The tasks as the scheduler gets them: `exact` keeps the importer's runtime estimate
    (the true runtime on the reference device: an oracle no real user has); `noisy` makes it
    true × exp(N(0, 0.5²)), one draw per job; `none` gives no estimate. In `noisy` and `none`
    the true durations are replaced by NaN in what the simulator is handed: they reach it
    only through `truth` (see run_trace), never through a task."""
    if mode == "exact":
        return tasks
    rng = np.random.default_rng(seed)
    out = []
    for task in tasks:
        spec = task.spec
        estimate = None
        if mode == "noisy":
            estimate = f"{max(spec.runtime_estimate_s * float(np.exp(rng.normal(0.0, 0.5))), 1.0):.0f}s"
        sealed = {model: float("nan") for model in task.work_s}
        out.append(TraceTask(task.id, task.arrival_s, spec.with_runtime_estimate(estimate), float("nan"), sealed))
    return out


def shape(tasks: list[TraceTask], args: argparse.Namespace, typical: dict[str, float]) -> list[TraceTask]:
    """Operator-side task shaping: candidate list, tenant and priority per job.

    Candidates are ordered by the job's speed on each model, or (`--advantage` a > 0) by
    speed / typical speed**a: a job that is unusually good on a slow model prefers it.
    """
    out = []
    for task in tasks:
        spec, update = task.spec, {}
        perf = spec.relative_performance
        ranked = sorted(spec.any_of, key=lambda m: -perf[m] / typical.get(m, 1.0) ** args.advantage)
        fastest = max(perf.values())
        if args.prune > 0:  # leave out devices slower than `prune` × the job's best
            ranked = [m for m in ranked if perf[m] >= args.prune * fastest]
        if args.shape == "fallback":
            update |= {"fallback": ranked, "any_of": []}
        else:
            update |= {"any_of": ranked}
        if args.tenants == "per-job":
            update["tenant"] = f"gavel/jobs/{task.id}"
        elif args.tenants == "per-type":
            update["tenant"] = "gavel/jobs/" + "".join(c if c.isalnum() else "-" for c in spec.description.lower()).strip("-")[:40]
        if args.checkpoint:
            # Every Gavel job is training, and training checkpoints: SIGTERM, a minute to write it.
            update["checkpoint"] = {"signal": "SIGTERM", "grace": f"{args.checkpoint_grace:g}s", "resume": True}
        if args.sjf and spec.runtime_estimate_s is not None:
            hours = best_hours(task) * (spec.workers if args.sjf_by == "device-hours" else 1)
            level = sum(hours > limit for limit in args.sjf)
            level = len(args.sjf) - level if args.longest_first else level
            update["priority"] = PRIORITIES[min(level, len(PRIORITIES) - 1)]
        document = spec.model_dump(mode="json", by_alias=True) | {k: v for k, v in update.items() if k != "any_of"}
        document["any_of"] = update.get("any_of", [])
        new = type(spec).model_validate(document)
        out.append(TraceTask(task.id, task.arrival_s, new, task.reference_s, task.work_s))
    return out


def queues_of(args: argparse.Namespace) -> list[QueueSpec]:
    """One queue for the whole trace, ordered by `--ordering`; with --migration, its rule
    moves checkpointed jobs to faster devices at Gavel's round length."""
    rule = None
    if args.migration:
        rule = MigrationRule(round=f"{args.round_s:g}s", overhead=f"{args.migration_overhead:g}s", min_gain=args.min_gain)
    if rule is None and args.ordering == "priority-fairshare":
        return []
    return [QueueSpec(name="gavel", ordering=args.ordering, migration=rule)]


def policy_of(args: argparse.Namespace) -> SchedulingPolicySpec:
    rule = ClassRule(preemption=args.preemption, backfill=not args.no_backfill)
    return SchedulingPolicySpec(classes={"gpu": rule}, aging_per_hour=args.aging, wait_for_preferred=args.wait_for_preferred)


def run_trace(trace_path: Path, args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    v100, p100, k80 = (int(x) for x in args.cluster.split(":"))
    documents = gavel_inventory(v100, p100, k80)
    specs = parse_documents([(f"gavel[{i}]", d) for i, d in enumerate(documents)])
    catalog = DeviceCatalog.builtin().with_models(gavel_device_models())
    models = {m.name: m for m in catalog}
    kb = CompatibilityKB.builtin()
    throughputs = load_throughputs(args.throughputs)
    imported = read_gavel_trace(trace_path, throughputs)
    real = {t.id: t for t in imported}  # the true durations: the simulated world's, read through `truth` only
    trace = shape(with_estimates(imported, args.estimates, args.seed), args, typical_speeds(throughputs))
    policy = policy_of(args)
    sim = Simulator(
        [s for s in specs if isinstance(s, ClusterSpec)],
        [s for s in specs if isinstance(s, NodeSpec)],
        [s for s in specs if isinstance(s, PoolSpec)],
        models,
        kb.check,
        SimConfig(
            policy=policy, queues=queues_of(args), min_cycle_interval_s=args.cycle_s, sample_every_s=60.0, resume_overhead_s=args.resume_overhead
        ),
    )
    result = sim.run(trace, truth=lambda task, model: real[task.id].actual_seconds(model))
    s = summarize(result)
    name = trace_path.name.removesuffix(".trace")
    return {
        "trace": name,
        "cluster": args.cluster,
        "jobs": s["tasks"],
        "jobs_completed": s["completed"],
        "avg_jct_hours": s["avg_jct_hours"],
        "p50_jct_hours": s["jct_hours"]["p50"],
        "p90_jct_hours": s["jct_hours"]["p90"],
        "makespan_hours": s["makespan_hours"],
        "avg_wait_hours": s["wait_hours"]["avg"],
        "preemptions": s["preemptions"],
        "migrations": sum(o.migrations for o in result.outcomes.values()),
        "estimates": args.estimates,
        "seed": args.seed,
        "fallbacks": s["fallbacks"],
        "utilisation": s["utilisation"],
        "cycles": s["cycles"],
        "scheduler_seconds": s["scheduler_seconds"],
        "wall_seconds": round(time.perf_counter() - started, 2),
        "policy": policy.model_dump(mode="json", exclude_defaults=False),
        "shaping": {
            "candidates": args.shape,
            "advantage": args.advantage,
            "prune_below": args.prune,
            "tenants": args.tenants,
            "sjf_hours": args.sjf,
            "sjf_by": args.sjf_by,
            "longest_first": args.longest_first,
            "min_cycle_interval_s": args.cycle_s,
        },
        "gavel": gavel_figures(name),
    }


def resolve(trace: str) -> Path:
    path = Path(trace)
    if path.exists():
        return path
    return GAVEL / "traces" / (trace if trace.endswith(".trace") else f"{trace}.trace")


def goals(r: dict) -> dict:
    g = r.get("gavel")
    if not g:
        return {}
    return {
        "avg_jct_vs_gavel": round(r["avg_jct_hours"] / g["avg_jct_hours"], 3),
        "makespan_vs_gavel": round(r["makespan_hours"] / g["makespan_hours"], 3),
        "avg_jct_at_or_below_gavel": r["avg_jct_hours"] <= g["avg_jct_hours"],
        "makespan_within_5pct": r["makespan_hours"] <= 1.05 * g["makespan_hours"],
        "all_jobs_done": r["jobs_completed"] == r["jobs"],
    }


def table(rows: list[dict]) -> str:
    head = f"{'trace':28} {'hetpool JCT h':>13} {'Gavel JCT h':>11} {'hetpool mksp h':>14} {'Gavel mksp h':>12}"
    head += f" {'done':>9} {'Gavel done':>10} {'wall s':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        g = r["gavel"] or {}
        lines.append(
            f"{r['trace']:28} {r['avg_jct_hours']:13.2f} {g.get('avg_jct_hours', float('nan')):11.2f} {r['makespan_hours']:14.2f} "
            f"{g.get('makespan_hours', float('nan')):12.2f} {r['jobs_completed']:>4}/{r['jobs']:<4} "
            f"{g.get('jobs_completed', 0):>10} {r['wall_seconds']:7.1f}"
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", help="a .trace file or a name under /work/shared/bench/gavel/traces")
    ap.add_argument("--throughputs", type=Path, default=GAVEL / "simulation_throughputs.json")
    ap.add_argument("--cluster", default="12:12:12", help="v100:p100:k80 GPUs (one per node)")
    ap.add_argument("--all", action="store_true", help=f"run {', '.join(TRACES)} and print a table")
    ap.add_argument("-o", "--output", choices=["json", "table"], default="table")
    ap.add_argument("--results", type=Path, default=RESULTS)
    # Operator choices (defaults: the best configuration found; see the report).
    ap.add_argument("--shape", choices=["any_of", "fallback"], default="fallback", help="devices as a set, or ordered by the job's speed")
    ap.add_argument("--advantage", type=float, default=0.0, help="order candidates by speed / typical speed ** this (0: by speed)")
    ap.add_argument("--prune", type=float, default=0.0, help="leave out devices slower than this fraction of the job's best")
    ap.add_argument("--tenants", choices=["shared", "per-job", "per-type"], default="shared")
    ap.add_argument(
        "--sjf",
        type=lambda s: [float(x) for x in s.split(",") if x],
        default=[3.0, 6.0],  # chosen on the tuning trace (bench/gavel_tune.py), not on the four compared
        help="hour limits for priority buckets (critical, high, normal, low)",
    )
    ap.add_argument("--ordering", choices=["priority-fairshare", "shortest-first", "fifo"], default="shortest-first", help="the queue's ordering (chosen on the tuning trace)")
    ap.add_argument("--sjf-by", choices=["hours", "device-hours"], default="hours")
    ap.add_argument("--longest-first", action="store_true", help="reverse the buckets: longest jobs get the highest priority")
    ap.add_argument("--aging", type=float, default=2.0, help="chosen on the tuning trace (bench/gavel_tune.py)")
    ap.add_argument("--preemption", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--wait-for-preferred", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--no-backfill", action="store_true")
    ap.add_argument("--cycle-s", type=float, default=0.0, help="minimum seconds between cycles (0: after every event batch)")
    ap.add_argument("--estimates", choices=["exact", "noisy", "none"], default="exact", help="what runtime estimates the scheduler gets")
    ap.add_argument("--seed", type=int, default=0, help="the noise draw of --estimates noisy")
    ap.add_argument("--checkpoint", action=argparse.BooleanOptionalAction, default=True, help="jobs declare a checkpoint (resume keeps progress)")
    ap.add_argument("--checkpoint-grace", type=float, default=60.0)
    ap.add_argument("--resume-overhead", type=float, default=60.0, help="seconds a resumed job spends reloading its checkpoint")
    ap.add_argument("--migration", action=argparse.BooleanOptionalAction, default=True, help="move checkpointed jobs to faster idle devices")
    ap.add_argument("--round-s", type=float, default=360.0, help="migration round (Gavel's: 360 s)")
    ap.add_argument("--migration-overhead", type=float, default=60.0)
    ap.add_argument("--min-gain", type=float, default=0.05, help="chosen on the tuning trace (bench/gavel_tune.py)")
    return ap


def parse_args(argv: list[str]) -> argparse.Namespace:
    return parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if not args.all and not args.trace:
        ap.error("give --trace or --all")
    args.results.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in TRACES if args.all else [args.trace]:
        row = run_trace(resolve(name), args)
        row["goals"] = goals(row)
        (args.results / f"gavel_{row['trace']}.json").write_text(json.dumps(row, indent=2) + "\n")
        rows.append(row)
        if args.all and args.output == "table":
            print(
                f"{row['trace']}: JCT {row['avg_jct_hours']:.2f} h, makespan {row['makespan_hours']:.2f} h, {row['wall_seconds']:.1f} s", flush=True
            )
    if args.all:
        (args.results / "gavel_summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    if args.output == "json":
        print(json.dumps(rows if args.all else rows[0], indent=2))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
