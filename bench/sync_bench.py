"""Benchmark: reconciling a connector's observation of a large cluster into the inventory.

Builds an observation of N nodes (GPU / NPU / CPU, two software stacks per GPU model,
devices in use, a few unknown devices) and times `reconcile` on SQLite — the same
service the periodic sync and `hetpool sync` run, without the engine read:
  1. first sync (creates every node, automatic pool and placeholder model),
  2. unchanged sync (the steady state: nothing written),
  3. churn sync (2 % of nodes drained, 1 % removed, 1 % added).
With --slurm CONF it also times fetch + reconcile against a real Slurm cluster
(deploy/slurm.sh). Prints and saves JSON to bench/results/sync_bench.json.

    python bench/sync_bench.py [--nodes 2000] [--slurm /tmp/hetpool-slurm/slurm.conf]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import tempfile
import time
from pathlib import Path

from hetpool.engines.base import InventoryConnector, InventoryObservation, NodeState, ObservedNode
from hetpool.core.clock import FixedClock
from hetpool.server.db.session import Database
from hetpool.server.services.connector_sync import sync_cluster
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import apply_specs
from hetpool.server.settings import Settings

KINDS = [
    ("nvidia-a100-80g", 8, "12.2"),
    ("nvidia-h100", 8, "12.4"),
    ("ascend-910b3", 8, None),
    ("unknown-gpu-b300", 8, None),
    (None, 0, None),  # CPU only
]


class Replay(InventoryConnector):
    kind = "slurm"
    sees = frozenset({"nodes", "devices", "used", "states"})

    def __init__(self, nodes: list[ObservedNode]) -> None:
        self.nodes = nodes

    def fetch(self) -> InventoryObservation:
        return InventoryObservation(connector="slurm", sees=self.sees, nodes=list(self.nodes))


def observed(n: int, rng: random.Random, start: int = 0) -> list[ObservedNode]:
    nodes = []
    for i in range(start, start + n):
        model, count, cuda = KINDS[i % len(KINDS)]
        stack = None
        if cuda:
            driver = "535.104.05" if i % 2 else "550.54.15"
            stack = {"driver": driver, "runtime": {"name": "cuda", "version": cuda if i % 2 else "12.4"}}
        devices = {model: count} if model else {}
        used = {model: rng.randint(0, count)} if model else {}
        nodes.append(ObservedNode(f"n{i:05d}", 64, 512, devices=devices, used=used, stack=stack))
    return nodes


def timed(ctx: ServiceContext, nodes: list[ObservedNode]) -> tuple[float, dict]:
    started = time.perf_counter()
    summary = sync_cluster(ctx, "big", Replay(nodes))
    return time.perf_counter() - started, summary


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--slurm", default="", help="slurm.conf of a running cluster (deploy/slurm.sh start)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sync_bench.json"))
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), run_workers=False)
        db = Database(settings.resolved_database_url())
        db.migrate()
        ctx = ServiceContext(settings=settings, db=db, clock=FixedClock(), backends={})
        from hetpool.core.specs import parse_spec

        with db.transaction() as session:
            clusters = [parse_spec({"kind": "Cluster", "name": "big", "backend": "slurm", "backend_config": {"sync": "off"}})]
            if args.slurm:
                clusters.append(
                    parse_spec({"kind": "Cluster", "name": "hpc", "backend": "slurm", "backend_config": {"conf": args.slurm, "sync": "off"}})
                )
            apply_specs(ctx, session, clusters, "bench")
        nodes = observed(args.nodes, rng)
        first, summary = timed(ctx, nodes)
        unchanged, quiet = timed(ctx, nodes)
        churned = list(nodes)
        for node in rng.sample(churned, args.nodes // 50):
            node.state, node.reason = NodeState.DRAINING, "bench"
        for node in rng.sample(churned, args.nodes // 100):
            churned.remove(node)
        churned += observed(args.nodes // 100, rng, start=args.nodes)
        churn, churn_summary = timed(ctx, churned)
        result = {
            "benchmark": "sync_bench",
            "nodes": args.nodes,
            "first_sync_s": round(first, 3),
            "unchanged_sync_s": round(unchanged, 3),
            "churn_sync_s": round(churn, 3),
            "nodes_per_s_first": round(args.nodes / first, 1),
            "pools": len([c for c in summary["changes"] if c["kind"] == "Pool"]),
            "unchanged_writes": len(quiet["changes"]),
            "churn": {"removed": len(churn_summary["removed"]), "changes": len(churn_summary["changes"])},
            "python": platform.python_version(),
            "machine": platform.machine(),
        }
        if args.slurm:
            times = []
            for _ in range(5):
                started = time.perf_counter()
                slurm = sync_cluster(ctx, "hpc")
                times.append(time.perf_counter() - started)
            result["real_slurm"] = {"nodes": slurm["nodes"], "fetch_and_reconcile_s_median": round(sorted(times)[2], 3)}
        db.dispose()
    print(json.dumps(result, indent=2))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
