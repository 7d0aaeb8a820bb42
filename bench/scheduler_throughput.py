"""Scheduler throughput: the real scheduling core on a synthetic heterogeneous estate.

    python bench/scheduler_throughput.py --nodes 5000 --tasks 50000 -o json
    python bench/scheduler_throughput.py --flat          # the first benchmark's easy mix

The default ("honest") run has every feature on that a live estate has (see
estate_mix.py): ≥ 20 % of capacity already running with expected ends, a quota per team
with borrowing from its siblings, preemption and backfill on, four queues (one FIFO),
topology requests, slices, ≥ 2,000 distinct shapes, start-time estimates. It calls
`run_cycle` exactly as the server's scheduler does (a quota book charged with the
running work per cycle, the running work, the queues), applies admissions and evictions
to the snapshot, and repeats:

1. drain: cycles until nothing more is admitted (or --max-cycles);
2. steady: --steady-cycles cycles, each --steady-step seconds later: running work whose
   end has come finishes (its capacity is released) and --arrivals new tasks arrive.
3. steady_busy: --busy-cycles cycles, --busy-step seconds apart, --busy-arrivals tasks
   before each: the same state as the server's back-to-back passes see it (a pass every
   few seconds on a full estate, a few completions and arrivals in each).

`placements_per_s` = successful admissions ÷ summed cycle time. Prints and saves
bench/results/scheduler_throughput[_flat].json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import sys
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from estate_mix import flat_workload, honest_queues, honest_workload, inventory, team_quotas  # noqa: E402

from hetpool.catalog.compat import CompatibilityKB  # noqa: E402
from hetpool.catalog.devices import DeviceCatalog  # noqa: E402
from hetpool.core.policy import SchedulingPolicySpec  # noqa: E402
from hetpool.governance.quota import QuotaBook  # noqa: E402
from hetpool.scheduling.cycle import QueuedTask, run_cycle  # noqa: E402
from hetpool.scheduling.estimate import runtime_on  # noqa: E402
from hetpool.scheduling.running import RunningTask  # noqa: E402
from hetpool.scheduling.snapshot import Allocation, build_snapshot  # noqa: E402
from hetpool.core.interpreter import tuned_gc  # noqa: E402

__all__ = ["inventory", "main"]  # sim_speed imports inventory from here
DEFAULT_RUNTIME_S = 4 * 3600.0  # work without an estimate runs this long in the benchmark


class Estate:
    """The snapshot, the queue and the running work between cycles, as the server keeps them."""

    def __init__(self, snapshot, models, kb, *, queues=(), quotas=(), policy=None) -> None:
        self.snapshot, self.models, self.kb = snapshot, models, kb
        self.queues, self.quotas, self.policy = list(queues), list(quotas), policy or SchedulingPolicySpec()
        self.pool_models = {p.name: p.model.name for p in snapshot.pools}
        self.queue: dict[str, QueuedTask] = {}
        self.running: dict[str, RunningTask] = {}
        self.ends: dict[str, datetime] = {}  # when each running task really ends
        self.specs: dict[str, QueuedTask] = {}  # each running task as it was queued (an evicted one goes back)

    def book(self) -> QuotaBook | None:
        if not self.quotas:
            return None
        book = QuotaBook(self.quotas, self.models, self.pool_models)
        book.charge_running(self.running.values())
        return book

    def cycle(self, now: datetime, estimate: bool = True):
        result = run_cycle(
            self.snapshot,
            list(self.queue.values()),
            self.kb.check,
            now,
            running=list(self.running.values()),
            queues=self.queues,
            policy=self.policy,
            models=self.models,
            quota=self.book(),
            estimate=estimate,
        )
        evicted = 0
        for d in result.decisions:
            for victim in d.victims:
                if victim in self.running:
                    evicted += 1
                    self.finish(victim, requeue_at=now)
            if d.admit:
                self.start(d, now)
        return result, evicted

    def start(self, decision, now: datetime, started_at: datetime | None = None) -> None:
        item = self.queue.pop(decision.task_id)
        snap, spec = self.snapshot, item.spec
        allocations = []
        for p in decision.assignment.placements:
            snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
            allocations.append(Allocation(p.node, p.pool, p.device_indices, p.device_fraction, p.cpu, p.memory_gb))
        seconds = [runtime_on(spec, self.models.get(p.model)) or DEFAULT_RUNTIME_S for p in decision.assignment.placements]
        started = started_at or now
        end = started + timedelta(seconds=max(seconds))
        rank, allocated = spec.priority.rank, tuple(allocations)
        self.running[item.id] = RunningTask(item.id, spec.tenant, rank, spec.task_type, allocated, started, end, spec.preemptible)
        self.ends[item.id] = end
        self.specs[item.id] = item

    def finish(self, task_id: str, requeue_at: datetime | None = None) -> None:
        task = self.running.pop(task_id)
        self.ends.pop(task_id)
        snap = self.snapshot
        for a in task.allocations:
            snap.release(snap.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)
        item = self.specs.pop(task_id)
        if requeue_at is not None:  # evicted: back in the queue with its age
            self.queue[task_id] = item

    def busy_share(self) -> float:
        snap = self.snapshot
        accel = ~snap.row_is_cpu
        total = float(snap.device_totals()[accel].sum())
        return (total - float(snap.whole_free()[accel].sum())) / total if total else 0.0


def prefill(estate: Estate, tasks: list[QueuedTask], share: float, now: datetime, rng: random.Random) -> None:
    """Start work until `share` of the accelerators run it, with start times in the past
    and expected ends ahead (so reservations and forecasts have ends to count on)."""
    for item in tasks:
        estate.queue[item.id] = item
    while estate.busy_share() < share and estate.queue:
        result = run_cycle(estate.snapshot, list(estate.queue.values()), estate.kb.check, now, models=estate.models, estimate=False)
        if not result.admitted:
            break
        for d in result.admitted:
            if estate.busy_share() >= share:
                break
            estate.start(d, now, started_at=now - timedelta(seconds=rng.uniform(0, 3 * 3600)))
    estate.queue.clear()


def percentiles(cycle_ms: list[float]) -> dict:
    if not cycle_ms:
        return {"p50_cycle_ms": None, "p99_cycle_ms": None}
    return {"p50_cycle_ms": round(float(np.percentile(cycle_ms, 50)), 1), "p99_cycle_ms": round(float(np.percentile(cycle_ms, 99)), 1)}


def summary(cycle_ms: list[float], placed: int, evicted: int) -> dict:
    core_s = sum(cycle_ms) / 1000
    return {
        "cycles": len(cycle_ms),
        "placed_tasks": placed,
        "evicted": evicted,
        "core_seconds": round(core_s, 3),
        "placements_per_s": round(placed / core_s, 1) if core_s else None,
        **percentiles(cycle_ms),
    }


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def drain(estate: Estate, now: datetime, max_cycles: int, step_s: float) -> tuple[list[float], int, int, datetime]:
    """Cycles until nothing more is admitted, `step_s` apart on the scheduler's clock (the
    server's passes follow one another: the clock moves by about a pass each time)."""
    cycle_ms, placed, evicted, idle = [], 0, 0, 0
    for i in range(max_cycles):
        now += timedelta(seconds=step_s if i else 0.0)
        result, out = estate.cycle(now)
        cycle_ms.append(result.duration_s * 1000)
        evicted += out
        placed += len(result.admitted)
        progress(f"drain cycle {len(cycle_ms)}: {cycle_ms[-1]:.0f} ms, {len(result.admitted)} admitted, {out} evicted, {len(result.decisions)} decided, {result.parked} parked, {len(estate.queue)} queued")
        idle = idle + 1 if not result.admitted and not out else 0
        # Stop once a whole rotation of the queue (cycle_heads.heads) admitted and evicted nothing.
        if idle and (not result.carried or idle > 2 * len(estate.queue) / max(1, estate.policy.max_heads_per_cycle) + 1):
            break
        if not estate.queue:
            break
    return cycle_ms, placed, evicted, now


