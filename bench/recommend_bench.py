"""Benchmark: how long `POST /api/v1/tasks/recommend` takes — the goal sized for every pool
and each option planned with the scheduler's own plan (queue ahead, quotas, compatibility).

Applies the demo inventory on SQLite, optionally `--extra-pools` more GPU pools (two nodes
of 8 A100 or H800 each), queues `--tasks` tasks through the API (workers off: they stay
queued, so each plan has a queue ahead of it), then times the four goal scenarios of
docs/concepts.md, R times each. Prints and saves JSON (p50 / p95 ms per scenario, options
and pools left out).

    python bench/recommend_bench.py [--tasks 500] [--extra-pools 0] [--repeat 10]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from hetpool.cli.files import read_documents
from hetpool.core.clock import FixedClock
from hetpool.engines.local import LocalBackend
from hetpool.server.app import create_app
from hetpool.server.db.session import Database
from hetpool.server.services import auth
from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import Settings

REPO = Path(__file__).resolve().parents[1]
BASE = {"tenant": "ai-lab/nlp/llm-sft", "framework": {"name": "pytorch", "version": ">=2.4"}}
SCENARIOS = {
    "lora-8b": {"model": "llama3.1-8b", "method": "lora", "tokens": 2e9, "deadline": "48h", "max_cost": 5000},
    "full-70b": {"model": "llama3.1-70b", "method": "full-finetune", "tokens": 1e9, "deadline": "7d"},
    "serve-72b": {"model": "qwen2.5-72b", "method": "inference", "latency_ms": 50},
    "batch-7b": {"model": "qwen2.5-7b", "method": "batch-inference", "tokens": 5e8, "deadline": "12h"},
}


def extra_pools(count: int) -> list[dict]:
    docs: list[dict] = [{"kind": "Cluster", "name": "bench-gpu", "backend": "local", "zone": "bj"}]
    for i in range(count):
        model = "nvidia-a100-80g" if i % 2 == 0 else "nvidia-h800"
        nodes = [f"bench-{i}-{j}" for j in range(2)]
        for node in nodes:
            docs.append(
                {
                    "kind": "Node",
                    "name": node,
                    "cluster": "bench-gpu",
                    "cpu_cores": 64,
                    "memory_gb": 1024,
                    "devices": [{"model": model, "count": 8}],
                    "stack": {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}, "frameworks": {"pytorch": "2.4.1"}},
                }
            )
        docs.append({"kind": "Pool", "name": f"bench-pool-{i}", "cluster": "bench-gpu", "model": model, "nodes": nodes, "price_per_hour": 20.0})
    return docs


def _top(answer: dict) -> str | None:
    if not answer["options"]:
        return None
    best = answer["options"][0]
    return f"{best['count']} x {best['model']} @ {best['pool']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--extra-pools", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or REPO / "bench" / "results" / (
        "recommend_bench.json" if not args.extra_pools else f"recommend_bench_{args.extra_pools}_pools.json"
    )
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=f"sqlite:///{tmp}/hetpool.db", run_workers=False)
        db = Database(settings.resolved_database_url())
        db.migrate()
        ctx = ServiceContext(settings=settings, db=db, clock=FixedClock(), backends={"local": LocalBackend(settings.backend_dir / "local")})
        with ctx.db.transaction() as session:
            token = auth.ensure_admin(session, ctx.clock.now())
        headers = {"Authorization": f"Bearer {token}"}
        with TestClient(create_app(ctx=ctx)) as client:
            documents, sources = read_documents([str(REPO / "examples" / "demo")])
            documents += extra_pools(args.extra_pools)
            applied = client.post(
                "/api/v1/apply", json={"documents": documents, "sources": sources + ["bench"] * (len(documents) - len(sources))}, headers=headers
            )
            assert applied.status_code == 200, applied.text
            task_docs, _ = read_documents([str(REPO / "examples" / "tasks")])
            runnable = [d for d in task_docs if d.get("name") != "too-big" and "goal" not in d]
            for i in range(args.tasks):
                response = client.post("/api/v1/tasks", json={**runnable[i % len(runnable)], "name": f"bench-{i}"}, headers=headers)
                assert response.status_code in (201, 422), response.text
            results = {}
            for name, goal in SCENARIOS.items():
                times, answer = [], None
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    response = client.post("/api/v1/tasks/recommend", json={**BASE, "name": name, "goal": goal}, headers=headers)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert response.status_code == 200, response.text
                    answer = response.json()
                times.sort()
                results[name] = {
                    "p50_ms": round(statistics.median(times), 1),
                    "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1),
                    "options": len(answer["options"]),
                    "excluded": len(answer["excluded"]),
                    "top": f"{answer['options'][0]['count']} x {answer['options'][0]['model']} @ {answer['options'][0]['pool']}"
                    if answer["options"]
                    else None,
                }
    report = {
        "benchmark": "recommend",
        "queued_tasks": args.tasks,
        "pools": 8 + args.extra_pools,
        "repeat": args.repeat,
        "scenarios": results,
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
    }
    print(json.dumps(report, indent=2))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
