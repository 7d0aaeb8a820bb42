"""The scheduler worker's whole pass at estate scale, on a real database.

    python bench/server_pass.py [--nodes 1000] [--tasks 10000] [--database-url URL] -o json

bench/scheduler_throughput.py times `run_cycle` alone. A user's task goes through more:
the scheduler worker's pass (`schedule_once`) reads the queued rows (through the queue
cache), resolves their specs, reads every running task and its placements and learned
runtimes from the database, runs the cycle, then writes admissions, preemption requests
and changed explanations. This benchmark runs exactly that function on a database seeded
through the services users reach (inventory applied as `hetpool apply` does, tasks
submitted as the API does), with the honest mix of estate_mix.py: a quota per team with
borrowing, four queues, topology, slices, thousands of shapes.

1. prefill: tasks are submitted and scheduled until --running-share of the accelerators
   run work; those tasks are then marked running with start times in the past;
2. drain: --tasks more are submitted; passes run until one admits nothing; after each
   pass the admitted work is dispatched and starts running, as the dispatcher would;
3. steady: --steady-passes passes, each --steady-step seconds later: running work whose
   (true) end has come succeeds, --arrivals new tasks are submitted.

Each pass is split into `load` (the database read and spec resolution, `load_cycle`),
`core` (`run_cycle`) and `rest` (the queue scan and the writes). `placements_per_s` =
admissions ÷ summed pass time. Prints and saves bench/results/server_pass.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).parent))

from estate_mix import ORGS, TEAMS, honest_documents, honest_queues, inventory, team_quotas, tenant_of  # noqa: E402

from hetpool.core.clock import FixedClock  # noqa: E402
from hetpool.core.errors import HetpoolError  # noqa: E402
from hetpool.core.interpreter import tuned_gc  # noqa: E402
from hetpool.core.specs import parse_spec  # noqa: E402
from hetpool.core.states import TaskState  # noqa: E402
from hetpool.core.tenancy import TenantSpec  # noqa: E402
from hetpool.core.units import parse_duration  # noqa: E402
from hetpool.server.db.models import TaskRow  # noqa: E402
from hetpool.server.db.session import Database  # noqa: E402
from hetpool.server.metrics import worker_metrics  # noqa: E402
from hetpool.server.services import audit, task_lifecycle  # noqa: E402
from hetpool.server.services import tasks as tasks_service  # noqa: E402
from hetpool.server.services.context import ServiceContext  # noqa: E402
from hetpool.server.services.inventory import apply_specs  # noqa: E402
from hetpool.server.services.tasks import AdmissionView, submit  # noqa: E402
from hetpool.server.settings import Settings  # noqa: E402
from hetpool.server.workers import scheduler  # noqa: E402

ACTOR = "bench"
CHUNK = 500  # tasks per submit transaction
DEFAULT_OUT = Path(__file__).parent / "results" / "server_pass.json"


class PhaseClock:
    """Time spent in `load_cycle` and `run_cycle` during one pass: both are wrapped in the
    scheduler module while the benchmark runs (`instrumented`), and restored after."""

    def __init__(self) -> None:
        self.load_s = self.core_s = 0.0

    def timed(self, fn, slot: str):
        def wrapped(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(self, slot, getattr(self, slot) + time.perf_counter() - start)

        return wrapped

    def reset(self) -> None:
        self.load_s = self.core_s = 0.0


@contextmanager
def instrumented(seed: int) -> Iterator[PhaseClock]:
    """The scheduler's phases timed, and task ids from a seeded sequence instead of random
    ones: ties in the queue's order are broken by id, so two runs (old code and new, side
    by side) make the same decisions. Both undone on exit."""
    phases, counter = PhaseClock(), iter(range(10**9))
    saved = scheduler.load_cycle, scheduler.run_cycle, tasks_service.new_task_id
    scheduler.load_cycle = phases.timed(saved[0], "load_s")
    scheduler.run_cycle = phases.timed(saved[1], "core_s")
    tasks_service.new_task_id = lambda: f"t-{seed:02d}{next(counter):08d}"
    try:
        yield phases
    finally:
        scheduler.load_cycle, scheduler.run_cycle, tasks_service.new_task_id = saved


def make_context(root: Path, database_url: str | None) -> ServiceContext:
    url = {"database_url": database_url} if database_url else {}  # default: SQLite under the data dir
    settings = Settings(data_dir=root / "data", run_workers=False, **url)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.resolved_database_url())
    db.migrate()
    return ServiceContext(settings=settings, db=db, clock=FixedClock(datetime(2026, 1, 2, tzinfo=UTC)), backends={})


def apply_estate(ctx: ServiceContext, n_nodes: int) -> int:
    """Tenants, clusters, nodes, pools, queues and a quota per team, applied as `hetpool apply` does.
    Returns the number of accelerators."""
    clusters, nodes, pools = inventory(n_nodes)
    by_class: dict[str, int] = {}
    catalog = ctx.builtin_catalog
    for node in nodes:
        for group in node.devices:
            cls = catalog.get(group.model).device_class.value
            by_class[cls] = by_class.get(cls, 0) + group.count
    teams = sorted({tenant_of(i) for i in range(ORGS * TEAMS)})
    tenants = [TenantSpec(name=f"org{i}") for i in range(ORGS)] + [TenantSpec(name=t) for t in teams]
    accelerators = sum(n for cls, n in by_class.items() if cls != "cpu")
    specs = [*tenants, *clusters, *nodes, *pools, *honest_queues(), *team_quotas({c: n for c, n in by_class.items() if c != "cpu"})]
    with ctx.db.transaction() as session:
        apply_specs(ctx, session, specs, ACTOR)
    return accelerators


def submit_documents(ctx: ServiceContext, docs: list[dict]) -> int:
    """Submit `docs` as the API does, CHUNK per transaction; returns how many were accepted
    (the admission checks refuse a task no pool could ever run, as the API would)."""
    accepted = 0
    for start in range(0, len(docs), CHUNK):
        with ctx.db.transaction() as session:
            view = AdmissionView.read(ctx, session)
            for doc in docs[start : start + CHUNK]:
                ctx.clock.advance(0.001)  # submissions a millisecond apart, as a busy API takes them
                try:
                    with session.begin_nested():
                        submit(ctx, session, doc, ACTOR, view)
                    accepted += 1
                except HetpoolError:
                    pass
    return accepted


def requested_devices(doc: dict) -> float:
    devices = doc.get("per_worker", {}).get("devices") or {}
    return doc.get("workers", 1) * float(devices.get("count", 0))


def devices_held(result) -> float:
    return sum(len(p.device_indices) * p.device_fraction for d in result.admitted for p in d.assignment.placements)


class Estate:
    """The server's database, and the true end of each task running on it."""

    def __init__(self, ctx: ServiceContext, rng: random.Random) -> None:
        self.ctx, self.rng = ctx, rng
        self.ends: dict[str, datetime] = {}

    def start_admitted(self, started_back_s: float = 0.0) -> int:
        """Every admitted task dispatched and running (as the dispatcher and reconciler
        would have it); its true end is its estimate × U(0.3, 1.1) from its start."""
        ctx, now = self.ctx, self.ctx.clock.now()
        with ctx.db.transaction() as session:
            # By id: the random start times must not follow the database's row order.
            rows = session.execute(select(TaskRow).where(TaskRow.state == TaskState.ADMITTED.value).order_by(TaskRow.id)).scalars().all()
            for row in rows:
                started = now - timedelta(seconds=self.rng.uniform(0, started_back_s))
                task_lifecycle.transition(ctx, session, row, TaskState.DISPATCHED, actor=ACTOR, job_id=f"job-{row.id}")
                task_lifecycle.transition(ctx, session, row, TaskState.RUNNING, actor=ACTOR, started_at=started)
                estimate = parse_spec(row.spec).runtime_estimate
                seconds = parse_duration(estimate) if estimate else 4 * 3600.0
                self.ends[row.id] = started + timedelta(seconds=seconds * self.rng.uniform(0.3, 1.1))
        return len(rows)

    def finish_due(self) -> int:
        ctx, now = self.ctx, self.ctx.clock.now()
        due = sorted(task_id for task_id, end in self.ends.items() if end <= now)
        with ctx.db.transaction() as session:
            for task_id in due:
                row = task_lifecycle.get_row(session, task_id)
                del self.ends[task_id]
                if row.state == TaskState.RUNNING.value:
                    task_lifecycle.transition(ctx, session, row, TaskState.SUCCEEDED, actor=ACTOR)
        return len(due)

    def forget_preempted(self) -> None:
        """Work the scheduler asked to stop: the reconciler would stop and requeue it."""
        ctx = self.ctx
        with ctx.db.transaction() as session:
            marked = select(TaskRow).where(TaskRow.preempt_reason.is_not(None), TaskRow.state == TaskState.RUNNING.value)
            rows = session.execute(marked.order_by(TaskRow.id)).scalars()
            for row in rows:
                task_lifecycle.transition(ctx, session, row, TaskState.PREEMPTED, actor=ACTOR)
                task_lifecycle.transition(ctx, session, row, TaskState.QUEUED, actor=ACTOR, preempt_reason=None, started_at=None)
                self.ends.pop(row.id, None)


