"""Crash test: under a steady submit load, kill -9 the leader and the other replica at
random moments and check afterwards that every acknowledged task exists exactly once,
reached a terminal state and ran at most once.

Starts its own PostgreSQL (deploy/postgres.sh on port 55530, never the test instance) and
two `hetpool up --demo` replicas on it with a 2 s lease, sharing one data dir (the local
backend's job records must be visible to both). With the slurm backend selected the
replicas also import deploy/slurm.sh's cluster as `hpc` (--slurm-conf) and every other task
goes to its pools. Each task's command appends "<task id> <attempt> <hostname> <pid> <time>"
to a ledger file, so the runs are counted outside hetpool. Prints the counts and saves JSON
to bench/results/crash_test.json; exit code 1 when anything was lost, duplicated or ran twice.

    python bench/crash_test.py [--kills 10] [--duration 60] [--backends local,slurm] [--rate 100] [--slurm-kills 2] [--postgres-kills 1]

Besides the replicas it kills the engines (bench/crash_faults.py): slurmctld and the
PostgreSQL postmaster, kill -9, restarted by the deploy scripts; its PostgreSQL is durable.

See docs/operations-crash-test.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crash_faults import EngineFaults, Killer, log, plan  # noqa: E402
from lean_http import ConnectionFailed, Pool  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TERMINAL = {"succeeded", "failed", "cancelled"}
# Pools per backend (examples/demo and the `hpc` cluster deploy/slurm.sh + `hetpool up --slurm-conf` import).
POOLS = {"local": ["bj-a100-80g", "bj-h800"], "slurm": ["hpc-nvidia-h100", "hpc-nvidia-a100-80g"]}
# Audit actions after which a second attempt is legitimate (the task was asked to give its devices back).
RERUN_ACTIONS = ("task.preempt_requested", "task.reclaim")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the replicas ----------------------------------------------------------------------------


@dataclass
class Replica:
    name: str
    port: int
    database_url: str
    data_dir: Path
    slurm_conf: str
    env: dict
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"

    def start(self, timeout_s: float = 90) -> float:
        """Start (or restart) on the same port and database; returns seconds until /readyz answers 200."""
        t0 = time.monotonic()
        self.launch()
        return self.wait_ready(t0, timeout_s)

    def launch(self) -> None:
        cmd = [sys.executable, "-m", "hetpool.cli.main", "up", "--demo", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        cmd += ["--database-url", self.database_url]
        if self.slurm_conf:
            cmd += ["--slurm-conf", self.slurm_conf]
        with open(self.log_path, "ab") as out:
            out.write(f"\n==== start {self.starts + 1} at {time.strftime('%H:%M:%S')} ====\n".encode())
            out.flush()
            # Its own session: kill -9 of its group takes the server and whatever sbatch it runs,
            # never the local backend's runners (they start their own sessions).
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.starts += 1

    def wait_ready(self, t0: float, timeout_s: float = 90) -> float:
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready in {timeout_s}s:\n{self.log_path.read_text()[-3000:]}")

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def admin_token(replica: Replica) -> str:
    match = re.search(r"(hp_[A-Za-z0-9_-]{20,})", replica.log_path.read_text())
    if not match:
        raise SystemExit(f"no admin token in {replica.log_path} (is the database fresh?)")
    return match.group(1)


# -- the load --------------------------------------------------------------------------------


def task_body(name: str, pools: list[str], ledger: Path, run_s: float) -> dict:
    line = '"$HETPOOL_TASK_ID $HETPOOL_ATTEMPT $(hostname) $$ $(date +%s.%N)"'
    return {
        "name": name,
        "tenant": "ai-lab/nlp/llm-sft",
        "type": "training",
        "command": f"echo {line} >> {ledger}; sleep {run_s}",
        "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 0.5, "memory_gb": 0.5},
        "any_of": pools,  # the backend's pools: the scheduler picks
    }


@dataclass
class Load:
    replicas: list[Replica]
    token: str
    run_id: str
    backends: list[str]
    ledger: Path
    run_s: float
    rng: random.Random
    slurm_share: float = 0.5
    acked: dict[str, dict] = field(default_factory=dict)  # key -> {id, status, tries, backend, replica}
    given_up: dict[str, str] = field(default_factory=dict)
    tries: Counter = field(default_factory=Counter)
    replay_checks: int = 0
    replay_mismatches: list[dict] = field(default_factory=list)

    def backend_of(self, i: int) -> str:
        """Every task goes to local unless it is one of the Slurm share (spread evenly)."""
        if "slurm" not in self.backends or len(self.backends) == 1:
            return self.backends[0]
        return "slurm" if int((i + 1) * self.slurm_share) > int(i * self.slurm_share) else "local"

    async def submit_one(self, client: Pool, i: int, deadline: float) -> None:
        key = f"crash-{self.run_id}-{i:06d}"
        backend = self.backend_of(i)
        body = task_body(key, POOLS[backend], self.ledger, self.run_s)
        headers = {"Idempotency-Key": key}
        attempt = 0
        while time.monotonic() < deadline:
            replica = self.replicas[(i + attempt) % len(self.replicas)]  # spread, and switch replica on a retry
            attempt += 1
            try:
                response = await client.post(replica.url, "/api/v1/tasks", body, headers)
            except ConnectionFailed as exc:
                self.tries[f"connection error ({str(exc).split(':')[0]})"] += 1
                await asyncio.sleep(0.2)
                continue
            if response.status in (200, 201):
                self.tries[str(response.status)] += 1
                self.acked[key] = {"id": response.json()["id"], "status": response.status, "tries": attempt, "backend": backend}
                if self.rng.random() < 0.1:  # now and then, send it again on purpose: the same task must come back
                    await self.check_replay(client, key, body, headers)
                return
            self.tries[str(response.status)] += 1
            if response.status >= 500 or response.status == 429:
                await asyncio.sleep(0.2)
                continue
            self.given_up[key] = f"{response.status}: {response.text[:300]}"
            return
        self.given_up[key] = "no acknowledgement before the deadline"

    async def check_replay(self, client: Pool, key: str, body: dict, headers: dict) -> None:
        for replica in self.replicas:
            try:
                response = await client.post(replica.url, "/api/v1/tasks", body, headers)
            except ConnectionFailed:
                continue
            if response.status >= 500:
                continue
            self.replay_checks += 1
            if response.status != 200 or response.json().get("id") != self.acked[key]["id"]:
                self.replay_mismatches.append({"key": key, "status": response.status, "body": response.text[:300], "first": self.acked[key]})
            return

    async def run(self, rate: float, keep_going) -> int:
        """Submit at `rate`/s while keep_going() is true; then wait for the submits in flight.
        The client is bench/lean_http.py's: at 100/s httpx alone would take a third of a core
        from the servers under test."""
        client = Pool(headers={"Authorization": f"Bearer {self.token}"}, timeout=15.0)
        try:
            pending: set[asyncio.Task] = set()
            i = 0
            t0 = time.monotonic()
            while keep_going():
                task = asyncio.create_task(self.submit_one(client, i, deadline=time.monotonic() + 180))
                pending.add(task)
                task.add_done_callback(pending.discard)
                i += 1
                await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            if pending:
                await asyncio.wait(pending)
        finally:
            await client.close()
        return i


# -- the checks ------------------------------------------------------------------------------


def read_ledger(path: Path) -> list[tuple[str, int, str, str, str]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:
            rows.append((parts[0], int(parts[1]), parts[2], parts[3], parts[4]))
    return rows


def db_tasks(engine, run_id: str) -> list[dict]:
    from sqlalchemy import text

    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, name, state, attempt, preemptions, message, exit_code, backend FROM tasks WHERE name LIKE :p"),
            {"p": f"crash-{run_id}-%"},
        )
        return [dict(r._mapping) for r in rows]


def rerun_reasons(engine, task_ids: list[str]) -> dict[str, list[str]]:
    from sqlalchemy import bindparam, text

    if not task_ids:
        return {}
    stmt = text("SELECT object_id, action FROM audit_events WHERE object_kind = 'Task' AND object_id IN :ids AND action IN :actions")
    stmt = stmt.bindparams(bindparam("ids", expanding=True), bindparam("actions", expanding=True))
    found: dict[str, list[str]] = defaultdict(list)
    with engine.connect() as conn:
        for object_id, action in conn.execute(stmt, {"ids": task_ids, "actions": list(RERUN_ACTIONS)}):
            found[object_id].append(action)
    return found


def wait_terminal(engine, run_id: str, ids: set[str], settle_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < settle_s:
        states = {t["id"]: t["state"] for t in db_tasks(engine, run_id)}
        left = [i for i in ids if states.get(i) not in TERMINAL]
        if not left:
            break
        time.sleep(1)
    return time.monotonic() - t0


def check(engine, load: Load, ledger_rows: list) -> dict:
    tasks = db_tasks(engine, load.run_id)
    by_id = {t["id"]: t for t in tasks}
    by_name: dict[str, list[dict]] = defaultdict(list)
    for t in tasks:
        by_name[t["name"]].append(t)
    acked_ids = {a["id"] for a in load.acked.values()}
    lost = sorted(key for key, a in load.acked.items() if a["id"] not in by_id)
    duplicated = sorted(name for name, ts in by_name.items() if len(ts) > 1)
    duplicated += [m["key"] for m in load.replay_mismatches]
    runs: dict[tuple[str, int], list] = defaultdict(list)
    for row in ledger_rows:
        runs[(row[0], row[1])].append(row)
    attempts_run: dict[str, set[int]] = defaultdict(set)
    for task_id, attempt in runs:
        attempts_run[task_id].add(attempt)
    reasons = rerun_reasons(engine, sorted(attempts_run))
    ran_twice = []
    for (task_id, attempt), rows in sorted(runs.items()):
        if len(rows) > 1:
            ran_twice.append(
                {"task": task_id, "attempt": attempt, "why": "one attempt ran more than once", "lines": [" ".join(map(str, r)) for r in rows]}
            )
    for task_id, attempts in sorted(attempts_run.items()):
        row = by_id.get(task_id) or {}
        if len(attempts) > 1 and not row.get("preemptions") and not reasons.get(task_id):
            ran_twice.append({"task": task_id, "attempts": sorted(attempts), "why": "ran in more than one attempt, never preempted or reclaimed"})
    not_terminal = sorted((i, by_id[i]["state"]) for i in acked_ids if i in by_id and by_id[i]["state"] not in TERMINAL)
    failed = [t for t in tasks if t["id"] in acked_ids and t["state"] in ("failed", "cancelled")]
    failed_reasons = Counter(f"{t['state']}: {(t['message'] or '')[:160]}" for t in failed)
    succeeded_not_run = sorted(t["id"] for t in tasks if t["id"] in acked_ids and t["state"] == "succeeded" and t["id"] not in attempts_run)
    return {
        "accepted": len(load.acked),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "ran_twice": len(ran_twice),
        "not_terminal": len(not_terminal),
        "failed": len(failed),
        "succeeded": sum(1 for t in tasks if t["id"] in acked_ids and t["state"] == "succeeded"),
        "succeeded_without_a_ledger_line": len(succeeded_not_run),
        "preempted_or_reclaimed": sum(1 for t in tasks if t.get("preemptions") or reasons.get(t["id"])),
        "in_db_not_acknowledged": sorted(n for n in by_name if n not in load.acked),
        "by_backend": dict(Counter(t["backend"] or "-" for t in tasks if t["id"] in acked_ids)),
        "details": {
            "lost": lost,
            "duplicated": duplicated,
            "ran_twice": ran_twice,
            "not_terminal": not_terminal,
            "failed_reasons": dict(failed_reasons),
            "succeeded_without_a_ledger_line": succeeded_not_run,
            "replay_mismatches": load.replay_mismatches,
            "given_up": load.given_up,
        },
    }


# -- setup and cleanup -----------------------------------------------------------------------


def slurm_conf(start: bool) -> tuple[str, bool]:
    """The running deploy/slurm.sh cluster's conf; (conf, whether we started it)."""
    script = str(REPO / "deploy" / "slurm.sh")
    found = subprocess.run([script, "conf"], capture_output=True, text=True)
    if found.returncode == 0 and found.stdout.strip():
        return found.stdout.strip(), False
    if not start:
        raise SystemExit(
            "the slurm backend needs deploy/slurm.sh's cluster: run `deploy/slurm.sh start`, pass --start-slurm, or use --backends local"
        )
    return subprocess.run([script, "start"], capture_output=True, text=True, check=True).stdout.strip(), True


