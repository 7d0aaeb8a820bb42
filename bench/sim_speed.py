"""Simulator speed: a long synthetic trace on a large inventory, through the real core.

    python bench/sim_speed.py [--nodes 1000] [--tasks 100000] [--cycle-interval 60] [-o json]

Each shape's arrival rate is set so that every pool runs at about --load of its capacity:
a shape counts only the pools it can run on (class, models, framework and driver
compatibility, gang width: asked of the core's own `assign` on the idle estate), at its
task type's speed there (arrival_rates). `--whole-estate-load` sets the rate against every
accelerator with fixed shares instead, as before 2026-12-07: the NPU MindSpore gangs, which
only one pool can run, then arrive at ~3.6x that pool's capacity while the H800/H100 pools
idle, and the queue grows without bound.
Prints and saves bench/results/sim_speed.json: wall seconds, scheduler seconds, cycles,
tasks completed, average wait and JCT.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from collections import Counter
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from scheduler_throughput import inventory  # noqa: E402  (same synthetic estate)

from hetpool.catalog.compat import CompatibilityKB  # noqa: E402
from hetpool.catalog.devices import DeviceCatalog  # noqa: E402
from hetpool.core.interpreter import tuned_gc  # noqa: E402
from hetpool.core.tasks import TaskSpec  # noqa: E402
from hetpool.scheduling.assign import assign  # noqa: E402
from hetpool.sim.engine import SimConfig, Simulator  # noqa: E402
from hetpool.sim.report import summarize  # noqa: E402
from hetpool.sim.trace import TraceTask  # noqa: E402

SHAPES = [
    # (share, task doc, mean hours on the reference device)
    (
        0.35,
        {
            "type": "training",
            "framework": {"name": "pytorch", "version": ">=2.3"},
            "workers": 1,
            "per_worker": {"devices": {"class": "gpu", "count": 8}, "cpu": 8, "memory_gb": 64},
            "fallback": ["nvidia-h800", "nvidia-h100", "nvidia-a100-80g"],
        },
        4.0,
    ),
    (
        0.25,
        {
            "type": "training",
            "framework": {"name": "pytorch", "version": ">=2.3"},
            "workers": 1,
            "per_worker": {"devices": {"class": "gpu", "count": 2}, "cpu": 4, "memory_gb": 32},
            "any_of": ["nvidia-a100-40g", "nvidia-l40s", "nvidia-h20"],
        },
        2.0,
    ),
    (
        0.25,
        {
            "type": "batch-inference",
            "framework": {"name": "pytorch", "version": ">=2.3"},
            "per_worker": {"devices": {"class": "npu", "count": 1}, "cpu": 4, "memory_gb": 16},
        },
        1.0,
    ),
    (
        0.15,
        {
            "type": "training",
            "framework": {"name": "mindspore", "version": "2.3"},
            "workers": 2,
            "per_worker": {"devices": {"class": "npu", "count": 8}, "cpu": 16, "memory_gb": 128},
        },
        3.0,
    ),
]


def shape_specs() -> list[TaskSpec]:
    return [
        TaskSpec.model_validate({**doc, "name": f"shape{i}", "tenant": "org/team0", "runtime_estimate": f"{hours}h"})
        for i, (_, doc, hours) in enumerate(SHAPES)
    ]


def arrival_rates(snap, compat_check, load: float) -> list[float]:
    """Tasks per second of each shape, so that every pool runs at about `load`.

    Each shape may use the pools `assign` places it on in the idle estate, each device
    counted at the shape's speed there (reference-device seconds per second). A pool that
    several shapes may use is split evenly among them; a shape's rate brings `load` × its
    capacity in work. So no pool is asked for more than it can run (the queue stays
    bounded, as on an estate in steady state), and none idles for want of eligible work."""
    specs = shape_specs()
    usable = [
        {i for i, pool in enumerate(snap.pools) if assign(snap, spec, compat_check, allowed_pools={pool.name}, explain=False).feasible}
        for spec in specs
    ]
    sharing = Counter(i for pools in usable for i in pools)
    rates = []
    for spec, pools, (_, doc, hours) in zip(specs, usable, SHAPES, strict=True):
        capacity = sum(float(snap.row_total[snap.row_pool == i].sum()) * snap.pools[i].model.perf_for(spec.task_type) / sharing[i] for i in pools)
        work = doc.get("workers", 1) * doc["per_worker"]["devices"]["count"] * hours * 3600  # reference-device seconds per task
        rates.append(load * capacity / work)
    return rates


def make_trace(n: int, rates: list[float], rng: random.Random) -> list[TraceTask]:
    """n tasks arriving as a Poisson stream, each of shape i with probability rates[i] / sum."""
    total, t, tasks = sum(rates), 0.0, []
    for i in range(n):
        t += rng.expovariate(total)
        r, acc = rng.random() * total, 0.0
        for rate, (_, doc, hours) in zip(rates, SHAPES, strict=True):  # noqa: B007 (the loop picks doc and hours)
            acc += rate
            if r <= acc:
                break
        actual = rng.expovariate(1 / (hours * 3600))
        spec = TaskSpec.model_validate({**doc, "name": f"s{i}", "tenant": f"org/team{i % 8}", "runtime_estimate": f"{hours}h"})
        tasks.append(TraceTask(f"s{i}", t, spec, reference_s=max(actual, 60.0)))
    return tasks


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100000)
    parser.add_argument("--load", type=float, default=0.8, help="arrivals as a fraction of what each pool can run")
    parser.add_argument(
        "--whole-estate-load", action="store_true", help="--load of every accelerator, fixed shares (overloads the pools few shapes can use)"
    )
    parser.add_argument("--cycle-interval", type=float, default=60.0, help="virtual seconds between scheduling cycles")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("-o", "--output", choices=["json", "text"], default="text")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sim_speed.json")
    parser.add_argument("--default-gc", action="store_true", help="CPython's default collector settings instead of `hetpool sim run`'s")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    models = {m.name: m for m in DeviceCatalog.builtin().all()}
    clusters, nodes, pools = inventory(args.nodes)
    accelerators = sum(g.count for n in nodes for g in n.devices)
    sim = Simulator(clusters, nodes, pools, models, CompatibilityKB.builtin().check, SimConfig(min_cycle_interval_s=args.cycle_interval))
    if args.whole_estate_load:
        mean_device_hours = sum(share * doc.get("workers", 1) * doc["per_worker"]["devices"]["count"] * hours for share, doc, hours in SHAPES)
        rates = [share * args.load * accelerators / (mean_device_hours * 3600) for share, _, _ in SHAPES]
    else:
        rates = arrival_rates(sim.snapshot, CompatibilityKB.builtin().check, args.load)
    trace = make_trace(args.tasks, rates, rng)
    started = time.perf_counter()
    with nullcontext() if args.default_gc else tuned_gc():  # as `hetpool sim run` runs it
        result = sim.run(trace)
    wall = time.perf_counter() - started
    summary = summarize(result)
    report = {
        "benchmark": "sim_speed",
        "nodes": len(nodes),
        "accelerators": accelerators,
        "tasks": args.tasks,
        "cycle_interval_s": args.cycle_interval,
        "load": args.load,
        "load_basis": "whole estate" if args.whole_estate_load else "each pool",
        "arrivals_per_hour": round(sum(rates) * 3600, 1),
        "mix": [round(r / sum(rates), 3) for r in rates],
        "gc": "default" if args.default_gc else "server",
        "wall_seconds": round(wall, 2),
        "scheduler_seconds": summary["scheduler_seconds"],
        "cycles": summary["cycles"],
        "completed": summary["completed"],
        "simulated_hours": summary["simulated_hours"],
        "avg_wait_hours": summary["wait_hours"]["avg"],
        "avg_jct_hours": summary["avg_jct_hours"],
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if args.output == "json" else "\n".join(f"{k}: {v}" for k, v in report.items()))
    return report


if __name__ == "__main__":
    main()