def steady(estate: Estate, now: datetime, cycles: int, step_s: float, arrivals: int, rng: random.Random, make, first_id: int) -> dict:
    """Tasks arrive and finish over `cycles` cycles, `step_s` seconds apart."""
    cycle_ms, placed, evicted, finished, next_id = [], 0, 0, 0, first_id
    for _ in range(cycles):
        now += timedelta(seconds=step_s)
        for task_id in [t for t, end in estate.ends.items() if end <= now]:
            estate.finish(task_id)
            finished += 1
        for item in make(arrivals, rng, next_id, now):
            estate.queue[item.id] = item
        next_id += arrivals
        result, out = estate.cycle(now)
        cycle_ms.append(result.duration_s * 1000)
        placed += len(result.admitted)
        evicted += out
    report = {**summary(cycle_ms, placed, evicted), "step_s": step_s, "finished": finished, "arrived": arrivals * cycles, "queued_at_end": len(estate.queue)}
    return {**report, "end": now.isoformat()}


def steady_phases(estate: Estate, now: datetime, args, rng: random.Random, make) -> dict:
    """The steady state as --steady-step apart (many changes a cycle), then as back-to-back
    passes see it (--busy-step apart: a few completions and arrivals a cycle)."""
    out = {"steady": steady(estate, now, args.steady_cycles, args.steady_step, args.arrivals, rng, make, 10_000_000)}
    if args.busy_cycles:
        later = datetime.fromisoformat(out["steady"]["end"])
        out["steady_busy"] = steady(estate, later, args.busy_cycles, args.busy_step, args.busy_arrivals, rng, make, 20_000_000)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--tasks", type=int, default=50000)
    parser.add_argument("--flat", action="store_true", help="the first benchmark's easy mix: nothing running, no quotas, one queue, ~165 shapes")
    parser.add_argument("--running-share", type=float, default=0.25, help="share of accelerators busy at the start (honest mix)")
    parser.add_argument("--cpu-share", type=float, default=0.0, help="share of CPU-only nodes (accelerator nodes are 8-device)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--max-cycles", type=int, default=200)
    parser.add_argument("--drain-step", type=float, default=2.0, help="seconds the clock moves between drain cycles (about a pass at 5,000 nodes)")
    parser.add_argument("--estimate-interval", default=None, help="policy.estimate_interval, e.g. 0s: forecast every cycle (default: the policy's)")
    parser.add_argument("--steady-cycles", type=int, default=20)
    parser.add_argument("--steady-step", type=float, default=120.0, help="simulated seconds between steady-state cycles")
    parser.add_argument("--arrivals", type=int, default=100, help="tasks arriving before each steady-state cycle")
    parser.add_argument("--busy-cycles", type=int, default=20, help="then cycles as back-to-back server passes see them (0: none)")
    parser.add_argument("--busy-step", type=float, default=5.0, help="simulated seconds between those cycles (a pass at 5,000 nodes and the 0.5 s interval)")
    parser.add_argument("--busy-arrivals", type=int, default=4, help="tasks arriving before each of them (--arrivals per 120 s, scaled)")
    parser.add_argument("--max-heads", type=int, default=None, help="policy.max_heads_per_cycle (default: the policy's default)")
    parser.add_argument("-o", "--output", choices=["json", "text"], default="text")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/scheduler_throughput[_flat].json")
    parser.add_argument("--default-gc", action="store_true", help="CPython's default collector settings instead of the server's")
    args = parser.parse_args(argv)
    # The collector as `hetpool up` sets it at start-up (server/interpreter.py), before the
    # queue is loaded: the queued tasks are not frozen, only the catalogs and modules.
    with nullcontext() if args.default_gc else tuned_gc():
        return run(args)


