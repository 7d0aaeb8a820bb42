"""Runs placed work as Ray jobs, through the dashboard's Jobs REST API (no `ray` package here).

Config (`backend_config` of a Cluster with `backend: ray`; all values are strings):
  address            the dashboard URL, e.g. "http://127.0.0.1:8265" (required)
  resource_models    "GPU_A100=nvidia-a100-80g,NPU=ascend-910b3": Ray resource -> catalog model,
                     the same overrides as the inventory connector (read here in reverse)
  token              optional; sent as "Authorization: Bearer <token>"
  timeout_s          per-request timeout in seconds (default "10")
  pending_timeout_s  a job still PENDING after this long can never start: FAILED "never fit" (default "60")
  request_memory     "false" to leave out entrypoint_memory (default "true")
  pin_nodes          "false" to let Ray choose the node (default "true": the placed node, by node id)
  env_passthrough    "LD_LIBRARY_PATH, NCCL_*": variables of the Ray nodes' own environment a job may
                     see besides environment.py's KEEP list (nothing else of it reaches the job)
  checkpoint_root    where checkpointable tasks keep HETPOOL_CHECKPOINT_DIR on the nodes (default
                     /tmp/hetpool-ray-checkpoints; a multi-node cluster needs a path every node mounts).
                     A stopped job gets SIGTERM and is killed after the cluster's RAY_JOB_STOP_WAIT_TIME_S
                     (Ray's default 3 s; deploy/ray.sh starts Ray with 30 s): that is a task's real grace

One Ray job per worker: submission id `<job_name>-r<rank>` (e.g. `hetpool-t-1-2-r0`); the
handle's job_id is the job name, and `find` / `poll` / `cancel` look at every rank. A Ray job
is one entrypoint with one log and one status, so per-worker jobs keep per-rank logs and exit
codes and need no `ray` code on the cluster. The submission id is Ray's idempotency key: a
second POST with it fails, so `submit` posts only ranks that Ray does not know yet.

Each rank's job asks for what the scheduler placed: `entrypoint_resources` {<resource>: number
of devices} where the resource is the one that stands for the worker's model on its node
(the connector's resource -> model convention run in reverse; Ray's own `GPU` goes to
`entrypoint_num_gpus`), `entrypoint_num_cpus` = worker.cpu (fractional is fine),
`entrypoint_memory` = worker.memory_gb, and `entrypoint_label_selector` {"ray.io/node-id": …}
for the node named worker.node. The environment (`worker_environment`, with HETPOOL_MASTER_ADDR
= rank 0's node IP) is set by the entrypoint on a clean environment (`env -i`, environment.py:
none of the raylet's own variables but a whitelist, so no secret of whoever started Ray
reaches a job), so values stay literal, and also goes in
runtime_env env_vars for Ray tasks that the command starts (minus values holding "$", which Ray
would expand). Ray sets no visible-devices variable for custom resources: the export of the
vendor's variable carries hetpool's device indices. For Ray's built-in accelerator resources
(GPU, NPU, …) Ray assigns the devices and sets the variable itself, and that is left alone.

Exit code: Ray (>= 2.4x) stores the entrypoint's exit status as `driver_exit_code`; failing
that, it is read from Ray's message ("failed with exit code N"). A death by signal N is 128+N.

Logs: Ray writes its own lines into a job's log (runtime-env setup, and "Running entrypoint for
job …", flushed at an arbitrary point of the command's output). The entrypoint prints a marker
line before the command; `logs` serves what follows it, minus Ray's entrypoint line, so byte
offsets count the command's output only.

Jobs that cannot run: at submit, each worker's request is checked against the per-node totals
of the state API (/api/v0/nodes): a request larger than its node (or than every node) raises
`RayNeverFitsError`, which fails the task with the reason. A job that passed and still waits
longer than pending_timeout_s (its node left, or other Ray users hold the resources) is
reported FAILED "never fit: …". Ray cannot drop a pending job (stop does nothing until it
starts, delete is refused): the stop is queued, so if Ray ever starts it, it is stopped at
once, and Ray itself fails it after RAY_JOB_START_TIMEOUT_SECONDS. Such verdicts (and cancels
of pending jobs) are kept in `<work_dir>/verdicts/<job_name>.json`, because Ray still shows
those jobs PENDING and a later poll must give the same answer.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.base import (
    ENV_NAME,
    SAFE_JOB_NAME,
    Backend,
    JobHandle,
    JobPhase,
    JobStatus,
    LaunchRequest,
    LogChunk,
    SupportsGang,
    SupportsLogStreaming,
    Unsupported,
    WorkerLaunch,
    http_error,
    job_name,
    worker_environment,
)
from hetpool.engines.ray.client import NODES_PATH, RayDashboard
from hetpool.engines.ray.config import flag, number, parse_resource_models
from hetpool.engines.ray.environment import build_entrypoint, parse_passthrough
from hetpool.engines.ray.resources import BUILTIN_ACCELERATORS, RayNode, ResourceNames, accelerator_types_of

NODE_ID_LABEL = "ray.io/node-id"
# Where checkpointable tasks keep their checkpoints on the Ray nodes (backend_config checkpoint_root).
DEFAULT_CHECKPOINT_ROOT = "/tmp/hetpool-ray-checkpoints"
OUTPUT_MARKER = "HETPOOL_OUTPUT_BEGIN"  # printed by the entrypoint (environment.py) before the command
_MARKER_LINE = re.compile(r"(?:^|\n)" + OUTPUT_MARKER + r"\n")
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
# Ray's error types for a job it could not place: it waited RAY_JOB_START_TIMEOUT_SECONDS, or (a job
# pinned to a node that lacks the resources, or is gone) found it infeasible at once.
NEVER_FIT_ERRORS = {"JOB_SUPERVISOR_ACTOR_START_TIMEOUT", "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE"}
# A gang whose rank 0 exists but another rank does not this long after submission was cut short
# by a crash between the POSTs, and nobody submitted it again: it fails (as in the local backend).
START_GRACE_S = 30.0
_EXIT_IN_MESSAGE = re.compile(r"failed with exit code (-?\d+)")


class RayNeverFitsError(ValueError):
    """The job asks for more than any (or its placed) Ray node has: it can never start."""


def submission_id(name: str, rank: int) -> str:
    return f"{name}-r{rank}"


def parse_nodes(reply: dict) -> list[RayNode]:
    """Alive nodes from the state API, named as the inventory connector names them."""
    try:
        rows = [r for r in reply["data"]["result"]["result"] if r.get("state") == "ALIVE"]
    except (KeyError, TypeError) as exc:
        raise BackendUnavailableError(f"ray: the state API's node list has an unexpected shape (missing {exc})") from exc
    base = {r["node_id"]: str(r.get("node_name") or r.get("node_ip") or r["node_id"][:8]) for r in rows}
    counts: dict[str, int] = {}
    for name in base.values():
        counts[name] = counts.get(name, 0) + 1
    return [
        RayNode(
            node_id=r["node_id"],
            # Live nodes sharing a name are `<name>-<node_id[:8]>` in the inventory.
            name=base[r["node_id"]] if counts[base[r["node_id"]]] == 1 else f"{base[r['node_id']]}-{r['node_id'][:8]}",
            ip=str(r.get("node_ip") or ""),
            resources={str(k): float(v) for k, v in (r.get("resources_total") or {}).items()},
            accelerator_types=accelerator_types_of(r),
        )
        for r in rows
    ]


def shortfall(node: RayNode, need: dict[str, float]) -> dict[str, tuple[float, float]]:
    """resource -> (needed, node total) for what the node can never give."""
    return {r: (n, node.resources.get(r, 0.0)) for r, n in need.items() if n > node.resources.get(r, 0.0) + 1e-9}


def _fmt(amounts: dict[str, float]) -> str:
    def one(r: str, v: float) -> str:
        if r == "memory":
            return f"memory={v / 2**30:.1f}GiB"
        return f"{r}={v:g}"

    return ", ".join(one(r, v) for r, v in sorted(amounts.items())) or "nothing"


def command_output(raw: str, entrypoint: str, sid: str) -> str | None:
    """The command's own output in a Ray job log; None while the marker is not there yet."""
    # Ray writes this line after starting the entrypoint, so it may land anywhere in the output.
    raw = raw.replace(f"Running entrypoint for job {sid}: {entrypoint}\n", "", 1)
    found = _MARKER_LINE.search(raw)
    return raw[found.end() :] if found else None


