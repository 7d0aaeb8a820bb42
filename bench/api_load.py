"""Load benchmark: task submissions per second and their latency through the REST API of a
real `hetpool up` process on PostgreSQL, with dashboard-style reads running alongside.

Starts its own throwaway PostgreSQL (deploy/postgres.sh on port 55520, so it never touches
the test instance) unless --database-url is given, starts `hetpool up --demo` against it,
then runs --clients concurrent submitters (asyncio, one keep-alive connection each, bench/lean_http.py) and --readers
concurrent readers (GET /api/v1/tasks?limit=50, /api/v1/stats/capacity, /api/v1/stats/workload)
for --duration seconds; each reader reads once per --read-interval (1 s: two readers are
about three dashboard pages open; 0: back to back, a read stress). The server's own workers
run unless --no-workers: then the numbers are the API path alone. Its PostgreSQL is durable
(fsync and synchronous commit on, as in production) unless --no-durable. Submitted tasks
are 8-GPU trainings that sleep, so the estate fills up and the rest queue, the way a busy
day looks. Prints and saves JSON to bench/results/api_load.json.

    python bench/api_load.py [--duration 20] [--clients 16] [--readers 2] [--read-interval 1] [--replicas 1] [--no-workers] [--no-durable]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lean_http import Connection, ConnectionFailed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results" / "api_load.json"
PG_ENV = {"HETPOOL_PG_PORT": "55520", "HETPOOL_PG_DIR": "/tmp/hetpool-pg-bench"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def start_server(database_url: str, workers: bool, data_dir: Path, name: str = "server") -> tuple[subprocess.Popen, str, str]:
    port = free_port()
    log = data_dir / f"{name}.log"
    cmd = [sys.executable, "-m", "hetpool.cli.main", "up", "--demo", "--port", str(port), "--data-dir", str(data_dir), "--database-url", database_url]
    cmd.append("--workers" if workers else "--no-workers")
    with open(log, "wb") as out:
        # One admin token drives every client: the per-token rate limit (100/s by default)
        # would cap the figure, so it is off here; the report says so.
        env = {**os.environ, "HETPOOL_RATE_LIMIT_PER_S": "0"}
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        raise SystemExit("server did not start:\n" + log.read_text())
    match = re.search(r"(hp_[A-Za-z0-9_-]{20,})", log.read_text())
    return proc, url, match.group(1) if match else ""


def task_body(i: int) -> dict:
    return {
        "name": f"load-{i}",
        "tenant": "ai-lab/nlp/llm-sft",
        "template": "pytorch-ddp",
        "workers": 1,
        "command": "sleep 30",
    }


async def run_load(urls: list[str], token: str, duration: float, clients: int, readers: int, read_interval: float = 0.0) -> dict:
    headers = {"Authorization": f"Bearer {token}"}
    submit_ms: list[float] = []
    read_ms: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    counter = iter(range(10**9))
    end = time.perf_counter() + duration

    # One keep-alive connection per submitter and per reader; they are spread over the
    # replicas round-robin, the way a load balancer in front of them would.
    def connection(i: int) -> Connection:
        return Connection(urls[i % len(urls)], headers=headers, timeout=30)

    async def submitter(conn: Connection) -> None:
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            try:
                response = await conn.post("/api/v1/tasks", task_body(next(counter)))
            except ConnectionFailed as exc:
                errors[f"submit {exc}"[:80]] = errors.get(f"submit {exc}"[:80], 0) + 1
                continue
            elapsed = (time.perf_counter() - t0) * 1000
            if response.status == 201:
                submit_ms.append(elapsed)
            else:
                key = f"submit {response.status}"
                errors[key] = errors.get(key, 0) + 1

    async def reader(conn: Connection) -> None:
        paths = ["/api/v1/tasks?limit=50", "/api/v1/stats/capacity", "/api/v1/stats/workload?window=24h"]
        i = 0
        while time.perf_counter() < end:
            path = paths[i % len(paths)]
            i += 1
            t0 = time.perf_counter()
            try:
                response = await conn.get(path)
            except ConnectionFailed as exc:
                errors[f"read {exc}"[:80]] = errors.get(f"read {exc}"[:80], 0) + 1
                continue
            read_ms.setdefault(path, []).append((time.perf_counter() - t0) * 1000)
            if response.status != 200:
                errors[f"read {response.status}"] = errors.get(f"read {response.status}", 0) + 1
            if read_interval > 0:  # a dashboard polls; 0: read back to back (a read stress)
                await asyncio.sleep(max(0.0, t0 + read_interval - time.perf_counter()))

    conns = [connection(i) for i in range(clients + readers)]
    try:
        started = time.perf_counter()
        await asyncio.gather(*[submitter(conns[i]) for i in range(clients)], *[reader(conns[clients + i]) for i in range(readers)])
        wall = time.perf_counter() - started
    finally:
        for conn in conns:
            await conn.close()
    return {
        "wall_s": round(wall, 2),
        "submitted": len(submit_ms),
        "submissions_per_s": round(len(submit_ms) / wall, 1),
        "submit_ms": {name: round(percentile(submit_ms, q), 1) for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
        "reads": {
            path: {"count": len(v), "p50_ms": round(percentile(v, 0.5), 1), "p99_ms": round(percentile(v, 0.99), 1)} for path, v in read_ms.items()
        },
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument(
        "--read-interval",
        type=float,
        default=1.0,
        help="seconds from one read's start to a reader's next (a dashboard page polls 3 of these every 5 s); 0: back to back, a read stress",
    )
    parser.add_argument("--database-url", default="", help="default: a throwaway PostgreSQL from deploy/postgres.sh on port 55520")
    parser.add_argument("--replicas", type=int, default=1, help="hetpool server processes on the one database, clients spread over them")
    parser.add_argument("--no-workers", action="store_true", help="measure the API alone (no scheduler / dispatcher in the server)")
    parser.add_argument(
        "--no-durable",
        action="store_true",
        help="its own PostgreSQL without fsync and synchronous commit (as the tests run it); default: durable, as in production",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    own_pg = not args.database_url
    env = {**os.environ, **PG_ENV, "HETPOOL_PG_DURABLE": "0" if args.no_durable else "1"}
    if own_pg:
        subprocess.run([str(REPO / "deploy" / "postgres.sh"), "stop"], env=env, capture_output=True)
        subprocess.run(["rm", "-rf", PG_ENV["HETPOOL_PG_DIR"]], check=True)
        base = subprocess.run([str(REPO / "deploy" / "postgres.sh"), "start"], env=env, capture_output=True, text=True, check=True).stdout.strip()
        database_url = base
    else:
        database_url = args.database_url
    data_dir = Path(f"/tmp/hetpool-api-load-{os.getpid()}")
    data_dir.mkdir(parents=True, exist_ok=True)
    # The first replica creates the schema and the demo inventory and prints the admin
    # token; the others join the same database (leader election picks one to schedule).
    procs, urls = [], []
    token = ""
    try:
        for n in range(args.replicas):
            proc, url, printed = start_server(database_url, not args.no_workers, data_dir, name=f"replica-{n}")
            procs.append(proc)
            urls.append(url)
            token = token or printed
        if not token:
            raise SystemExit("no admin token in the first replica's log (is the database fresh?)")
        result = asyncio.run(run_load(urls, token, args.duration, args.clients, args.readers, args.read_interval))
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(20)
        subprocess.run(["pkill", "-f", str(data_dir)], capture_output=True)  # the local backend's sleeping runners
        if own_pg:
            subprocess.run([str(REPO / "deploy" / "postgres.sh"), "stop"], env=env, capture_output=True)
    report = {
        "benchmark": "api_load",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "database": "postgresql"
        if not own_pg
        else ("postgresql, fsync and synchronous_commit off" if args.no_durable else "postgresql, durable (fsync, synchronous_commit on)"),
        "server_workers": not args.no_workers,
        "replicas": args.replicas,
        "clients": args.clients,
        "readers": args.readers,
        "read_interval_s": args.read_interval,
        "duration_s": args.duration,
        "rate_limit": "off (one token drives every client)",
        **result,
        "target": {"submissions_per_s": 300, "p99_ms": 200},
    }
    print(json.dumps(report, indent=2))
    out = args.out
    if out == DEFAULT_OUT:  # one file per set-up, named by what differs from the default
        suffix = "".join(
            part
            for part, on in (
                ("_no_workers", args.no_workers),
                (f"_{args.replicas}_replicas", args.replicas > 1),
                ("_read_stress", args.read_interval <= 0),
                ("_not_durable", args.no_durable),
            )
            if on
        )
        out = DEFAULT_OUT.with_name(f"api_load{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