def one_pass(ctx: ServiceContext, phases: PhaseClock) -> tuple[dict, object]:
    """One scheduler pass as the leader's scheduler pipeline runs it (workers/loop.py): audit
    events linked as each transaction commits, the cycle's metrics recorded."""
    phases.reset()
    started_at, start = ctx.clock.now(), time.perf_counter()
    with audit.linked_at_commit():
        result = scheduler.schedule_once(ctx)
        if result is not None:
            worker_metrics(ctx).cycle_done(ctx, result, time.perf_counter() - start, started_at)
    total = time.perf_counter() - start
    timing = {"pass_ms": total * 1000, "load_ms": phases.load_s * 1000, "core_ms": phases.core_s * 1000}
    timing["rest_ms"] = timing["pass_ms"] - timing["load_ms"] - timing["core_ms"]
    return timing, result


def summary(timings: list[dict], placed: int) -> dict:
    if not timings:
        return {"passes": 0}
    total_s = sum(t["pass_ms"] for t in timings) / 1000
    out = {"passes": len(timings), "placed_tasks": placed, "pass_seconds": round(total_s, 3)}
    out["placements_per_s"] = round(placed / total_s, 1) if total_s else None
    for key in ("pass_ms", "load_ms", "core_ms", "rest_ms"):
        values = [t[key] for t in timings]
        out[f"p50_{key}"] = round(float(np.percentile(values, 50)), 1)
        out[f"p99_{key}"] = round(float(np.percentile(values, 99)), 1)
    return out


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def prefill(estate: Estate, docs: list[dict], accelerators: int, share: float, phases: PhaseClock) -> float:
    """Submit and schedule `docs`, a slice at a time, until `share` of the accelerators are busy."""
    busy, left = 0.0, list(docs)
    while left and busy < share * accelerators:
        wanted, batch = share * accelerators - busy, []
        while left and wanted > 0:
            batch.append(left.pop(0))
            wanted -= requested_devices(batch[-1])
        submit_documents(estate.ctx, batch)
        _, result = one_pass(estate.ctx, phases)
        if result is None or not result.admitted:
            break
        busy += devices_held(result)
        estate.ctx.clock.advance(1)
    estate.start_admitted(started_back_s=3 * 3600)
    # What the prefill left queued is cancelled: the measured queue is the one submitted next.
    with estate.ctx.db.transaction() as session:
        for row in session.execute(select(TaskRow).where(TaskRow.state == TaskState.QUEUED.value)).scalars():
            task_lifecycle.transition(estate.ctx, session, row, TaskState.CANCELLED, actor=ACTOR)
    return busy / accelerators if accelerators else 0.0