def run(args) -> dict:
    rng = random.Random(args.seed)
    catalog, kb = DeviceCatalog.builtin(), CompatibilityKB.builtin()
    models = {m.name: m for m in catalog.all()}
    clusters, nodes, pools = inventory(args.nodes, args.cpu_share)
    snapshot = build_snapshot(clusters, nodes, pools, models)
    accel_rows = ~snapshot.row_is_cpu
    accelerators = int(snapshot.device_totals()[accel_rows].sum())
    now = datetime(2026, 1, 2, tzinfo=UTC)
    fields = {"max_heads_per_cycle": args.max_heads, "estimate_interval": args.estimate_interval}
    policy = SchedulingPolicySpec(**{k: v for k, v in fields.items() if v is not None})
    if args.flat:
        estate = Estate(snapshot, models, kb, policy=policy)
        make = lambda n, r, start, t0: flat_workload(n, r, start)  # noqa: E731
    else:
        by_class: dict[str, int] = {}
        for p in snapshot.pools:
            by_class[p.model.device_class.value] = by_class.get(p.model.device_class.value, 0) + int(snapshot.device_totals()[p.rows].sum())
        estate = Estate(snapshot, models, kb, queues=honest_queues(), quotas=team_quotas(by_class), policy=policy)
        make = honest_workload
    if not args.flat and args.running_share > 0:
        prefill(estate, honest_workload(args.tasks // 2, random.Random(args.seed + 1), start=5_000_000), args.running_share, now, rng)
    running_share, running_at_start = estate.busy_share(), len(estate.running)
    queue = make(args.tasks, rng, 0, now - timedelta(hours=1))
    shapes = len({q.spec.placement_shape for q in queue})
    for item in queue:
        estate.queue[item.id] = item
    cycle_ms, placed, evicted, now = drain(estate, now, args.max_cycles, args.drain_step)
    used = int((snapshot.device_totals() - snapshot.whole_free())[accel_rows].sum())
    report = {
        "benchmark": "scheduler_throughput",
        "mix": "flat" if args.flat else "honest",
        "nodes": len(nodes),
        "device_models": len({p.model for p in pools}),
        "accelerators": accelerators,
        "tasks": args.tasks,
        "distinct_shapes": shapes,
        "running_share_at_start": round(running_share, 3),
        "running_at_start": running_at_start,
        "quotas": len(estate.quotas),
        "queues": len(estate.queues) or 1,
        "max_heads_per_cycle": policy.max_heads_per_cycle,
        "estimate_interval": policy.estimate_interval,
        "drain_step_s": args.drain_step,
        "gc": "default" if args.default_gc else "server",
        **summary(cycle_ms, placed, evicted),
        "still_queued": len(estate.queue),
        "accelerators_in_use": used,
        **(steady_phases(estate, now, args, rng, make) if args.steady_cycles else {"steady": None}),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": platform.python_version(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    out = args.out or Path(__file__).parent / "results" / f"scheduler_throughput{'_flat' if args.flat else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if args.output == "json" else "\n".join(f"{k}: {v}" for k, v in report.items()))
    return report


if __name__ == "__main__":
    main()
