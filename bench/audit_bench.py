"""Audit appends from N threads against PostgreSQL: appends/s and latency per append.

Each append is what an audited request does with its event: open a transaction, record
the event (services/audit.py), commit, and return once the event is in the chain.

  --mode legacy    every append links its event under the chain's lock, held to its commit
  --mode batched   appends commit pending rows; one chainer round per batch links them
                   (services/audit_chain.py, what every server does now)

A fresh database is made on the server for each mode and dropped afterwards; at the end
the chain is verified and every event counted.

  .venv/bin/python bench/audit_bench.py --url "$HETPOOL_TEST_POSTGRES_URL" --threads 16 --seconds 4 --hold-ms 0 3

--hold-ms keeps each transaction open that long after its event (the rest of a request: a
submit writes its approval request, idempotency record and commit after the event); the
legacy mode holds the chain's lock through it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, select, text

from hetpool.server.db.models_audit import AuditPendingRow
from hetpool.server.db.session import Database
from hetpool.server.services import audit, audit_chain

RESULTS = Path(__file__).parent / "results" / "audit_bench.json"


def _fresh_database(url: str) -> tuple[str, str]:
    name = "audit_bench_" + uuid.uuid4().hex[:10]
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, url.rsplit("/", 1)[0] + "/" + name


def _drop_database(url: str, name: str) -> None:
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _append(db: Database, thread: int, n: int, hold_s: float) -> None:
    with db.transaction() as session:
        audit.record(
            session,
            actor=f"bench-{thread}",
            action="task.submit",
            object_kind="Task",
            object_id=f"{thread}-{n}",
            after={"n": n},
            ts=datetime.now(UTC),
        )
        if hold_s:
            time.sleep(hold_s)  # the rest of the request's transaction (its task row and so on)


def run_mode(url: str, mode: str, threads: int, seconds: float, hold_ms: float) -> dict:
    name, db_url = _fresh_database(url)
    db = Database(db_url)
    try:
        db.migrate()
        chainer = audit_chain.attach(db, secrets.token_hex(32).encode()) if mode == "batched" else None
        latencies: list[list[float]] = [[] for _ in range(threads)]
        stop = time.monotonic() + seconds

        def worker(t: int) -> None:
            n = 0
            while time.monotonic() < stop:
                started = time.perf_counter()
                _append(db, t, n, hold_ms / 1000)
                latencies[t].append(time.perf_counter() - started)
                n += 1

        began = time.perf_counter()
        pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        elapsed = time.perf_counter() - began
        flat = sorted(x for per in latencies for x in per)
        with db.transaction() as session:
            broken = audit.verify(session)
            chained = audit.count(session)
            pending = len(session.execute(select(AuditPendingRow.id)).all())
        return {
            "mode": mode,
            "threads": threads,
            "seconds": round(elapsed, 2),
            "hold_ms": hold_ms,
            "appends": len(flat),
            "appends_per_s": round(len(flat) / elapsed, 1),
            "p50_ms": round(statistics.median(flat) * 1000, 2),
            "p99_ms": round(flat[int(0.99 * (len(flat) - 1))] * 1000, 2),
            "chain_rounds": chainer.rounds if chainer else len(flat),
            "chained_events": chained,
            "left_pending": pending,
            "chain_ok": broken is None,
        }
    finally:
        audit_chain.detach(db)
        db.dispose()
        _drop_database(url, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("HETPOOL_TEST_POSTGRES_URL", ""), help="PostgreSQL server URL (a database on it)")
    parser.add_argument("--mode", choices=("legacy", "batched", "both"), default="both")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--hold-ms", type=float, nargs="+", default=[0.0, 3.0], help="time each transaction stays open after recording its event (one run per value)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not args.url.startswith("postgresql"):
        parser.error("--url (or HETPOOL_TEST_POSTGRES_URL): a PostgreSQL URL is needed (deploy/postgres.sh start prints one)")
    modes = ("legacy", "batched") if args.mode == "both" else (args.mode,)
    results = []
    for hold in args.hold_ms:
        for mode in modes:
            results.append(run_mode(args.url, mode, args.threads, args.seconds, hold))
            print(json.dumps(results[-1]), flush=True)
    report = {"runs": results, "measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "cpus": os.cpu_count()}
    if len(modes) == 2:
        pairs = zip(results[::2], results[1::2], strict=True)
        report["speedup"] = {str(legacy["hold_ms"]): round(batched["appends_per_s"] / legacy["appends_per_s"], 2) for legacy, batched in pairs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
