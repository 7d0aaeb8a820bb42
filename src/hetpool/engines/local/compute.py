"""Runs placed work as processes on this machine, emulating the placed devices.

Each worker of a `LaunchRequest` is one detached supervisor (`runner.py`) that runs the
command under ``/bin/sh -c`` with the vendor's visible-devices variable set to the assigned
device indices — as an identity that is never root nor the server's, in a working directory
of its own, with a clean environment and resource limits (config.py, sandbox.py). All
state lives in files under ``<work_dir>/`` (private to the server), never in this object,
so a restarted server (a new `LocalBackend` on the same work_dir) finds, polls, cancels and
reads the logs of jobs that an earlier one started::

    jobs/<job_name>/request.json          the request, each worker's environment and the
                                          run-as identity (written first, exactly once)
    jobs/<job_name>/worker-<rank>/pid     the runner's pid (the runner leads its own group)
    jobs/<job_name>/worker-<rank>/output.log   the command's stdout and stderr
    jobs/<job_name>/worker-<rank>/exit_code    written by the runner when the command has ended
    jobs/<job_name>/worker-<rank>/cancelled    marker: the worker was told to stop
    jobs/<job_name>/failed                the gang's failure, as first decided (exit code, message)
    jobs/<job_name>/worker-<rank>/uid, workdir, cleaned   the sandbox (client.py)

Leases of dynamic uids are host-wide, in /var/lib/hetpool/uids/<uid> (client.py).

The command's working directory is ``<task_root>/<job_name>-w<rank>-<random>``, outside
work_dir, and is deleted when the command ends.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hetpool.engines.base import (
    SAFE_JOB_NAME,
    Backend,
    JobHandle,
    JobPhase,
    JobStatus,
    LaunchRequest,
    LogChunk,
    SupportsFractionalDevices,
    SupportsGang,
    SupportsLogStreaming,
    WorkerLaunch,
    job_name,
    worker_environment,
)
from hetpool.engines.files import create_exclusive, read_int, write_atomic
from hetpool.engines.local import client
from hetpool.engines.local.config import Identity, parse_config, resolve_identity
from hetpool.engines.local.sandbox import TASK_PATH, check_task_root, remove_tree

__all__ = ["LocalBackend"]

# A worker without a pid file this long after request.json was written was never started
# (the server died between writing the request and spawning it): report it as failed.
START_GRACE_S = 30.0


@dataclass(frozen=True)
class _Worker:
    """What the files (and /proc) say about one worker right now."""

    rank: int
    dir: Path
    pid: int | None
    alive: bool
    exit_code: int | None
    cancelled: bool
    never_started: bool  # no pid file long after the job was written

    @property
    def ended(self) -> bool:
        if self.alive:
            return False
        return self.exit_code is not None or self.pid is not None or self.cancelled or self.never_started


class LocalBackend(Backend, SupportsGang, SupportsLogStreaming, SupportsFractionalDevices):
    # Fractional devices: several tasks' processes may see the same device index; the
    # scheduler keeps their memory / compute shares within the device.
    kind = "local"

    def __init__(self, work_dir: Path, config: dict[str, str] | None = None) -> None:
        # Absolute, because the path is part of the runner's command line, which is how a
        # live runner is told apart from an unrelated process that reused its pid.
        self.work_dir = Path(work_dir).resolve()
        self.config = parse_config(dict(config or {}))  # LocalConfigError (a ValueError) names the key
        (self.work_dir / "jobs").mkdir(parents=True, exist_ok=True)
        # The control tree holds every task's output and request: the server's alone.
        os.chmod(self.work_dir, 0o700)
        self._children: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._sudo_checked: set[str] = set()

    # -- the contract ---------------------------------------------------------------------

    def submit(self, request: LaunchRequest) -> JobHandle:
        self._reap()
        if not request.workers:
            raise ValueError(f"{request.job_name}: a launch request needs at least one worker")
        ranks = [w.rank for w in request.workers]
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"{request.job_name}: duplicate worker ranks {sorted(ranks)}")
        job_dir = self._job_dir(request.job_name)
        if not (job_dir / "request.json").exists():
            # Refused before anything is recorded: a task that cannot run as a proper
            # identity fails with the reason (the dispatcher's message), never runs as us.
            identity = resolve_identity(self.config, request.tenant)
            task_root = check_task_root(self.config.task_root_for(self.work_dir), identity.via)
            self._check_sudo(identity)
            job_dir.mkdir(parents=True, exist_ok=True)
            if request.checkpointed and SAFE_JOB_NAME.fullmatch(request.task_id):
                # One per task, in the task root beside the working directories, kept across
                # attempts (the working directory is not): see sandbox.adopt_checkpoint_dir.
                request = dataclasses.replace(request, checkpoint_dir=str(task_root / f"ckpt-{request.task_id}"))
            # The environment is computed once, here, and stored: every worker of the gang, even
            # one started later by a restarted server, sees the same values (e.g. master port).
            payload = {
                "request": dataclasses.asdict(request),
                "env": {str(w.rank): _environment(request, w) for w in request.workers},
                "identity": identity.to_json(),
                "task_root": str(task_root),
                "limits": self.config.limits,
                "checkpoint_dir": request.checkpoint_dir,
                "passthrough": {k: os.environ[k] for k in ("LANG", *self.config.env_passthrough) if k in os.environ},
            }
            # request.json is the exactly-once key: only the submit that creates it defines the
            # job; a repeated submit uses what is stored and only starts workers never started.
            create_exclusive(job_dir / "request.json", json.dumps(payload, indent=2))
        stored = self._load(job_dir)
        for worker in stored["request"]["workers"]:
            wdir = job_dir / f"worker-{worker['rank']}"
            wdir.mkdir(exist_ok=True)
            if any((wdir / name).exists() for name in ("pid", "exit_code", "cancelled")):
                continue
            self._spawn(job_dir, wdir, worker["rank"])
        return JobHandle(backend=self.kind, job_id=request.job_name)

    def find(self, task_id: str, attempt: int) -> JobHandle | None:
        name = job_name(task_id, attempt)
        if SAFE_JOB_NAME.fullmatch(name) and (self.work_dir / "jobs" / name / "request.json").exists():
            return JobHandle(backend=self.kind, job_id=name)
        return None

    def poll(self, handles: list[JobHandle]) -> dict[str, JobStatus]:
        self._reap()
        statuses = {h.job_id: self._status(h.job_id) for h in handles}
        for name, status in statuses.items():
            if status.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED):
                self._drop_checkpoints(name)
        return statuses

    def _drop_checkpoints(self, name: str) -> None:
        """A job that ended other than by a graceful stop ends its task: its checkpoints go."""
        job_dir = self.work_dir / "jobs" / name
        if (job_dir / "stopping").exists() or (job_dir / "checkpoints-dropped").exists():
            return
        stored = self._load(job_dir)
        path, identity = stored.get("checkpoint_dir"), stored.get("identity")
        if path and identity is not None and os.path.lexists(path):
            if identity["via"] == "sudo":
                subprocess.run(
                    client.sudo_launch(identity, "--cleanup", path), env={"PATH": TASK_PATH}, capture_output=True, timeout=120, check=False
                )
            else:
                remove_tree(Path(path))
        create_exclusive(job_dir / "checkpoints-dropped", "")

    def workdir(self, handle: JobHandle, rank: int = 0) -> Path | None:
        """The working directory of a worker's command (deleted when the command has ended)."""
        if not SAFE_JOB_NAME.fullmatch(handle.job_id):
            return None
        try:
            return Path((self.work_dir / "jobs" / handle.job_id / f"worker-{rank}" / "workdir").read_text().strip())
        except FileNotFoundError:
            return None

    def cancel(self, handle: JobHandle) -> None:
        self._reap()
        workers = self._workers(handle.job_id)
        if workers is not None:
            self._stop([w for w in workers if not w.ended])

    def stop_gracefully(self, handle: JobHandle, signal_name: str, grace_s: float) -> None:
        """The runners pass `signal_name` to their commands and kill them after `grace_s`
        themselves (runner.py), so the grace holds even while the server is down."""
        self._reap()
        workers = self._workers(handle.job_id)
        if workers is None:
            return
        job_dir = self.work_dir / "jobs" / handle.job_id
        # First: it makes the outcome "stopped" (not failed) whatever the commands exit with.
        create_exclusive(job_dir / "stopping", json.dumps({"signal": signal_name, "grace_s": grace_s}))
        for w in workers:
            if w.ended:
                continue
            write_atomic(w.dir / "stop", json.dumps({"signal": signal_name, "grace_s": grace_s}))
            if w.pid is not None and w.alive:
                try:
                    os.kill(w.pid, signal.SIGUSR2)  # the runner reads w.dir/stop (see runner.on_stop)
                except ProcessLookupError:
                    pass

    def logs(self, handle: JobHandle, rank: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        workers = self._workers(handle.job_id)
        if workers is None:
            raise ValueError(f"unknown local job {handle.job_id!r}")
        by_rank = {w.rank: w for w in workers}
        if rank not in by_rank:
            raise ValueError(f"job {handle.job_id} has no worker rank {rank}; valid ranks: {sorted(by_rank)}")
        worker = by_rank[rank]
        path = worker.dir / "output.log"
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(max(limit, 4))  # at least one whole UTF-8 character
                size = os.fstat(f.fileno()).st_size
        except FileNotFoundError:
            data, size = b"", 0
        end = offset + len(data)
        at_eof = end >= size
        # Offsets count bytes; never split a UTF-8 character across chunks: hold back an
        # incomplete tail unless it is the very end of a finished log.
        final = worker.ended and at_eof
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data, final=final)
        held_back = len(decoder.getstate()[0])
        end -= held_back
        return LogChunk(text=text, offset=end, complete=final and held_back == 0)

    # -- internals --------------------------------------------------------------------------

    def _job_dir(self, name: str) -> Path:
        # The name becomes a directory: refuse anything that could escape jobs/.
        if not SAFE_JOB_NAME.fullmatch(name):
            raise ValueError(f"job name {name!r} is not usable as a directory name")
        return self.work_dir / "jobs" / name

    @staticmethod
    def _load(job_dir: Path) -> dict:
        return json.loads((job_dir / "request.json").read_text(encoding="utf-8"))

    def _spawn(self, job_dir: Path, wdir: Path, rank: int) -> None:
        # The runner's own stdout/stderr also go to output.log, so a runner that crashes
        # leaves its traceback where the user looks. No pipes: the runner must not depend on
        # this process staying alive, and start_new_session detaches it from our signals.
        with open(wdir / "output.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", client.RUNNER_MODULE, str(job_dir), str(rank)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=_runner_environment(),
            )
        with self._lock:
            self._children.append(proc)  # kept only to reap it (see _reap)
        # The runner writes its pid too (in case we die right here); whoever writes first
        # wins, and a runner that finds another pid there exits without running anything.
        create_exclusive(wdir / "pid", str(proc.pid))

    def _reap(self) -> None:
        # We are the runners' parent: without waiting on them, each finished runner would
        # stay a zombie for as long as the server lives.
        with self._lock:
            self._children = [p for p in self._children if p.poll() is None]

    def _workers(self, name: str) -> list[_Worker] | None:
        if not SAFE_JOB_NAME.fullmatch(name):
            return None
        job_dir = self.work_dir / "jobs" / name
        try:
            stored = self._load(job_dir)
            written = (job_dir / "request.json").stat().st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return None
        result = []
        for worker in stored["request"]["workers"]:
            rank = worker["rank"]
            wdir = job_dir / f"worker-{rank}"
            pid = read_int(wdir / "pid")
            alive = pid is not None and client.runner_alive(pid, job_dir, rank)
            exit_code = read_int(wdir / "exit_code")
            if pid is not None and not alive and exit_code is None:
                # "The runner died" fails the whole gang, so it must not rest on one look:
                # look again (the exit code may have just been written, /proc may have been
                # caught mid-update) before believing it.
                time.sleep(0.05)
                alive = client.runner_alive(pid, job_dir, rank)
                exit_code = read_int(wdir / "exit_code")
            result.append(
                _Worker(
                    rank=rank,
                    dir=wdir,
                    pid=pid,
                    alive=alive,
                    exit_code=exit_code,
                    cancelled=(wdir / "cancelled").exists(),
                    never_started=pid is None and time.time() - written > START_GRACE_S,
                )
            )
        return sorted(result, key=lambda w: w.rank)

    def _check_sudo(self, identity: Identity) -> None:
        """A server that is not root must be able to `sudo -n -u` to the task user."""
        if identity.via != "sudo" or identity.user in self._sudo_checked:
            return
        command = client.sudo_launch(identity.to_json(), "--check")
        check = subprocess.run(command, env={"PATH": TASK_PATH}, capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            why = (check.stderr or check.stdout).strip().splitlines()[-1:] or [f"exit code {check.returncode}"]
            raise PermissionError(
                f"cannot switch to user {identity.user!r} with sudo ({why[0]}); run deploy/local-runas.sh sudo <server-user> {identity.user} as root"
            )
        self._sudo_checked.add(identity.user)

    def _teardown(self, name: str, workers: list[_Worker]) -> None:
        # A runner that died (OOM killer, kill -9) could not tear its sandbox down: the
        # server does it, from the same files, so the uid is released and nothing is left.
        left = [w for w in workers if w.ended and w.pid is not None and not (w.dir / "cleaned").exists()]
        if not left:
            return
        job_dir = self.work_dir / "jobs" / name
        identity = self._load(job_dir).get("identity")
        for w in left:
            if identity is not None:
                client.finish(job_dir, w.rank, identity)

    def _status(self, name: str) -> JobStatus:
        workers = self._workers(name)
        if workers is None:
            return JobStatus(JobPhase.LOST, message=f"no local job {name}")
        self._teardown(name, workers)
        # A worker that failed on its own (not one we told to stop) fails the whole job.
        failures = []
        for w in workers:
            if w.cancelled or not w.ended:
                continue
            if w.exit_code is not None and w.exit_code != 0:
                failures.append((w.exit_code, f"worker rank {w.rank} exited with code {w.exit_code}"))
            elif w.exit_code is None and w.never_started:
                failures.append((None, f"worker rank {w.rank} was never started"))
            elif w.exit_code is None:
                failures.append((None, f"worker rank {w.rank}: runner died (pid {w.pid}) before the command ended"))
        running = [w for w in workers if not w.ended]
        if (self.work_dir / "jobs" / name / "stopping").exists():
            # Stopped for a checkpoint: however the commands exit, the job was stopped, and the
            # others keep their grace (a failed rank does not stop the gang early here).
            if running:
                return JobStatus(JobPhase.RUNNING, message="stopping: checkpoint grace")
            return JobStatus(JobPhase.CANCELLED, message="stopped gracefully (checkpoint kept)")
        verdict = _read_verdict(self.work_dir / "jobs" / name)
        if failures or verdict is not None:
            # A gang cannot go on without a member: stop the others. The verdict is written
            # first and read back, so the job's outcome is decided once (a later look at the
            # files never turns it into "cancelled"). It is reported as failed only once
            # every process is gone, so its devices are really free again.
            if verdict is None:
                code = next((c for c, _ in failures if c is not None), None)
                verdict = (code, "; ".join(m for _, m in failures))
                create_exclusive(self.work_dir / "jobs" / name / "failed", json.dumps({"exit_code": code, "message": verdict[1]}))
                verdict = _read_verdict(self.work_dir / "jobs" / name) or verdict
            self._stop([w for w in running if not w.cancelled])
            code, message = verdict
            if running:
                return JobStatus(JobPhase.RUNNING, message=f"stopping the other workers: {message}")
            return JobStatus(JobPhase.FAILED, exit_code=code, message=message)
        if any(w.cancelled for w in workers):
            if running:
                return JobStatus(JobPhase.RUNNING, message="cancelling")
            return JobStatus(JobPhase.CANCELLED, message="cancelled")
        # Done only when every runner has also torn its sandbox down (processes killed,
        # working directory gone, uid released): then the devices are really free.
        if all(w.exit_code == 0 and w.ended for w in workers):
            return JobStatus(JobPhase.SUCCEEDED, exit_code=0)
        if any(w.alive for w in workers):
            done = sum(w.exit_code == 0 for w in workers)
            return JobStatus(JobPhase.RUNNING, message=f"{done}/{len(workers)} workers finished")
        return JobStatus(JobPhase.PENDING, message="workers starting")

    def _stop(self, workers: list[_Worker]) -> None:
        # The marker comes first: it is what makes the outcome "cancelled", whether or not
        # the process is still there to signal, and it keeps a later submit from starting it.
        for w in workers:
            (w.dir / "cancelled").touch()
        for w in workers:
            if w.pid is None or not w.alive:
                continue
            try:
                if os.getpgid(w.pid) == w.pid:  # it leads its own group, as we started it
                    # The whole group: the command's children die too. The runner arms its
                    # own SIGKILL after a grace period, so we never block here.
                    os.killpg(w.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # ended in between


def _environment(request: LaunchRequest, worker: WorkerLaunch) -> dict[str, str]:
    """worker_environment, with a checkpoint directory per rank: with dynamic uids each
    worker of a gang runs as another uid, so they cannot share one directory."""
    env = worker_environment(request, worker)
    if request.checkpoint_dir:
        env["HETPOOL_CHECKPOINT_DIR"] = f"{request.checkpoint_dir}/rank-{worker.rank}"
    return env


def _read_verdict(job_dir: Path) -> tuple[int | None, str] | None:
    """The gang's failure as first decided (jobs/<name>/failed), if it has failed."""
    try:
        stored = json.loads((job_dir / "failed").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return stored["exit_code"], stored["message"]


def _runner_environment() -> dict[str, str]:
    """The runner needs to import hetpool and find `kill` and `sudo`; nothing else of ours."""
    env = {"PATH": TASK_PATH, "LANG": os.environ.get("LANG", "C.UTF-8")}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env