def drain(estate: Estate, phases: PhaseClock, max_passes: int) -> tuple[list[dict], int]:
    timings, placed = [], 0
    for _ in range(max_passes):
        timing, result = one_pass(estate.ctx, phases)
        admitted = len(result.admitted) if result else 0
        timings.append(timing)
        placed += admitted
        shown = f"{timing['pass_ms']:.0f} ms (load {timing['load_ms']:.0f}, core {timing['core_ms']:.0f})"
        progress(f"drain pass {len(timings)}: {shown}, {admitted} admitted")
        estate.start_admitted()
        estate.forget_preempted()
        estate.ctx.clock.advance(2.0)  # a fixed step, not the pass's time: the same decisions on any machine
        if result is None or (not admitted and not result.carried):
            break
    return timings, placed


def steady(estate: Estate, phases: PhaseClock, args, rng: random.Random) -> dict:
    timings, placed, finished, arrived, next_id = [], 0, 0, 0, 10_000_000
    for _ in range(args.steady_passes):
        estate.ctx.clock.advance(args.steady_step)
        finished += estate.finish_due()
        arrived += submit_documents(estate.ctx, honest_documents(args.arrivals, rng, next_id))
        next_id += args.arrivals
        timing, result = one_pass(estate.ctx, phases)
        timings.append(timing)
        placed += len(result.admitted) if result else 0
        estate.start_admitted()
        estate.forget_preempted()
    return {**summary(timings, placed), "finished": finished, "arrived": arrived}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--running-share", type=float, default=0.25)
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temporary directory")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--max-passes", type=int, default=60)
    parser.add_argument("--steady-passes", type=int, default=20)
    parser.add_argument("--steady-step", type=float, default=120.0)
    parser.add_argument("--arrivals", type=int, default=50)
    parser.add_argument("-o", "--output", choices=["json", "text"], default="text")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    with tuned_gc(), instrumented(args.seed) as phases, tempfile.TemporaryDirectory(prefix="hetpool-server-pass-") as root:
        report = run(args, Path(root), phases)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if args.output == "json" else "\n".join(f"{k}: {v}" for k, v in report.items()))
    return report


