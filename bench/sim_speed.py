"""Simulator speed: a long synthetic trace on a large inventory, through the real core.

    python bench/sim_speed.py [--nodes 1000] [--tasks 100000] [--cycle-interval 60] [-o json]

The trace's arrival rate is set so the estate runs at roughly --load of its capacity.
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
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from scheduler_throughput import inventory  # noqa: E402  (same synthetic estate)

from hetpool.catalog.compat import CompatibilityKB  # noqa: E402
from hetpool.catalog.devices import DeviceCatalog  # noqa: E402
from hetpool.core.tasks import TaskSpec  # noqa: E402
from hetpool.sim.engine import SimConfig, Simulator  # noqa: E402
from hetpool.sim.report import summarize  # noqa: E402
from hetpool.sim.trace import TraceTask  # noqa: E402
from hetpool.core.interpreter import tuned_gc  # noqa: E402

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


def make_trace(n: int, accelerators: int, load: float, rng: random.Random) -> list[TraceTask]:
    mean_device_hours = sum(share * doc.get("workers", 1) * doc["per_worker"]["devices"]["count"] * hours for share, doc, hours in SHAPES)
    rate = load * accelerators / (mean_device_hours * 3600)  # tasks per second
    t, tasks = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        r, acc = rng.random(), 0.0
        for share, doc, hours in SHAPES:  # noqa: B007 (the loop picks doc and hours)
            acc += share
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
    parser.add_argument("--load", type=float, default=0.8)
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
    trace = make_trace(args.tasks, accelerators, args.load, rng)
    sim = Simulator(clusters, nodes, pools, models, CompatibilityKB.builtin().check, SimConfig(min_cycle_interval_s=args.cycle_interval))
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
