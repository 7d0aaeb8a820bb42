"""Faults for bench/crash_test.py. `Killer`: kill -9 of the replicas, alternately the
leader and the other one, each restarted on its port. `EngineFaults`: kill -9 of what
hetpool depends on, at planned moments of the load — the Slurm controller (restarted by `deploy/slurm.sh
start-controller`, which keeps its saved state, so running jobs survive) and the
PostgreSQL postmaster (restarted by `deploy/postgres.sh start`: crash recovery from the WAL).
The servers are not told: they must reconnect and carry on by themselves.

One fault at a time: the crash test's replica killer and these share `lock`, so that a
replica never restarts while its database is down (its start-up needs it) and each
recovery is seen on its own.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
KINDS = ("slurmctld", "postgres")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def leader_pid(replicas: list, token: str) -> int | None:
    """The pid in the `workers` lease holder (hostname:pid:random), asked of any live replica."""
    for r in replicas:
        if not r.alive():
            continue
        try:
            body = httpx.get(r.url + "/api/v1/leader", headers={"Authorization": f"Bearer {token}"}, timeout=3).json()
        except (httpx.HTTPError, ValueError):
            continue
        holder = next((g.get("holder") for g in body.get("groups", []) if g.get("group") == "workers"), None)
        return int(holder.split(":")[1]) if holder else None
    return None


@dataclass
class Killer:
    replicas: list
    token: str
    kills: int
    duration: float
    rng: random.Random
    lock: threading.Lock = field(default_factory=threading.Lock)  # one fault at a time (crash_faults.py)
    done: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    started: float = 0.0

    def run(self) -> None:
        started = self.started = time.monotonic()
        if self.kills <= 0:
            return  # --kills 0: the engine faults (or none) alone
        interval = self.duration / (self.kills + 1)
        want_leader = True
        try:
            while not self.stop_event.is_set():
                if len(self.done) >= self.kills and time.monotonic() - started >= self.duration:
                    return
                if self.stop_event.wait(self.rng.uniform(0.4, 1.6) * interval):
                    return
                with self.lock:
                    self._kill_one(want_leader)
                want_leader = not want_leader
        except Exception as exc:  # keep the load running; the report names it
            self.errors.append(repr(exc))
            log(f"killer stopped: {exc!r}")

    def _kill_one(self, want_leader: bool) -> None:
        # Wait (bounded) for a leader to exist: right after a kill the lease may still be expiring.
        deadline = time.monotonic() + 30
        pid = leader_pid(self.replicas, self.token)
        while pid is None and time.monotonic() < deadline:
            time.sleep(0.2)
            pid = leader_pid(self.replicas, self.token)
        leader = next((r for r in self.replicas if r.proc and r.proc.pid == pid), None)
        if want_leader and leader is not None:
            target, role = leader, "leader"
        else:
            target = next(r for r in self.replicas if r is not leader)
            role = "standby" if leader is not None else "no-leader-known"
        survivor = next(r for r in self.replicas if r is not target)
        t_kill = time.monotonic()
        target.kill9()
        record = {"n": len(self.done) + 1, "at_s": round(t_kill - self.started, 1), "target": target.name, "role": role, "pid": target.proc.pid}
        log(f"kill -9 #{record['n']}: {target.name} ({role}, pid {target.proc.pid})")
        # Down for a random 0-2 s, then back on the same port and database (booting in the
        # background while the takeover is timed).
        time.sleep(self.rng.uniform(0, 2))
        t_launch = time.monotonic()
        target.launch()
        if role == "leader":
            # Takeover: the first holder that is not the killed pid (usually the survivor; the
            # restarted replica may win if it is up before the old lease expires).
            deadline = time.monotonic() + 30
            new = leader_pid(self.replicas, self.token)
            while (new is None or new == record["pid"]) and time.monotonic() < deadline:
                time.sleep(0.1)
                new = leader_pid(self.replicas, self.token)
            record["new_leader"] = next((r.name for r in self.replicas if r.proc and r.proc.pid == new), None)
            record["takeover_s"] = round(time.monotonic() - t_kill, 2)
        record["restart_ready_s"] = round(target.wait_ready(t_launch), 2)
        record["survivor_alive"] = survivor.alive()
        self.done.append(record)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def plan(duration: float, slurm_kills: int, postgres_kills: int, rng: random.Random) -> list[tuple[float, str]]:
    """(seconds after the start, what) spread over the middle of the load: a fault at the
    very start or end would test little."""
    events = [("slurmctld", k) for k in range(slurm_kills)] + [("postgres", k) for k in range(postgres_kills)]
    rng.shuffle(events)
    n = len(events)
    return [(duration * (i + 1) / (n + 1) * rng.uniform(0.85, 1.15), what) for i, (what, _k) in enumerate(events)]


@dataclass
class EngineFaults:
    events: list[tuple[float, str]]
    pg_env: dict
    lock: threading.Lock
    rng: random.Random
    log: callable
    slurm_conf: str = ""
    done: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    resumed: list[dict] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        started = time.monotonic()
        if self.slurm_conf and any(what == "slurmctld" for _, what in self.events):
            threading.Thread(target=self.resume_duplicate_drains, daemon=True).start()
        try:
            for at, what in sorted(self.events):
                if self.stop_event.wait(max(0.0, started + at - time.monotonic())):
                    return
                with self.lock:
                    record = {"n": len(self.done) + 1, "at_s": round(time.monotonic() - started, 1), "what": what}
                    record.update(self._kill_postgres() if what == "postgres" else self._kill_slurmctld())
                    self.done.append(record)
                    self.log(f"engine fault #{record['n']}: {what} kill -9 (pid {record['pid']}), back after {record['down_s']} s")
        except Exception as exc:  # keep the load running; the report names it
            self.errors.append(repr(exc))
            self.log(f"engine faults stopped: {exc!r}")

    def _kill_postgres(self) -> dict:
        script = str(REPO / "deploy" / "postgres.sh")
        pid = int(subprocess.run([script, "pid"], env=self.pg_env, capture_output=True, text=True, check=True).stdout.strip())
        t0 = time.monotonic()
        # The postmaster and every backend at once, as a crash of the server takes them: a
        # backend left alive would hold the port and the shared memory the restart needs.
        for victim in [pid, *_children(pid)]:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(self.rng.uniform(1, 3))
        subprocess.run([script, "start"], env=self.pg_env, capture_output=True, text=True, check=True)
        return {"pid": pid, "down_s": round(time.monotonic() - t0, 2)}

    def resume_duplicate_drains(self) -> None:
        """What an operator does after slurmctld lost its newest state (kill -9, no HA):
        slurmd still runs jobs the restarted controller gave away again, reports the
        "Duplicate jobid" and the controller drains the node. Resume such nodes (only those)
        until the run ends; each resume is counted in the report."""
        env = {**os.environ, "SLURM_CONF": self.slurm_conf}
        while not self.stop_event.wait(3):
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], capture_output=True, text=True, env=env).stdout
            drained = sorted(
                {
                    n
                    for n, state, why in (line.split("|", 2) for line in out.splitlines() if line.count("|") == 2)
                    if "drain" in state and "Duplicate jobid" in why
                }
            )
            for name in drained:
                subprocess.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], capture_output=True, env=env)
                self.resumed.append({"node": name, "at": time.strftime("%H:%M:%S")})
                self.log(f"operator: resumed {name} (drained by the restarted slurmctld: Duplicate jobid)")

    def _kill_slurmctld(self) -> dict:
        pid_file = Path(os.environ.get("HETPOOL_SLURM_DIR", "/tmp/hetpool-slurm")) / "run" / "slurmctld.pid"
        pid = int(pid_file.read_text().split()[0])
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        time.sleep(self.rng.uniform(2, 5))
        subprocess.run([str(REPO / "deploy" / "slurm.sh"), "start-controller"], capture_output=True, text=True, check=True)
        return {"pid": pid, "down_s": round(time.monotonic() - t0, 2)}