def exit_code_of(info: dict) -> int | None:
    code = info.get("driver_exit_code")
    if code is None:
        found = _EXIT_IN_MESSAGE.search(str(info.get("message") or ""))
        code = int(found.group(1)) if found else None
    if code is None:
        return None
    code = int(code)
    return 128 - code if code < 0 else code  # Popen's -N (killed by signal N) -> 128+N, as shells say


def _last_line(text: str, limit: int = 300) -> str:
    """The last non-empty line of a reply (Ray answers errors with a whole traceback)."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return _short(lines[-1] if lines else "", limit)


def _short(message: str, limit: int = 300) -> str:
    first = (message or "").strip().splitlines()[0] if (message or "").strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _asks(info: dict) -> str:
    # Ray's job info does not echo entrypoint_resources & co.: submit wrote them into the metadata.
    return str((info.get("metadata") or {}).get("hetpool_asks") or "?")


@dataclass(frozen=True)
class Outcome:
    status: JobStatus
    stop: list[int]  # ranks to (re)send a stop to
    verdict: dict | None  # a decision to record (first writer wins)


def aggregate(ranks: list[tuple[int, dict | None]], verdict: dict | None, now: float, pending_timeout_s: float) -> Outcome:
    """One status for the per-rank Ray jobs of a gang (pure: unit-tested without Ray).

    A rank failing on its own, a rank pending too long, or a rank never submitted fails the
    whole gang: the others are stopped, and the job is reported failed once none of them runs.
    A stopped rank (hetpool's cancel, or someone's stop in Ray) cancels the gang likewise.
    """
    submitted = [info["start_time"] / 1000 for _, info in ranks if info is not None and info.get("start_time")]
    first = min(submitted) if submitted else now
    failures: list[tuple[int | None, str]] = []
    never_fit: list[str] = []
    status_of = {rank: (info or {}).get("status", "MISSING") for rank, info in ranks}
    for rank, info in ranks:
        if info is None:
            if now - first > START_GRACE_S:
                failures.append((None, f"worker rank {rank} was never submitted"))
            continue
        state = info.get("status")
        if state == "FAILED":
            if info.get("error_type") in NEVER_FIT_ERRORS:
                never_fit.append(f"worker rank {rank} was never started by Ray (asked for {_asks(info)}): {_short(info.get('message', ''))}")
                continue
            code = exit_code_of(info)
            if code is not None:
                failures.append((code, f"worker rank {rank} exited with code {code}"))
            else:
                failures.append((None, f"worker rank {rank} failed: {_short(info.get('message', ''))}"))
        elif state == "PENDING" and verdict is None and now - info.get("start_time", now * 1000) / 1000 > pending_timeout_s:
            waited = now - info["start_time"] / 1000
            limit = f"pending_timeout_s={pending_timeout_s:g}"
            never_fit.append(f"worker rank {rank} stayed pending for {waited:.0f}s ({limit}), asking for {_asks(info)}")
    running = [r for r, s in status_of.items() if s == "RUNNING"]
    pending = [r for r, s in status_of.items() if s == "PENDING"]
    new_verdict = None
    if verdict is None and (never_fit or failures):
        message = "never fit: " + "; ".join(never_fit) if never_fit else "; ".join(m for _, m in failures)
        code = next((c for c, _ in failures if c is not None), None) if not never_fit else None
        new_verdict = verdict = {"outcome": "failed", "message": message, "exit_code": code}
    elif verdict is None and any(s == "STOPPED" for s in status_of.values()) and (running or pending):
        new_verdict = verdict = {"outcome": "cancelled", "message": "cancelled (a worker was stopped)", "exit_code": None}
    if verdict is not None:
        # A pending rank holds nothing; a stop is queued for it (see the module docstring).
        stop = running + (pending if new_verdict is not None else [])
        cancelling = verdict["outcome"] == "cancelled"
        if running:
            doing = "cancelling" if cancelling else f"stopping the other workers: {verdict['message']}"
            return Outcome(JobStatus(JobPhase.RUNNING, message=doing), stop, new_verdict)
        phase = JobPhase.CANCELLED if cancelling else JobPhase.FAILED
        return Outcome(JobStatus(phase, exit_code=verdict.get("exit_code"), message=verdict["message"]), stop, new_verdict)
    if any(s == "STOPPED" for s in status_of.values()):
        return Outcome(JobStatus(JobPhase.CANCELLED, message="cancelled"), [], None)
    if all(s == "SUCCEEDED" for s in status_of.values()):
        return Outcome(JobStatus(JobPhase.SUCCEEDED, exit_code=0), [], None)
    if running or any(s == "SUCCEEDED" for s in status_of.values()):
        done = sum(s == "SUCCEEDED" for s in status_of.values())
        return Outcome(JobStatus(JobPhase.RUNNING, message=f"{done}/{len(ranks)} workers finished"), [], None)
    asks = "; ".join(f"rank {r}: {_asks(info)}" for r, info in ranks if info is not None)
    return Outcome(JobStatus(JobPhase.PENDING, message=f"waiting for Ray to start the job ({asks})"), [], None)


class RayBackend(Backend, SupportsGang, SupportsLogStreaming):
    kind = "ray"
    UNSUPPORTED_FEATURES = {
        "fractional-devices": Unsupported("each worker's Ray job asks for whole accelerator resources (its device count); no device is shared"),
        "checkpoint-signal": Unsupported(
            "a stopped Ray job gets the cluster's RAY_JOB_STOP_SIGNAL (SIGTERM), then SIGKILL after its RAY_JOB_STOP_WAIT_TIME_S",
            advice="catch SIGTERM in the task, or set checkpoint.signal: SIGTERM",
        ),
    }

    def __init__(self, config: dict[str, str], catalog: DeviceCatalog | None, work_dir: Path, transport: httpx.BaseTransport | None = None) -> None:
        self.dashboard = RayDashboard(config, transport)
        self.address = self.dashboard.address
        self.names = ResourceNames(catalog, parse_resource_models(config.get("resource_models", "")))
        self.timeout_s = self.dashboard.timeout_s
        self.pending_timeout_s = number(config, "pending_timeout_s", 60.0)
        self.request_memory = flag(config, "request_memory", True)
        self.pin_nodes = flag(config, "pin_nodes", True)
        self.passthrough = parse_passthrough(str(config.get("env_passthrough") or ""))
        self.checkpoint_root = str(config.get("checkpoint_root") or DEFAULT_CHECKPOINT_ROOT).rstrip("/") or DEFAULT_CHECKPOINT_ROOT
        self.work_dir = Path(work_dir)

    # -- the contract ---------------------------------------------------------------------

    def submit(self, request: LaunchRequest) -> JobHandle:
        name = request.job_name
        if not SAFE_JOB_NAME.fullmatch(name):
            raise ValueError(f"job name {name!r} is not usable as a Ray submission id")
        if not request.workers:
            raise ValueError(f"{name}: a launch request needs at least one worker")
        if request.checkpointed and SAFE_JOB_NAME.fullmatch(request.task_id):
            # On the Ray nodes (every node must mount checkpoint_root for a multi-node cluster);
            # made by the job itself, as the Ray cluster's identity that runs every job.
            checkpoint_dir = f"{self.checkpoint_root}/{request.task_id}"
            command = f'mkdir -p "$HETPOOL_CHECKPOINT_DIR" || exit 1\n{request.command}'
            request = dataclasses.replace(request, checkpoint_dir=checkpoint_dir, command=command)
        workers = sorted(request.workers, key=lambda w: w.rank)
        ranks = [w.rank for w in workers]
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"{name}: duplicate worker ranks {ranks}")
        handle = JobHandle(backend=self.kind, job_id=name)
        with self._client() as client:
            existing = {w.rank: self._job(client, submission_id(name, w.rank)) for w in workers}
            if all(existing.values()):
                return handle  # submitted before (a dispatcher that crashed before its commit)
            if self._verdict(name) is not None:
                return handle  # cancelled (or failed) half-way through: start no more ranks
            nodes = self._nodes(client)
            # A (re)starting head lists no nodes, or nodes whose resources are not reported yet:
            # judging the job against that would fail it as "never fits".
            if not nodes or not all(n.resources for n in nodes):
                raise BackendUnavailableError(f"ray: {self.address} has not reported its nodes' resources yet (is the head starting?)")
            master = self._master_addr(existing[ranks[0]], self._node_for(workers[0], nodes))
            bodies = [self._plan(request, w, nodes, master) for w in workers]  # raises before anything starts
            for worker, body in zip(workers, bodies, strict=True):
                if existing[worker.rank] is None:
                    self._post_job(client, body)
        return handle

    def find(self, task_id: str, attempt: int) -> JobHandle | None:
        name = job_name(task_id, attempt)
        if not SAFE_JOB_NAME.fullmatch(name):
            return None
        with self._client() as client:
            found = self._job(client, submission_id(name, 0))
        return JobHandle(backend=self.kind, job_id=name) if found is not None else None

    def poll(self, handles: list[JobHandle]) -> dict[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        with self._client() as client:
            for h in handles:
                out[h.job_id] = self._status(client, h.job_id)
        return out

    def cancel(self, handle: JobHandle) -> None:
        with self._client() as client:
            ranks = self._ranks(client, handle.job_id)
            if ranks is None:
                return
            live = [rank for rank, info in ranks if info is not None and info.get("status") not in TERMINAL]
            if not live and all(info is not None for _, info in ranks):
                return  # finished: nothing to do
            # Recorded first: it decides the outcome of ranks that Ray keeps PENDING after a stop.
            self._record(handle.job_id, {"outcome": "cancelled", "message": "cancelled", "exit_code": None})
            for rank in live:
                self._stop(client, submission_id(handle.job_id, rank))

    def logs(self, handle: JobHandle, rank: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        with self._client() as client:
            ranks = self._ranks(client, handle.job_id)
            if ranks is None:
                raise ValueError(f"unknown ray job {handle.job_id!r}")
            by_rank = dict(ranks)
            if rank not in by_rank:
                raise ValueError(f"job {handle.job_id} has no worker rank {rank}; valid ranks: {sorted(by_rank)}")
            info = by_rank[rank]
            sid = submission_id(handle.job_id, rank)
            verdict = self._verdict(handle.job_id)
            if info is None:  # never submitted
                return LogChunk(text="", offset=offset, complete=verdict is not None)
            ended = info.get("status") in TERMINAL or (info.get("status") == "PENDING" and verdict is not None)
            resp = self._call(client, "GET", f"/api/jobs/{quote(sid, safe='')}/logs")
            if resp.status_code == 404:
                raise ValueError(f"unknown ray job {sid!r}")
            raw = str(self._json(resp, "GET logs of " + sid).get("logs") or "")
        text = command_output(raw, str(info.get("entrypoint") or ""), sid)
        if text is None:
            # No output yet, or the command never ran: then Ray's own lines say why.
            text = raw.replace(f"Running entrypoint for job {sid}: {info.get('entrypoint')}\n", "", 1) if ended else ""
        return _slice(text.encode("utf-8", "replace"), offset, limit, ended)

    # -- submitting -----------------------------------------------------------------------

    def _node_for(self, worker: WorkerLaunch, nodes: list[RayNode]) -> RayNode | None:
        # Pinned to the placed node (hetpool's device indices are for that node); unpinned, Ray chooses.
        return next((n for n in nodes if n.name == worker.node), None) if self.pin_nodes else None

    def _plan(self, request: LaunchRequest, worker: WorkerLaunch, nodes: list[RayNode], master: str) -> dict:
        """The POST body for one worker; raises RayNeverFitsError when it can never start."""
        where = f"{request.job_name} worker rank {worker.rank}"
        node = self._node_for(worker, nodes)
        resource = None
        count = len(worker.device_indices)
        if count:
            if not worker.model:
                raise ValueError(f"{where}: {count} devices but no device model")
            resource = self.names.resource_for(worker.model, [node] if node else nodes)
            if resource is None:
                scope = f"node {node.name}" if node else "any node of the Ray cluster"
                raise RayNeverFitsError(
                    f"never fit: {where}: no Ray resource of {scope} stands for device model {worker.model!r} "
                    f"(set backend_config.resource_models, e.g. GPU_X={worker.model})"
                )
        need: dict[str, float] = {}
        if resource:
            need[resource] = float(count)
        if worker.cpu > 0:
            need["CPU"] = float(worker.cpu)
        memory = int(worker.memory_gb * 2**30) if self.request_memory and worker.memory_gb > 0 else 0
        if memory:
            need["memory"] = float(memory)
        self._check_fit(where, need, node, nodes)

        env = worker_environment(request, worker)
        if master:
            env["HETPOOL_MASTER_ADDR"] = master
        var = worker.visible_devices_env
        if var and resource in BUILTIN_ACCELERATORS:
            env.pop(var, None)  # Ray assigns these devices and sets the variable itself
        # Set by the entrypoint on a clean environment (environment.py: nothing of the raylet's own
        # environment but a whitelist): literal values, and the vendor variable (which Ray sets for no
        # custom resource) cannot be overridden by Ray's worker setup. runtime_env carries them on to
        # Ray tasks the command starts, except values with "$", which Ray would expand (os.path.expandvars).
        exports = {k: v for k, v in env.items() if ENV_NAME.fullmatch(k)}
        body: dict[str, Any] = {
            "submission_id": submission_id(request.job_name, worker.rank),
            "entrypoint": build_entrypoint(request.command, exports, self.passthrough),
            "runtime_env": {"env_vars": {k: v for k, v in env.items() if "$" not in v}},
            "metadata": {
                "hetpool_job": request.job_name,
                "hetpool_task_id": request.task_id,
                "hetpool_attempt": str(request.attempt),
                "hetpool_tenant": request.tenant,
                "hetpool_rank": str(worker.rank),
                "hetpool_ranks": ",".join(str(w.rank) for w in sorted(request.workers, key=lambda w: w.rank)),
                "hetpool_node": worker.node,
                "hetpool_asks": _fmt(need),
                "hetpool_master_addr": master,
            },
        }
        if worker.cpu > 0:
            body["entrypoint_num_cpus"] = worker.cpu
        if resource == "GPU":
            body["entrypoint_num_gpus"] = count
        elif resource:
            body["entrypoint_resources"] = {resource: count}
        if memory:
            body["entrypoint_memory"] = memory
        if node is not None:
            body["entrypoint_label_selector"] = {NODE_ID_LABEL: node.node_id}
        return body

    def _check_fit(self, where: str, need: dict[str, float], node: RayNode | None, nodes: list[RayNode]) -> None:
        if node is not None:
            short = shortfall(node, need)
            if short:
                has = {r: total for r, (_, total) in short.items()}
                raise RayNeverFitsError(f"never fit: {where} asks for {_fmt(need)}; its node {node.name} has only {_fmt(has)} in all")
            return
        if not any(not shortfall(n, need) for n in nodes):
            largest = ", ".join(f"{n.name}: {_fmt({r: n.resources.get(r, 0.0) for r in need})}" for n in nodes) or "no live nodes"
            raise RayNeverFitsError(f"never fit: {where} asks for {_fmt(need)}; no Ray node has that much in all ({largest})")

    @staticmethod
    def _master_addr(rank0: dict | None, node0: RayNode | None) -> str:
        """Rank 0's address for the gang: as already given to rank 0, else its node's IP ("" unknown:
        worker_environment's default stays)."""
        if rank0 is not None:
            return str((rank0.get("metadata") or {}).get("hetpool_master_addr") or "")
        return node0.ip if node0 is not None else ""

    def _post_job(self, client: httpx.Client, body: dict) -> None:
        sid = body["submission_id"]
        resp = self._call(client, "POST", "/api/jobs/", json=body)
        if resp.status_code == 200:
            return
        # Ray answers a taken submission id with an error (500 in 2.60): a racing submit won.
        if self._job(client, sid) is not None:
            return
        # 5xx / 429: the head is restarting or busy, try again; any other 4xx: Ray refuses this body.
        raise http_error(resp.status_code, f"ray: submitting {sid} to {self.address} failed (HTTP {resp.status_code}): {_last_line(resp.text)}")

    # -- observing ------------------------------------------------------------------------

    def _ranks(self, client: httpx.Client, name: str) -> list[tuple[int, dict | None]] | None:
        """(rank, job info or None when Ray has no such job) per rank; None for an unknown job."""
        if not SAFE_JOB_NAME.fullmatch(name):
            return None
        first = self._job(client, submission_id(name, 0))
        if first is None:
            return None
        listed = str((first.get("metadata") or {}).get("hetpool_ranks") or "0")
        ranks = [int(r) for r in listed.split(",") if r.strip().isdigit()] or [0]
        return [(r, first if r == 0 else self._job(client, submission_id(name, r))) for r in ranks]

    def _status(self, client: httpx.Client, name: str) -> JobStatus:
        ranks = self._ranks(client, name)
        if ranks is None:
            return JobStatus(JobPhase.LOST, message=f"Ray at {self.address} has no job {submission_id(name, 0)}")
        outcome = aggregate(ranks, self._verdict(name), time.time(), self.pending_timeout_s)
        if outcome.verdict is not None and not self._record(name, outcome.verdict):
            # Another poller decided first: report what it recorded.
            outcome = aggregate(ranks, self._verdict(name), time.time(), self.pending_timeout_s)
        for rank in outcome.stop:
            self._stop(client, submission_id(name, rank))
        return outcome.status

    def _stop(self, client: httpx.Client, sid: str) -> None:
        resp = self._call(client, "POST", f"/api/jobs/{quote(sid, safe='')}/stop")
        if resp.status_code not in (200, 404):  # 404: gone already, nothing to stop
            raise BackendUnavailableError(f"ray: stopping {sid} failed (HTTP {resp.status_code}): {_last_line(resp.text)}")

    # -- verdicts (decisions that Ray's own state cannot show) --------------------------------

    def _verdict_path(self, name: str) -> Path:
        return self.work_dir / "verdicts" / f"{name}.json"

    def _verdict(self, name: str) -> dict | None:
        try:
            return json.loads(self._verdict_path(name).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None

    def _record(self, name: str, verdict: dict) -> bool:
        """Store the verdict unless one exists (the first decision stands); True if ours was stored."""
        path = self._verdict_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(verdict), encoding="utf-8")
        try:
            os.link(tmp, path)  # fails on an existing file: of two racing writers one wins, whole
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    # -- HTTP -----------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        return self.dashboard.open()

    def _call(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return client.request(method, self.address + path, **kwargs)
        except httpx.HTTPError as exc:
            why = f"{exc.__class__.__name__}: {exc}"
            raise BackendUnavailableError(f"ray: cannot reach the dashboard at {self.address} ({method} {path}): {why}") from exc

    def _json(self, resp: httpx.Response, what: str) -> Any:
        if resp.status_code != 200:
            raise BackendUnavailableError(f"ray: {what} at {self.address} answered HTTP {resp.status_code}: {_last_line(resp.text)}")
        try:
            return resp.json()
        except ValueError as exc:
            raise BackendUnavailableError(f"ray: {what} at {self.address} did not answer JSON: {resp.text[:200]!r}") from exc

    def _job(self, client: httpx.Client, sid: str) -> dict | None:
        resp = self._call(client, "GET", f"/api/jobs/{quote(sid, safe='')}")
        if resp.status_code == 404:
            # Only Ray's own "no such job" means LOST; any other 404 (a wrong address, a proxy)
            # must not make hetpool give up on running jobs.
            if "does not exist" in resp.text:
                return None
            raise BackendUnavailableError(f"ray: {self.address} answered 404 for job {sid} without Ray's 'does not exist' (is it a Ray dashboard?)")
        info = self._json(resp, f"GET job {sid}")
        if not isinstance(info, dict) or "status" not in info:
            raise BackendUnavailableError(f"ray: job {sid}: unexpected reply {str(info)[:200]!r}")
        return info

    def _nodes(self, client: httpx.Client) -> list[RayNode]:
        body = self._json(self._call(client, "GET", NODES_PATH), "the state API's node list")
        return parse_nodes(body)


def _slice(data: bytes, offset: int, limit: int, ended: bool) -> LogChunk:
    """Up to `limit` bytes from `offset`, never splitting a UTF-8 character (as the local backend)."""
    offset = max(0, min(offset, len(data)))
    piece = data[offset : offset + max(limit, 4)]
    end = offset + len(piece)
    final = ended and end >= len(data)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(piece, final=final)
    held_back = len(decoder.getstate()[0])
    return LogChunk(text=text, offset=end - held_back, complete=final and held_back == 0)