def processes_under(path: Path) -> list[int]:
    """Pids whose command line names `path` (the local backend's runners name their job dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmdline:
            pids.append(int(entry.name))
    return pids


def kill_runners(data_dir: Path) -> int:
    pids = processes_under(data_dir)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.killpg(pid, sig)  # a runner leads its own session: its command goes with it
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if sig == signal.SIGTERM and pids:
            time.sleep(1)
    return len(pids)


def cancel_slurm_jobs(task_ids: set[str], conf: str) -> int:
    env = {**os.environ, "SLURM_CONF": conf}
    out = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, env=env).stdout
    ours = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and any(parts[1].startswith(f"hetpool-{t}-") for t in task_ids):
            ours.append(parts[0])
    if ours:
        subprocess.run(["scancel", *ours], capture_output=True, env=env)
    return len(ours)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="at least this many kill -9 (alternating leader / other replica)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of submit load (longer if the kills need it)")
    parser.add_argument("--backends", default="local,slurm", help="comma-separated: local, slurm")
    parser.add_argument("--rate", type=float, default=100.0, help="task submissions per second, spread over both replicas")
    parser.add_argument("--slurm-kills", type=int, default=2, help="kill -9 of slurmctld during the load (with the slurm backend)")
    parser.add_argument(
        "--slurm-share",
        type=float,
        default=0.25,
        help="share of the tasks sent to Slurm with both backends (its 12 GPUs run ~3 jobs/s here: more would only lengthen the settle)",
    )
    parser.add_argument("--postgres-kills", type=int, default=1, help="kill -9 of the PostgreSQL postmaster during the load")
    parser.add_argument("--run-s", type=float, default=1.0, help="how long each task's command sleeps")
    parser.add_argument("--settle", type=float, default=1800.0, help="seconds to wait for every acknowledged task to end")
    parser.add_argument("--pg-port", type=int, default=55530)
    parser.add_argument("--start-slurm", action="store_true", help="start deploy/slurm.sh if it is not running (and stop it afterwards)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, ledger) even when all checks pass")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "crash_test.json")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = sorted(set(backends) - set(POOLS))
    if bad or not backends:
        parser.error(f"--backends: unknown {bad or 'empty'}; allowed values: {', '.join(POOLS)}")
    if args.kills < 0 or args.rate <= 0 or args.duration <= 0:
        parser.error("--kills must be >= 0, --rate and --duration > 0")
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    rng = random.Random(seed)
    run_id = f"{rng.randrange(16**6):06x}"

    work = Path(f"/tmp/hetpool-crash-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    data_dir = work / "data"
    data_dir.mkdir(parents=True)
    ledger = work / "ledger.txt"
    ledger.touch()
    # Tasks run as their own identities (never the server's): they may only append here.
    ledger.chmod(0o666)
    work.chmod(0o755)
    # Durable (fsync, synchronous_commit on): a kill -9 of PostgreSQL must not lose what it acknowledged.
    pg_env = {**os.environ, "HETPOOL_PG_PORT": str(args.pg_port), "HETPOOL_PG_DIR": f"/tmp/hetpool-pg-crash-{args.pg_port}"}
    pg_env["HETPOOL_PG_DURABLE"] = "1"
    pg = str(REPO / "deploy" / "postgres.sh")
    conf, started_slurm = slurm_conf(args.start_slurm) if "slurm" in backends else ("", False)
    subprocess.run([pg, "stop"], env=pg_env, capture_output=True)
    shutil.rmtree(pg_env["HETPOOL_PG_DIR"], ignore_errors=True)
    database_url = subprocess.run([pg, "start"], env=pg_env, capture_output=True, text=True, check=True).stdout.strip()
    server_env = {
        **os.environ,
        "HETPOOL_LEADER_LEASE_S": "2",
        "HETPOOL_LEADER_RENEW_S": "0.5",
        "HETPOOL_RATE_LIMIT_PER_S": "0",
        "PYTHONUNBUFFERED": "1",
    }
    replicas = [Replica(name, free_port(), database_url, data_dir, conf, server_env) for name in ("replica-a", "replica-b")]
    log(f"run {run_id} seed {seed}: backends {backends}, rate {args.rate}/s, {args.kills} kills over {args.duration:.0f}s; work dir {work}")
    killer = None
    faults = None
    load = None
    submitted = 0
    exit_code = 1
    report: dict = {}
    try:
        replicas[0].start()  # migrates, creates the admin and loads the demo before the second one starts
        token = admin_token(replicas[0])
        replicas[1].start()
        log(f"replicas up: {[r.url for r in replicas]}")
        killer = Killer(replicas, token, args.kills, args.duration, rng)
        slurm_kills = args.slurm_kills if "slurm" in backends else 0
        faults = EngineFaults(plan(args.duration, slurm_kills, args.postgres_kills, rng), pg_env, killer.lock, rng, log, slurm_conf=conf)
        load = Load(replicas, token, run_id, backends, ledger, args.run_s, rng, slurm_share=args.slurm_share)
        thread = threading.Thread(target=killer.run, daemon=True)
        fault_thread = threading.Thread(target=faults.run, daemon=True)
        t0 = time.monotonic()
        thread.start()
        fault_thread.start()
        hard_stop = t0 + 3 * args.duration + 60

        def keep_going() -> bool:
            # Until the duration is over and the kills are done (then a little longer, so the last
            # recovery happens under load), never past 3x the duration.
            if time.monotonic() > hard_stop:
                return False
            return time.monotonic() - t0 < args.duration or thread.is_alive() or len(faults.done) < len(faults.events) and not faults.errors

        submitted = asyncio.run(load.run(args.rate, keep_going))
        killer.stop_event.set()
        thread.join(120)
        fault_thread.join(120)  # its planned faults are done (keep_going waited for them); its operator goes on
        load_s = time.monotonic() - t0
        log(f"load over after {load_s:.0f}s: {submitted} submissions, {len(load.acked)} acknowledged, {len(killer.done)} kills")
        for r in replicas:  # a kill may have left one down (the killer stopped mid-restart)
            if not r.alive():
                r.start()
        from sqlalchemy import create_engine

        engine = create_engine(database_url)
        settle = wait_terminal(engine, run_id, {a["id"] for a in load.acked.values()}, args.settle)
        time.sleep(min(3.0, args.run_s + 1))  # a late duplicate run would show in the ledger now
        faults.stop_event.set()
        result = check(engine, load, read_ledger(ledger))
        engine.dispose()
        takeovers = [k["takeover_s"] for k in killer.done if "takeover_s" in k]
        server_logs = "".join(r.log_path.read_text(errors="replace") for r in replicas)
        report = {
            "benchmark": "crash_test",
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            "run_id": run_id,
            "seed": seed,
            "backends": backends,
            "rate_per_s": args.rate,
            "slurm_share": args.slurm_share if "slurm" in backends and len(backends) > 1 else None,
            "duration_s": round(load_s, 1),
            "submitted": submitted,
            "submit_responses": dict(load.tries),
            "replay_checks": load.replay_checks,
            "kills": len(killer.done),
            "kills_of_leader": sum(1 for k in killer.done if k["role"] == "leader"),
            "takeover_s": {"min": min(takeovers, default=None), "max": max(takeovers, default=None)},
            "restart_ready_s_max": max((k["restart_ready_s"] for k in killer.done), default=None),
            "settle_s": round(settle, 1),
            "leadership_lost_log_lines": server_logs.count("LeadershipLost") + server_logs.count("lost by"),
            **{k: v for k, v in result.items() if k != "details"},
            "slurmctld_kills": sum(1 for f in faults.done if f["what"] == "slurmctld"),
            "postgres_kills": sum(1 for f in faults.done if f["what"] == "postgres"),
            "kill_log": killer.done,
            "engine_fault_log": faults.done,
            "slurm_nodes_resumed": faults.resumed,
            "killer_errors": killer.errors + faults.errors,
            "details": result["details"],
            "work_dir": str(work),
        }
        bad_counts = {k: report[k] for k in ("lost", "duplicated", "ran_twice") if report[k]}
        faults_short = len(faults.done) < len(faults.events)
        exit_code = 1 if bad_counts or killer.errors or faults.errors or faults_short or report["kills"] < args.kills else 0
    finally:
        if killer:
            killer.stop_event.set()
        if faults:
            faults.stop_event.set()
        for r in replicas:
            r.stop()
        runners = kill_runners(data_dir)
        cancelled = cancel_slurm_jobs({a["id"] for a in load.acked.values()} if load else set(), conf) if conf else 0
        subprocess.run([pg, "stop"], env=pg_env, capture_output=True)
        shutil.rmtree(pg_env["HETPOOL_PG_DIR"], ignore_errors=True)
        if started_slurm:
            subprocess.run([str(REPO / "deploy" / "slurm.sh"), "stop"], capture_output=True)
        log(f"cleaned up: servers stopped, {runners} runner processes ended, {cancelled} Slurm jobs cancelled, PostgreSQL on {args.pg_port} stopped")
    summary_keys = ["accepted", "lost", "duplicated", "ran_twice", "not_terminal", "failed", "succeeded", "kills", "kills_of_leader"]
    summary_keys += ["slurmctld_kills", "postgres_kills", "rate_per_s"]
    print(json.dumps(report, indent=2, default=str))
    print("\n" + "  ".join(f"{k}={report.get(k)}" for k in summary_keys))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"saved {args.out}")
    if exit_code == 0 and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"logs and ledger kept in {work}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