def run(args, root: Path, phases: PhaseClock) -> dict:
    rng = random.Random(args.seed)
    ctx = make_context(root, args.database_url)
    setup = time.perf_counter()
    accelerators = apply_estate(ctx, args.nodes)
    estate = Estate(ctx, rng)
    share = prefill(estate, honest_documents(args.tasks, random.Random(args.seed + 1), start=5_000_000), accelerators, args.running_share, phases)
    running_at_start = len(estate.ends)
    docs = honest_documents(args.tasks, rng)
    queued = submit_documents(ctx, docs)
    setup_s = time.perf_counter() - setup
    progress(f"set up in {setup_s:.0f} s: {running_at_start} running ({share:.0%} of {accelerators} accelerators), {queued} of {len(docs)} queued")
    timings, placed = drain(estate, phases, args.max_passes)
    report = {
        "benchmark": "server_pass",
        "database": ctx.db.engine.dialect.name,
        "nodes": args.nodes,
        "accelerators": accelerators,
        "tasks": args.tasks,
        "accepted_at_submit": queued,
        "distinct_shapes": len({json.dumps({k: v for k, v in d.items() if k not in ("name", "tenant")}, sort_keys=True) for d in docs}),
        "running_at_start": running_at_start,
        "running_share_at_start": round(share, 3),
        "setup_seconds": round(setup_s, 1),
        **summary(timings, placed),
        "steady": steady(estate, phases, args, rng),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": platform.python_version(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    ctx.db.dispose()
    return report


if __name__ == "__main__":
    main()
