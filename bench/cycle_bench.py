"""Benchmark: one scheduling cycle over a synthetic heterogeneous estate.

Builds N nodes across GPU / NPU / CPU pools (real catalog models, real compatibility
KB), queues M tasks of mixed types with fallback lists, and times `run_cycle` — the
same function the server's scheduler calls. Prints and saves JSON to bench/results/.

    python bench/cycle_bench.py [--nodes 1000] [--tasks 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.snapshot import build_snapshot

POOL_KINDS = [
    # model, devices per node, stack
    ("nvidia-a100-80g", 8, {"driver": "535.154.05", "runtime": {"name": "cuda", "version": "12.2"}, "frameworks": {"pytorch": "2.4.1"}}),
    (
        "nvidia-h800",
        8,
        {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}, "frameworks": {"pytorch": "2.5.1", "vllm": "0.6.4.post1"}},
    ),
    ("ascend-910b2", 8, {"driver": "24.1.0", "runtime": {"name": "cann", "version": "8.0.0"}, "frameworks": {"pytorch": "2.4.0"}}),
    (
        "ascend-310p",
        4,
        {"driver": "24.1.rc2", "runtime": {"name": "cann", "version": "8.0.RC2"}, "frameworks": {"mindspore": "2.3.1", "pytorch": "2.3.1"}},
    ),
    ("cpu-x86-64", 2, {"frameworks": {"pytorch": "2.4.1"}}),
]


def make_inventory(n_nodes: int, rng: random.Random):
    clusters = [ClusterSpec(name=f"c{i}", zone=f"z{i}") for i in range(4)]
    nodes, pools = [], []
    per_kind = max(1, n_nodes // len(POOL_KINDS))
    for k, (model, count, stack) in enumerate(POOL_KINDS):
        names = []
        for i in range(per_kind):
            name = f"{model}-{i}"
            names.append(name)
            nodes.append(
                NodeSpec.model_validate(
                    {
                        "name": name,
                        "cluster": f"c{k % 4}",
                        "cpu_cores": 128,
                        "memory_gb": 1024,
                        "devices": [{"model": model, "count": count}],
                        "stack": stack,
                    }
                )
            )
        pools.append(PoolSpec(name=f"pool-{model}", cluster=f"c{k % 4}", model=model, nodes=names, price_per_hour=float(10 + k)))
    return clusters, nodes, pools


def make_queue(n_tasks: int, rng: random.Random) -> list[QueuedTask]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    queue = []
    for i in range(n_tasks):
        kind = rng.random()
        if kind < 0.4:
            doc = {
                "type": "training",
                "framework": {"name": "pytorch", "version": ">=2.4"},
                "workers": rng.choice([1, 2, 4]),
                "per_worker": {"devices": {"class": "gpu", "count": rng.choice([1, 2, 4, 8])}, "cpu": 8, "memory_gb": 64},
                "fallback": ["nvidia-h800", "nvidia-a100-80g", "ascend-910b2"],
            }
        elif kind < 0.7:
            doc = {
                "type": "inference",
                "framework": {"name": "pytorch", "version": ">=2.3"},
                "per_worker": {"devices": {"class": "npu", "count": 1}, "cpu": 4, "memory_gb": 16},
            }
        elif kind < 0.85:
            doc = {
                "type": "training",
                "framework": {"name": "mindspore", "version": "2.3"},
                "per_worker": {"devices": {"class": "npu", "count": 2}, "cpu": 8, "memory_gb": 32},
            }
        else:
            doc = {"type": "preprocessing", "per_worker": {"cpu": 16, "memory_gb": 64}}
        doc.update(name=f"t{i}", tenant=f"org/team{i % 7}", priority=rng.choice(["low", "normal", "normal", "high"]))
        queue.append(QueuedTask(id=f"t{i}", spec=TaskSpec.model_validate(doc), queued_at=start + timedelta(seconds=i)))
    return queue


def make_quota_book(models, pools):
    """org gets everything; its seven teams split the GPUs and NPUs unevenly, so some borrow."""
    from hetpool.core.quota import QuotaSpec
    from hetpool.governance.quota import QuotaBook

    limits = [{"resource": "gpu", "nominal": 4000}, {"resource": "npu", "nominal": 4000}, {"resource": "a100-equivalent", "nominal": 6000}]
    quotas = [QuotaSpec.model_validate({"kind": "Quota", "name": "org", "tenant": "org", "limits": limits})]
    for t in range(7):
        share = [{"resource": r, "nominal": n * (t + 1) / 28, "borrowing_limit": n / 8} for r, n in (("gpu", 4000), ("npu", 4000))]
        quotas.append(QuotaSpec.model_validate({"kind": "Quota", "name": f"team{t}", "tenant": f"org/team{t}", "limits": share}))
    return QuotaBook(quotas, models, {p.name: p.model for p in pools})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quotas", action="store_true", help="give org and its 7 teams quotas (gpu, npu, a100-equivalent) with borrowing")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    name = "cycle_bench_quotas.json" if args.quotas else "cycle_bench.json"
    args.out = args.out or Path(__file__).parent / "results" / name

    rng = random.Random(args.seed)
    catalog, kb = DeviceCatalog.builtin(), CompatibilityKB.builtin()
    models = {m.name: m for m in catalog.all()}
    clusters, nodes, pools = make_inventory(args.nodes, rng)
    queue = make_queue(args.tasks, rng)

    t0 = time.perf_counter()
    snapshot = build_snapshot(clusters, nodes, pools, models)
    build_s = time.perf_counter() - t0

    timings, admitted = [], 0
    for _ in range(args.repeat):
        book = make_quota_book(models, pools) if args.quotas else None
        result = run_cycle(snapshot, queue, kb.check, datetime.now(UTC), quota=book)
        timings.append(result.duration_s)
        admitted = len(result.admitted)
    median = statistics.median(timings)
    report = {
        "benchmark": "cycle_bench",
        "nodes": len(nodes),
        "pools": len(pools),
        "devices": int(snapshot.device_totals().sum()),
        "queued_tasks": len(queue),
        "admitted": admitted,
        "snapshot_build_s": round(build_s, 4),
        "cycle_s_median": round(median, 4),
        "cycle_s_all": [round(t, 4) for t in timings],
        "tasks_per_s": round(len(queue) / median, 1),
        "quotas": len(book.quotas) if args.quotas else 0,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
