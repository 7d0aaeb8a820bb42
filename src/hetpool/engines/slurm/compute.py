"""Runs placed work on a Slurm cluster: one sbatch per task (mapping in docs/backends.md#the-slurm-backend).

The server talks to Slurm with its command-line clients (sbatch, squeue, scancel, scontrol)
and keeps each job's state in files under ``<work_dir>/jobs/<job_name>/``, which the Slurm
nodes must see under the same path (a shared filesystem; one host here). Nothing lives in
this object, so a new `SlurmBackend` on the same work_dir finds, polls, cancels and reads
the logs of jobs an earlier one submitted — also after slurmctld has forgotten them
(MinJobAge after the end; without slurmdbd there is nothing else to ask)::

    request.json      the request, each worker's environment and the run-as account (written first, exclusively)
    job.sh worker.sh env-<rank>.sh command.sh   what sbatch and srun run (script.py)
    slurm_job_id      written by submit once sbatch has answered
    cancel_requested  marker: hetpool asked for the cancel
    final.json        the terminal status, once known (it never changes after that)
    out/              the job's own (its run-as account's; runas.py), everything the job writes:
      started           the job id again, written by the batch script when the job starts
      worker-<rank>/output.log   the worker's stdout and stderr
      worker-<rank>/exit_code    written by the worker wrapper when the command has ended
      first-failure/rank         "<rank> <code>" of the first worker that failed
      result            the batch script's last word: "exit <code> [rank <r>]" or "signal TERM"
      batch.log         the batch step's own output (where Slurm reports launch errors)

Jobs run as a mapped Unix account, never as the server (runas.py: run_as_user, run_as_tenants,
jobs_dir), with `--export=NONE`: nothing of the server's environment reaches them, and the
Slurm commands themselves get only PATH, LANG and SLURM_CONF.
"""

from __future__ import annotations

import codecs
import dataclasses
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.base import (
    SAFE_JOB_NAME,
    Backend,
    JobHandle,
    JobPhase,
    JobStatus,
    LaunchRequest,
    LogChunk,
    PermanentEngineError,
    SupportsGang,
    SupportsLogStreaming,
    Unsupported,
    WorkerLaunch,
    job_name,
    worker_environment,
)
from hetpool.engines.files import create_exclusive, write_atomic
from hetpool.engines.slurm.client import SlurmCommands, transient_failure
from hetpool.engines.slurm.config import SlurmAccess, SlurmPlanError, gres_overrides
from hetpool.engines.slurm.runas import (
    Identity,
    JobFiles,
    RunAsConfig,
    RunAsError,
    UnsafeJobFile,
    job_owned_dir,
    resolve,
    share_job_dir,
    submit_command,
    unreachable,
)
from hetpool.engines.slurm.script import (
    SlurmNode,
    batch_script,
    env_script,
    parse_nodes,
    plan_job,
    rank_environment,
    sbatch_args,
    worker_script,
)

NODE_CACHE_S = 60.0  # node names, addresses and GRES change rarely; a miss refreshes at once
_JOB_ID = re.compile(r"\d+")
_NULL = {"", "(null)", "N/A", "None", "none"}
_SQUEUE_FORMAT = "JobID:|,HetJobID:|,Name:|,State:|,exit_code:|,Reason:|"

