"""Benchmark: how long the dashboard's pages and /metrics take to render on a busy estate.

Applies the demo inventory on SQLite, submits N tasks through the API (they queue: the
workers are off, so the queue is as long as it gets), finishes a share of them with
usage in the history, then times each page — which reads the REST API in-process with the
user's token, exactly as in production — and /metrics, R times each. Prints and saves JSON
to bench/results/dashboard_bench.json (p50 / p95 ms per page).

    python bench/dashboard_bench.py [--tasks 1000] [--repeat 15]
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

from hetpool.engines.local import LocalBackend
from hetpool.cli.files import read_documents
from hetpool.core.clock import FixedClock
from hetpool.server.app import create_app
from hetpool.server.db.session import Database
from hetpool.server.services import auth
from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import Settings

REPO = Path(__file__).resolve().parents[1]
PAGES = [
    "/",
    "/?fragment=summary",
    "/resources",
    "/pools/bj-a100-80g",
    "/tasks",
    "/tasks?fragment=task-table",
    "/tasks/new",
    "/tenants",
    "/approvals",
    "/cost",
    "/audit",
    "/metrics",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "dashboard_bench.json")
    args = parser.parse_args()
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
            assert client.post("/api/v1/apply", json={"documents": documents, "sources": sources}, headers=headers).status_code == 200
            task_docs, _ = read_documents([str(REPO / "examples" / "tasks")])
            runnable = [d for d in task_docs if d.get("name") != "too-big"]
            started = time.perf_counter()
            for i in range(args.tasks):
                doc = {**runnable[i % len(runnable)], "name": f"bench-{i}"}
                response = client.post("/api/v1/tasks", json=doc, headers=headers)
                assert response.status_code in (201, 422), response.text
            submit_s = time.perf_counter() - started
            assert client.post("/login", data={"token": token, "next": "/"}, follow_redirects=False).status_code == 303
            results = {}
            for path in PAGES:
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    response = client.get(path)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert response.status_code == 200, (path, response.status_code, response.text[:300])
                times.sort()
                p50, p95 = statistics.median(times), times[int(0.95 * (len(times) - 1))]
                results[path] = {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "bytes": len(response.content)}
                print(f"{path:32} p50 {p50:8.1f} ms   p95 {p95:8.1f} ms   {len(response.content) / 1024:.1f} KiB")
    report = {
        "benchmark": "dashboard_bench",
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        "tasks": args.tasks,
        "repeat": args.repeat,
        "submit_s": round(submit_s, 2),
        "pages": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
