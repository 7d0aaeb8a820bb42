"""Scheduler throughput: the real scheduling core on a synthetic heterogeneous estate.

Builds an inventory of 8+ device models across GPU / NPU / CPU (8 devices per
accelerator node) and a mixed queue — training gangs of 1–8 workers, inference, batch
inference, preprocessing — with fallback lists and several tenants. Runs `run_cycle`
(the function the server's scheduler calls), applies each cycle's admissions to the
snapshot incrementally, and repeats until the queue drains or nothing more fits.

    python bench/scheduler_throughput.py --nodes 5000 --tasks 50000 -o json

Prints and saves (bench/results/scheduler_throughput.json) at least placements_per_s,
p99_cycle_ms and peak_rss_mib.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.snapshot import build_snapshot

CUDA_12_4 = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}, "frameworks": {"pytorch": "2.5.1"}}
CUDA_12_2 = {"driver": "535.154.05", "runtime": {"name": "cuda", "version": "12.2"}, "frameworks": {"pytorch": "2.4.1"}}
CANN_800 = {"driver": "24.1.0", "runtime": {"name": "cann", "version": "8.0.0"}, "frameworks": {"pytorch": "2.4.0"}}
CANN_RC2 = {"driver": "24.1.rc2", "runtime": {"name": "cann", "version": "8.0.RC2"}, "frameworks": {"mindspore": "2.3.1", "pytorch": "2.3.1"}}
# model, share of accelerator nodes, stack
ACCELERATORS = [
    ("nvidia-h800", 0.12, CUDA_12_4),
    ("nvidia-h100", 0.08, CUDA_12_4),
    ("nvidia-a100-80g", 0.18, CUDA_12_2),
    ("nvidia-a100-40g", 0.08, CUDA_12_2),
    ("nvidia-l40s", 0.10, CUDA_12_4),
    ("ascend-910b2", 0.18, CANN_800),
    ("ascend-910b3", 0.10, CANN_RC2),
    ("ascend-310p", 0.08, CANN_RC2),
    ("nvidia-h20", 0.08, CUDA_12_4),
]
GPU_FALLBACKS = [
    ["nvidia-h800", "nvidia-h100", "nvidia-a100-80g"],
    ["nvidia-a100-80g", "nvidia-a100-40g", "ascend-910b2"],
    ["nvidia-h20", "nvidia-l40s"],
]


def inventory(n_nodes: int, cpu_share: float = 0.0):
    n_accel = int(n_nodes * (1 - cpu_share))
    clusters = [ClusterSpec(name=f"c{i}", zone=f"z{i}") for i in range(4)]
    nodes, pools = [], []
    start = 0
    for k, (model, share, stack) in enumerate(ACCELERATORS):
        count = int(round(n_accel * share / sum(s for _, s, _ in ACCELERATORS)))
        names = [f"{model}-{i}" for i in range(count)]
        for i, name in enumerate(names):
            nodes.append(
                NodeSpec.model_validate(
                    {
                        "name": name,
                        "cluster": f"c{k % 4}",
                        "network_group": f"{model}-g{i // 32}",
                        "cpu_cores": 128,
                        "memory_gb": 2048,
                        "devices": [{"model": model, "count": 8}],
                        "stack": stack,
                    }
                )
            )
        pools.append(PoolSpec(name=f"pool-{model}", cluster=f"c{k % 4}", model=model, nodes=names, price_per_hour=float(5 + 3 * k)))
        start += count
    cpu_names = [f"cpu-{i}" for i in range(n_nodes - len(nodes))]
    for name in cpu_names:
        nodes.append(
            NodeSpec.model_validate(
                {"name": name, "cluster": "c0", "cpu_cores": 96, "memory_gb": 512, "devices": [{"model": "cpu-x86-64", "count": 2}]}
            )
        )
    if cpu_names:
        pools.append(PoolSpec(name="pool-cpu", cluster="c0", model="cpu-x86-64", nodes=cpu_names, price_per_hour=0.5))
    return clusters, nodes, pools


def workload(n_tasks: int, rng: random.Random) -> list[QueuedTask]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    tasks = []
    for i in range(n_tasks):
        r = rng.random()
        if r < 0.45:
            doc = {
                "type": "training",
                "framework": {"name": "pytorch", "version": ">=2.3"},
                "workers": rng.choice([1, 1, 2, 2, 4, 8]),
                "per_worker": {"devices": {"class": "gpu", "count": rng.choice([1, 2, 4, 8])}, "cpu": 8, "memory_gb": 64},
                "fallback": rng.choice(GPU_FALLBACKS),
                "runtime_estimate": f"{rng.randint(1, 12)}h",
            }
        elif r < 0.70:
            doc = {
                "type": "inference",
                "framework": {"name": "pytorch", "version": ">=2.3"},
                "workers": rng.choice([1, 2]),
                "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 4, "memory_gb": 32},
                "any_of": ["nvidia-l40s", "nvidia-h20", "nvidia-a100-40g"],
            }
        elif r < 0.85:
            doc = {
                "type": "batch-inference",
                "framework": {"name": "pytorch", "version": ">=2.3"},
                "per_worker": {"devices": {"class": "npu", "count": rng.choice([1, 2, 4])}, "cpu": 4, "memory_gb": 32},
            }
        elif r < 0.93:
            doc = {
                "type": "training",
                "framework": {"name": "mindspore", "version": "2.3"},
                "per_worker": {"devices": {"class": "npu", "count": 8}, "cpu": 16, "memory_gb": 128},
            }
        else:
            doc = {"type": "preprocessing", "per_worker": {"cpu": 16, "memory_gb": 64}}
        doc.update(name=f"t{i}", tenant=f"org{i % 3}/team{i % 11}", priority=rng.choice(["low", "normal", "normal", "normal", "high"]))
        tasks.append(QueuedTask(f"t{i}", TaskSpec.model_validate(doc), t0 + timedelta(milliseconds=i)))
    return tasks


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--tasks", type=int, default=50000)
    parser.add_argument("--cpu-share", type=float, default=0.0, help="share of CPU-only nodes (accelerator nodes are 8-device)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--max-cycles", type=int, default=200)
    parser.add_argument("-o", "--output", choices=["json", "text"], default="text")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "scheduler_throughput.json")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    catalog, kb = DeviceCatalog.builtin(), CompatibilityKB.builtin()
    models = {m.name: m for m in catalog.all()}
    clusters, nodes, pools = inventory(args.nodes, args.cpu_share)
    queue = workload(args.tasks, rng)
    snapshot = build_snapshot(clusters, nodes, pools, models)
    accelerators = int(snapshot.device_totals()[~snapshot.row_is_cpu].sum())
    now = datetime(2026, 1, 2, tzinfo=UTC)

    cycle_ms, placed_tasks, placed_workers, core_s = [], 0, 0, 0.0
    for _ in range(args.max_cycles):
        result = run_cycle(snapshot, queue, kb.check, now, models=models)
        core_s += result.duration_s
        cycle_ms.append(result.duration_s * 1000)
        admitted = result.admitted
        if not admitted:
            break
        for d in admitted:  # the server's apply step, incrementally on the same arrays
            for p in d.assignment.placements:
                snapshot.take(snapshot.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
            placed_workers += len(d.assignment.placements)
        placed_tasks += len(admitted)
        done = {d.task_id for d in admitted}
        queue = [q for q in queue if q.id not in done]
        if not queue:
            break
    used = int((snapshot.device_totals() - snapshot.whole_free())[~snapshot.row_is_cpu].sum())
    report = {
        "benchmark": "scheduler_throughput",
        "nodes": len(nodes),
        "device_models": len({p.model for p in pools}),
        "accelerators": accelerators,
        "tasks": args.tasks,
        "cycles": len(cycle_ms),
        "placed_tasks": placed_tasks,
        "placed_workers": placed_workers,
        "still_queued": len(queue),
        "accelerators_in_use": used,
        "core_seconds": round(core_s, 3),
        "placements_per_s": round(placed_tasks / core_s, 1) if core_s else None,
        "worker_placements_per_s": round(placed_workers / core_s, 1) if core_s else None,
        "p50_cycle_ms": round(float(np.percentile(cycle_ms, 50)), 1),
        "p99_cycle_ms": round(float(np.percentile(cycle_ms, 99)), 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "python": platform.python_version(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if args.output == "json" else "\n".join(f"{k}: {v}" for k, v in report.items()))


if __name__ == "__main__":
    main()