_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "POWER_UP_NODE"}
_RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING", "UPDATE_DB"}
_FAILED = {"FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}
# Pending reasons that no amount of waiting fixes: the job is failed (and cancelled) at once.
_IMPOSSIBLE = {
    "BadConstraints",
    "PartitionTimeLimit",
    "InvalidAccount",
    "InvalidQOS",
    "AccountNotAllowed",
    "QOSNotAllowed",
    "DependencyNeverSatisfied",
}
_IMPOSSIBLE_RE = re.compile(r"(Assoc|QOS)Max\w*PerJob\w*")  # a per-job limit, not a count of running jobs
# scancel's answers for a job that is already over (or long gone): nothing to do.
_CANCEL_DONE = ("already completing or completed", "Invalid job id")


class SlurmError(PermanentEngineError):
    """Slurm refused the job (sbatch's message says why)."""


@dataclass(frozen=True)
class _Row:
    """One squeue line: a job, or one component of a heterogeneous job."""

    job_id: str
    leader: str  # the id sbatch printed (HetJobID for components)
    name: str
    state: str
    exit_raw: int | None
    reason: str


class SlurmBackend(Backend, SupportsGang, SupportsLogStreaming):
    kind = "slurm"
    UNSUPPORTED_FEATURES = {
        "fractional-devices": Unsupported("Slurm allocates whole GRES to one job; hetpool does not share a device between Slurm jobs"),
        "mixed-devices-on-a-node": Unsupported(
            "Slurm gives a job one GRES amount per node, split evenly among its workers there: workers on one node cannot ask for different devices"
        ),
    }

    def __init__(self, config: dict[str, str], catalog: DeviceCatalog, work_dir: Path) -> None:
        # Absolute: the path is written into the job scripts that run on the nodes.
        root = str(config.get("jobs_dir") or "").strip()
        if root and (not os.path.isabs(root) or "\0" in root):
            raise ValueError(f"slurm: backend_config.jobs_dir {root!r} must be an absolute path")
        self.work_dir = Path(root or work_dir).resolve()
        jobs = self.work_dir / "jobs"
        # What this creates is enterable by the run-as accounts (their jobs live below) but not
        # listable: one tenant cannot learn the names of another's job directories. Explicit
        # modes: the server may run with umask 077. Existing parents are the operator's.
        for path in [*reversed(jobs.parents), jobs]:
            if not path.exists():
                path.mkdir(exist_ok=True)
                path.chmod(0o711)
        if jobs.stat().st_uid == os.geteuid():
            jobs.chmod(0o711)
        try:
            self.run_as = RunAsConfig.from_config(config)
        except RunAsError as exc:
            raise ValueError(f"slurm: {exc}") from None
        self._stored: dict[str, dict] = {}  # job name -> request.json (never changes once written)
        self.catalog = catalog
        self.partition = config.get("partition", "").strip()
        self.account = config.get("account", "").strip()
        self.qos = config.get("qos", "").strip()
        self.node_prefix = config.get("node_prefix", "")
        access = SlurmAccess.from_config(config)
        self.commands = SlurmCommands(access)
        self.conf, self.bin_dir, self.timeout_s = access.conf, access.bin_dir, access.timeout_s
        self.overrides = gres_overrides(config, catalog)
        self._nodes_cache: tuple[float, dict[str, SlurmNode]] | None = None

    # -- the contract ---------------------------------------------------------------------

    def submit(self, request: LaunchRequest) -> JobHandle:
        name = request.job_name
        job_dir = self._job_dir(name)
        if not request.workers:
            raise SlurmPlanError(f"{name}: a launch request needs at least one worker")
        if request.checkpointed and SAFE_JOB_NAME.fullmatch(request.task_id):
            # One per task, kept across its attempts, on the storage every node mounts (jobs_dir).
            request = dataclasses.replace(request, checkpoint_dir=str(self.work_dir / "checkpoints" / request.task_id))
        env = {str(w.rank): worker_environment(request, w) for w in request.workers}
        for values in env.values():
            env_script(values)  # refuses names a shell cannot export, before anything is written
        ident = self._identity(request.tenant)
        why = unreachable(job_dir.parent, ident)
        if why:
            raise SlurmError(
                f"slurm: the run-as account {ident.user} cannot reach the job directories: {why}; set backend_config.jobs_dir "
                "to a directory that every Slurm node mounts and whose parents every run-as account can traverse"
            )
        # Private until share_job_dir: request.json holds the task's environment.
        job_dir.mkdir(mode=0o700, exist_ok=True)
        # Like the local backend: the submit that creates request.json defines the job; a
        # repeated submit (a dispatcher that crashed before its commit) uses what is stored.
        stored = {"request": dataclasses.asdict(request), "env": env, "run_as": ident.as_dict()}
        create_exclusive(job_dir / "request.json", json.dumps(stored, indent=2))
        with _locked(job_dir):
            if self._known_id(job_dir) is None:
                # sbatch may have accepted the job before we could record its id.
                rows = self._query(names=[name])
                if rows:
                    write_atomic(job_dir / "slurm_job_id", _latest(rows))
                else:
                    self._sbatch(job_dir, _load(job_dir))
        return JobHandle(backend=self.kind, job_id=name)

    def find(self, task_id: str, attempt: int) -> JobHandle | None:
        name = job_name(task_id, attempt)
        if not SAFE_JOB_NAME.fullmatch(name):
            return None
        job_dir = self.work_dir / "jobs" / name
        if self._known_id(job_dir) is None:
            rows = self._query(names=[name])
            if not rows:
                return None
            job_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(job_dir / "slurm_job_id", _latest(rows))
        return JobHandle(backend=self.kind, job_id=name)

    def poll(self, handles: list[JobHandle]) -> dict[str, JobStatus]:
        result: dict[str, JobStatus] = {}
        live: dict[str, tuple[Path, str]] = {}  # name -> (job dir, Slurm id)
        for handle in handles:
            name = handle.job_id
            job_dir = self._existing(name)
            if job_dir is None:
                result[name] = JobStatus(JobPhase.LOST, message=f"no Slurm job {name} in {self.work_dir}")
            elif (final := _read_final(job_dir)) is not None:
                result[name] = final
            elif (job_id := self._known_id(job_dir)) is not None:
                live[name] = (job_dir, job_id)
            else:
                result[name] = JobStatus(JobPhase.LOST, message=f"{name} was written but never reached Slurm")
        if live:
            # One squeue for all of them; "Slurm cannot be reached" raises, it is never LOST.
            rows = self._query(ids=sorted({job_id for _, job_id in live.values()}))
            for name, (job_dir, job_id) in live.items():
                # The name guards against ids that a reset slurmctld hands out again.
                mine = [r for r in rows if r.leader == job_id and r.name == name]
                result[name] = self._status(name, job_dir, job_id, mine)
        return {h.job_id: result[h.job_id] for h in handles}

    def cancel(self, handle: JobHandle) -> None:
        name = handle.job_id
        job_dir = self._existing(name)
        if job_dir is None or _read_final(job_dir) is not None:
            return  # unknown, or already over: nothing to do
        # The marker first: it makes the outcome "cancelled" even when the job ends before
        # Slurm's answer could be read, and explains a batch script stopped by SIGTERM.
        (job_dir / "cancel_requested").touch()
        self._scancel(name, self._known_id(job_dir))

    def stop_gracefully(self, handle: JobHandle, signal_name: str, grace_s: float) -> None:
        """`scancel --signal`: Slurm signals every process of the job's steps (the workers'
        commands; worker.sh waits for them), not the batch script, and the job runs on until
        the commands exit or the reconciler cancels it after the grace. A job not started
        yet has nothing to checkpoint: it is cancelled."""
        name = handle.job_id
        job_dir = self._existing(name)
        if job_dir is None or _read_final(job_dir) is not None:
            return
        job_id = self._known_id(job_dir)
        if job_id is None or not self._files(job_dir).exists("started"):
            self.cancel(handle)
            return
        self._scancel(name, job_id, signal_name=signal_name.removeprefix("SIG"))

    def logs(self, handle: JobHandle, rank: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        job_dir = self._existing(handle.job_id)
        if job_dir is None or not (job_dir / "request.json").exists():
            raise ValueError(f"unknown slurm job {handle.job_id!r}")
        stored = self._request_of(job_dir)
        ranks = sorted(w["rank"] for w in stored["request"]["workers"])
        if rank not in ranks:
            raise ValueError(f"job {handle.job_id} has no worker rank {rank}; valid ranks: {ranks}")
        try:
            # at least one whole UTF-8 character
            data, size = JobFiles.of(job_dir, stored).read(f"worker-{rank}/output.log", max(limit, 4), offset) or (b"", 0)
        except UnsafeJobFile as exc:
            # The job replaced its log with a link (to /etc/shadow, another tenant's log …).
            raise ValueError(f"job {handle.job_id}: refusing to read worker {rank}'s output: {exc}") from None
        end = offset + len(data)
        # Complete only at the end of the file of a worker that is over; Slurm is asked only
        # when the files cannot tell (a worker killed by a cancel writes no exit_code).
        final = end >= size and self._worker_ended(handle, job_dir, rank)
        # Offsets count bytes; never split a UTF-8 character across chunks.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data, final=final)
        held_back = len(decoder.getstate()[0])
        return LogChunk(text=text, offset=end - held_back, complete=final and held_back == 0)

    # -- status -----------------------------------------------------------------------------

    def _status(self, name: str, job_dir: Path, job_id: str, rows: list[_Row]) -> JobStatus:
        files = self._files(job_dir)
        if not rows:
            return _settle(job_dir, _from_files(job_dir, files, job_id))
        row = next((r for r in rows if r.job_id == r.leader), rows[0])
        state, reason = row.state, row.reason if row.reason not in _NULL else ""
        if state in _PENDING:
            if reason in _IMPOSSIBLE or _IMPOSSIBLE_RE.fullmatch(reason):
                # Cancelled first: if scancel fails, nothing is recorded and the next poll tries
                # again; once recorded, the outcome stays "failed" with Slurm's reason.
                self._scancel(name, job_id)
                return _settle(job_dir, JobStatus(JobPhase.FAILED, message=f"Slurm cannot run job {job_id}: {reason}"))
            return JobStatus(JobPhase.PENDING, message=f"Slurm: {reason}" if reason else "")
        if state in _RUNNING:
            return JobStatus(JobPhase.RUNNING, message="" if state == "RUNNING" else f"Slurm: {state.lower()}")
        result = _read_result(files)
        if state == "COMPLETED":
            status = JobStatus(JobPhase.SUCCEEDED, exit_code=0)
        elif state == "CANCELLED":
            by = "by hetpool" if (job_dir / "cancel_requested").exists() else "in Slurm (scancel)"
            status = JobStatus(JobPhase.CANCELLED, message=f"Slurm job {job_id} cancelled {by}")
        elif state == "FAILED" and result is not None and result[0] == "exit" and result[1]:
            status = JobStatus(JobPhase.FAILED, exit_code=result[1], message=result[2] or f"Slurm job {job_id} failed")
        elif state in _FAILED:
            code = _decode_exit(row.exit_raw)
            detail = f"Slurm job {job_id} {state}" + (f" ({reason})" if reason else "") + _batch_tail(files)
            status = JobStatus(JobPhase.FAILED, exit_code=code or None, message=detail)
        else:
            # A state this code does not know: not terminal, so the devices stay accounted for.
            return JobStatus(JobPhase.RUNNING, message=f"Slurm state {state}")
        return _settle(job_dir, status)

    def _worker_ended(self, handle: JobHandle, job_dir: Path, rank: int) -> bool:
        if self._files(job_dir).exists(f"worker-{rank}/exit_code") or (job_dir / "final.json").exists():
            return True
        return self.poll([handle])[handle.job_id].phase.terminal

    # -- Slurm ------------------------------------------------------------------------------

    def _sbatch(self, job_dir: Path, stored: dict) -> str:
        request = _request_from(stored["request"])
        plan = plan_job(request, self._nodes_for(request.workers), self.catalog, self.overrides, self.node_prefix)
        name = request.job_name
        ident = _identity_from(stored)
        as_root = os.geteuid() == 0
        out = job_dir / "out"
        try:
            share_job_dir(job_dir, ident)
            job_owned_dir(out, ident, as_root)
            if request.checkpoint_dir:
                checkpoints = self.work_dir / "checkpoints"
                checkpoints.mkdir(exist_ok=True)
                checkpoints.chmod(0o711)  # explicit: the umask must not decide (run-as accounts traverse it)
                job_owned_dir(Path(request.checkpoint_dir), ident, as_root)
            for rank in plan.ranks:
                job_owned_dir(out / f"worker-{rank.rank}", ident, as_root)
        except PermissionError as exc:
            # Only without root: chgrp needs the server's user to be in the account's group.
            raise SlurmError(
                f"slurm: cannot hand {job_dir} to run-as account {ident.user} ({exc.strerror}); a hetpool server that is "
                f"not root must be a member of group {ident.group or ident.user} (docs/backends.md#the-slurm-backend)"
            ) from None
        placed = {w.rank: w.device_indices for w in request.workers}
        _script(job_dir / "command.sh", request.command)
        for rank in plan.ranks:
            env = rank_environment(stored["env"][str(rank.rank)], rank, placed[rank.rank], plan.master_addr)
            _script(job_dir / f"env-{rank.rank}.sh", env_script(env))
        _script(job_dir / "worker.sh", worker_script(name, job_dir, plan, out))
        _script(job_dir / "job.sh", batch_script(name, job_dir, plan, out))
        comment = f"hetpool task {request.task_id} attempt {request.attempt}"
        prefix, uid_args = submit_command(ident, as_root)
        args = sbatch_args(
            name, job_dir, plan, partition=self.partition, account=self.account, qos=self.qos, comment=comment, out_dir=out, run_as=uid_args
        )
        done = self.commands.run("sbatch", *args, str(job_dir / "job.sh"), prefix=prefix)
        job_id = done.stdout.strip().split(";")[0]
        if done.returncode != 0 or not _JOB_ID.fullmatch(job_id):
            detail = (done.stderr or done.stdout).strip()[:2000]
            if transient_failure(detail):  # slurmctld down or busy: the job itself may be fine
                raise BackendUnavailableError(f"slurm: sbatch could not reach slurmctld for {name}: {detail}")
            raise SlurmError(f"sbatch refused {name}: {detail or f'exit {done.returncode}'}")
        write_atomic(job_dir / "slurm_job_id", job_id)
        return job_id

    def _query(self, *, ids: list[str] | None = None, names: list[str] | None = None) -> list[_Row]:
        """Jobs slurmctld still knows (any state): by id or by name."""
        args = ["-h", "--states=all", "-O", _SQUEUE_FORMAT]
        if ids:
            args.append("-j" + ",".join(ids))
        if names:
            args.append("--name=" + ",".join(names))
        done = self.commands.run("squeue", *args)
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return []  # squeue -j<one id> that slurmctld has forgotten
            raise BackendUnavailableError(f"slurm: squeue failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[:2000]}")
        rows = []
        for line in done.stdout.splitlines():
            parts = line.split("|")
            if len(parts) < 6 or not _JOB_ID.fullmatch(parts[0].strip()):
                continue
            job_id, het, name, state, exit_raw, reason = (p.strip() for p in parts[:6])
            leader = het if _JOB_ID.fullmatch(het) else job_id
            exit_value = int(exit_raw) if exit_raw.isdigit() else None
            rows.append(_Row(job_id, leader, name, state.split()[0].rstrip("+") if state else "", exit_value, reason))
        return rows

    def _scancel(self, name: str, job_id: str | None, signal_name: str = "") -> None:
        # --name as well as the id: never cancel someone else's job that got a reused id.
        # Without root only the job's own account may cancel it: through sudo, like sbatch.
        stored = self._request_of(self._job_dir(name))
        prefix = submit_command(_identity_from(stored), False)[0] if os.geteuid() != 0 and stored.get("run_as") else []
        signal_args = [f"--signal={signal_name}"] if signal_name else []
        done = self.commands.run("scancel", *signal_args, f"--name={name}", *([job_id] if job_id else []), prefix=prefix)
        if done.returncode != 0 and not any(s in done.stderr for s in _CANCEL_DONE):
            raise BackendUnavailableError(f"slurm: scancel {job_id or name} failed (exit {done.returncode}): {done.stderr.strip()[:2000]}")

    def _nodes_for(self, workers: list[WorkerLaunch]) -> dict[str, SlurmNode]:
        wanted = {w.node[len(self.node_prefix) :].lower() for w in workers if w.node.startswith(self.node_prefix)}
        now = time.monotonic()
        cached = self._nodes_cache
        if cached is None or now - cached[0] > NODE_CACHE_S or not wanted <= cached[1].keys():
            done = self.commands.run("scontrol", "--oneliner", "show", "node")
            if done.returncode != 0:
                raise BackendUnavailableError(f"slurm: scontrol show node failed (exit {done.returncode}): {done.stderr.strip()[:2000]}")
            cached = self._nodes_cache = (now, parse_nodes(done.stdout))
        return cached[1]

    # -- files ------------------------------------------------------------------------------

    def _job_dir(self, name: str) -> Path:
        # The name becomes a directory and a Slurm job name: refuse anything that could escape jobs/.
        if not SAFE_JOB_NAME.fullmatch(name):
            raise ValueError(f"job name {name!r} is not usable as a directory name")
        return self.work_dir / "jobs" / name

    def _existing(self, name: str) -> Path | None:
        if not SAFE_JOB_NAME.fullmatch(name):
            return None
        job_dir = self.work_dir / "jobs" / name
        return job_dir if (job_dir / "request.json").exists() or (job_dir / "slurm_job_id").exists() else None

    def _known_id(self, job_dir: Path) -> str | None:
        try:
            value = (job_dir / "slurm_job_id").read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            value = ""
        if not _JOB_ID.fullmatch(value):
            value = (self._files(job_dir).text("started") or "").strip()  # written by the job
        return value if _JOB_ID.fullmatch(value) else None

    def _request_of(self, job_dir: Path) -> dict:
        """request.json ({} when absent: a job found by name only); cached, it never changes."""
        name = job_dir.name
        if name not in self._stored:
            try:
                stored = _load(job_dir)
            except (FileNotFoundError, NotADirectoryError):
                return {}
            if len(self._stored) > 4096:
                self._stored.clear()
            self._stored[name] = stored
        return self._stored[name]

    def _files(self, job_dir: Path) -> JobFiles:
        return JobFiles.of(job_dir, self._request_of(job_dir))

    def _identity(self, tenant: str) -> Identity:
        """The account to run `tenant`'s job as; a forbidden or unknown one fails the task for good."""
        account = self.run_as.account_for(tenant)
        try:
            return resolve(account, "run_as_user" if account == self.run_as.default else "run_as_tenants")
        except RunAsError as exc:
            raise SlurmError(f"slurm: refusing to run tenant {tenant}'s job: {exc}") from None


# -- helpers -------------------------------------------------------------------------------------


@contextmanager
def _locked(job_dir: Path) -> Iterator[None]:
    """Two submits of one job (two dispatchers, or a retry racing a slow one) take turns."""
    with open(job_dir / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _latest(rows: list[_Row]) -> str:
    # A heterogeneous submit that sbatch refused leaves cancelled components under the
    # name in slurmctld for a while; the job that counts is the newest.
    return str(max(int(r.leader) for r in rows))


def _load(job_dir: Path) -> dict:
    return json.loads((job_dir / "request.json").read_text(encoding="utf-8"))


def _request_from(data: dict) -> LaunchRequest:
    workers = [WorkerLaunch(**w) for w in data["workers"]]
    return LaunchRequest(**{**data, "workers": workers})


def _script(path: Path, text: str) -> None:
    """A file the job reads: the account's group may (the job directory admits nobody else),
    whatever the server's umask (it may well be 077)."""
    path.write_text(text, encoding="utf-8")
    path.chmod(0o640)


def _identity_from(stored: dict) -> Identity:
    run_as = stored["run_as"]
    return Identity(run_as["user"], int(run_as["uid"]), int(run_as["gid"]), run_as.get("group", ""))


def _read_result(files: JobFiles) -> tuple[str, int | None, str] | None:
    """("exit", code, message) or ("signal", None, message) from the batch script's result file."""
    text = files.text("result")
    if text is None:
        return None
    words = text.split()
    if len(words) >= 2 and words[0] == "exit" and words[1].lstrip("-").isdigit():
        code = int(words[1])
        if len(words) >= 4 and words[2] == "rank":
            return "exit", code, f"worker rank {words[3]} exited with code {code}"
        return "exit", code, f"srun exited with code {code} (see batch.log)" if code else ""
    if words and words[0] == "signal":
        return "signal", None, f"the job was stopped by SIG{words[1] if len(words) > 1 else 'TERM'}"
    return None


def _from_files(job_dir: Path, files: JobFiles, job_id: str) -> JobStatus:
    """The outcome of a job slurmctld no longer knows, from what the job left behind."""
    result = _read_result(files)
    cancelled = (job_dir / "cancel_requested").exists()
    if result is not None and result[0] == "exit":
        if result[1] == 0:
            return JobStatus(JobPhase.SUCCEEDED, exit_code=0)
        return JobStatus(JobPhase.FAILED, exit_code=result[1], message=result[2])
    if cancelled:
        return JobStatus(JobPhase.CANCELLED, message=f"Slurm job {job_id} cancelled by hetpool")
    if result is not None:
        why = "time limit, preemption, node failure or a scancel outside hetpool"
        return JobStatus(JobPhase.FAILED, message=f"Slurm job {job_id}: {result[2]} ({why})")
    return JobStatus(JobPhase.LOST, message=f"Slurm no longer knows job {job_id} and it left no result in {job_dir}")


def _settle(job_dir: Path, status: JobStatus) -> JobStatus:
    """Record a terminal status: the answer once slurmctld has forgotten the job."""
    if status.phase.terminal and status.phase is not JobPhase.LOST:
        write_atomic(job_dir / "final.json", json.dumps({"phase": status.phase.value, "exit_code": status.exit_code, "message": status.message}))
    return status


def _read_final(job_dir: Path) -> JobStatus | None:
    try:
        data = json.loads((job_dir / "final.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return JobStatus(JobPhase(data["phase"]), exit_code=data.get("exit_code"), message=data.get("message", ""))


def _decode_exit(raw: int | None) -> int | None:
    """squeue's exit_code is the wait status: code << 8, or the signal number."""
    if raw is None:
        return None
    return 128 + (raw & 0x7F) if raw & 0x7F else raw >> 8


def _batch_tail(files: JobFiles) -> str:
    text = (files.text("batch.log") or "").strip()
    return f"; batch.log: {text[-300:]}" if text else ""
