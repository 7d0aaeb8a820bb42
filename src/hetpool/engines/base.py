"""The two contracts every engine implements: execution (`Backend`) and inventory (`InventoryConnector`).

Execution: a backend never decides placement: it receives a `LaunchRequest` whose workers already
carry node, device model and device indices, and runs it. `submit` is idempotent per
(task id, attempt): the job's name is derived from both, so a dispatcher that crashed
between the backend's submit and its own database commit can `find` the job again
instead of starting it twice.
"""

from __future__ import annotations

import re
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from hetpool.core.errors import BackendUnavailableError, HetpoolError

if TYPE_CHECKING:
    # Annotations only: the local engine's runner and launch modules import this module under
    # a bare python (started through sudo, without third-party packages), and the catalog
    # needs pydantic.
    from hetpool.catalog.devices import DeviceCatalog


# -- engine errors ---------------------------------------------------------------------------
# What the dispatcher does with a failed engine call depends only on its kind
# (docs/backends.md#engine-errors): a *transient* error — the engine unreachable, a timeout,
# HTTP 5xx, throttled (429) — says nothing about the request, so the work waits and is
# retried; a *permanent* one — an invalid request, an unsupported feature, a refusal — would
# only be repeated, so the task fails with the engine's words. Each engine client raises
# `BackendUnavailableError` for the first and `PermanentEngineError` (or ValueError, for a
# request it cannot even build) for the second, deciding where it sees the engine's answer.


class PermanentEngineError(HetpoolError):
    """The engine refused the request and would refuse it again (invalid, unsupported, not allowed)."""

    code = "backend_rejected"


class EngineFault(StrEnum):
    TRANSIENT = "transient"  # retry later; never fails the task
    PERMANENT = "permanent"  # fail the task with the engine's message
    UNCLASSIFIED = "unclassified"  # an error no engine client put a kind on (a bug, an odd OS error)


# Statuses that mean "not now" rather than "not this": timeout, too early, throttled, server-side.
_TRANSIENT_HTTP = frozenset({408, 425, 429})


def transient_http_status(status: int) -> bool:
    return status in _TRANSIENT_HTTP or status >= 500


def http_error(status: int, message: str) -> HetpoolError:
    """The error for an engine's HTTP answer `status`: transient for 408/425/429/5xx, permanent otherwise."""
    return BackendUnavailableError(message) if transient_http_status(status) else PermanentEngineError(message)


def classify(exc: BaseException) -> EngineFault:
    """The kind of an error an engine call raised. Order matters: a config error that is also
    BackendUnavailableError (RayConfigError) waits for the operator's fix rather than failing work."""
    if isinstance(exc, PermanentEngineError):
        return EngineFault.PERMANENT
    if isinstance(exc, (BackendUnavailableError, TimeoutError, ConnectionError)):
        return EngineFault.TRANSIENT
    if isinstance(exc, ValueError):  # every engine raises it for a request it cannot run as given
        return EngineFault.PERMANENT
    return EngineFault.UNCLASSIFIED


class JobPhase(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"  # the backend no longer knows the job

    @property
    def terminal(self) -> bool:
        return self in (JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED, JobPhase.LOST)


@dataclass(frozen=True)
class WorkerLaunch:
    rank: int
    node: str
    pool: str
    model: str | None
    device_indices: list[int]
    visible_devices_env: str  # e.g. CUDA_VISIBLE_DEVICES; "" for CPU-only workers
    cpu: float
    memory_gb: float


@dataclass(frozen=True)
class LaunchRequest:
    task_id: str
    attempt: int
    name: str
    tenant: str
    command: str
    workers: list[WorkerLaunch]
    env: dict[str, str] = field(default_factory=dict)
    image: str = ""
    # The task's checkpoint contract (core/checkpoint.py): its stop signal ("" = none declared)
    # and grace, the attempt this one resumes from (None = a fresh start), and where its
    # checkpoints live on the engine (set by the engine at submit: see `checkpoint_dir_for`).
    stop_signal: str = ""
    stop_grace_s: float = 0.0
    resume_from: int | None = None
    checkpoint_dir: str = ""

    @property
    def checkpointed(self) -> bool:
        return bool(self.stop_signal)

    @property
    def job_name(self) -> str:
        """Deterministic backend-side name: the key for exactly-once dispatch."""
        return job_name(self.task_id, self.attempt)


# A job name that is safe as a directory, a Slurm job name and a Ray submission id (no "/", no
# leading dot or dash); every engine checks the names it turns into paths or ids against it.
SAFE_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A name a POSIX shell can export.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def job_name(task_id: str, attempt: int) -> str:
    return f"hetpool-{task_id}-{attempt}"


@dataclass(frozen=True)
class JobHandle:
    backend: str
    job_id: str


@dataclass(frozen=True)
class JobStatus:
    phase: JobPhase
    exit_code: int | None = None
    message: str = ""


@dataclass(frozen=True)
class LogChunk:
    text: str
    offset: int  # pass back to continue reading after this chunk
    complete: bool  # the job has ended and nothing more will be written


# Names that never reach a workload from the host's environment, whatever an operator's
# env_passthrough lists (every engine applies it): they would hand a task the server's
# secrets or let it run code in place of a library. A POSIX ERE, case-insensitive, so the
# Ray entrypoint can give the same pattern to `grep -Eiv` on the node.
NEVER_PASSED_THROUGH = r"^(HETPOOL_.*|.*(PASSWORD|SECRET|TOKEN|CREDENTIAL).*|LD_PRELOAD|PYTHONPATH|PYTHONHOME)$"


def worker_environment(request: LaunchRequest, worker: WorkerLaunch) -> dict[str, str]:
    """HETPOOL_* variables plus the vendor's visible-devices variable for one worker."""
    env = dict(request.env)
    env.update(
        {
            "HETPOOL_TASK_ID": request.task_id,
            "HETPOOL_TASK_NAME": request.name,
            "HETPOOL_ATTEMPT": str(request.attempt),
            "HETPOOL_TENANT": request.tenant,
            "HETPOOL_WORKER_RANK": str(worker.rank),
            "HETPOOL_WORLD_SIZE": str(len(request.workers)),
            "HETPOOL_NODE": worker.node,
            "HETPOOL_POOL": worker.pool,
            "HETPOOL_DEVICE_MODEL": worker.model or "",
            "HETPOOL_DEVICE_INDICES": ",".join(str(i) for i in worker.device_indices),
            "HETPOOL_MASTER_ADDR": "127.0.0.1",
            # crc32, not hash(): the port must agree across processes (hash() is salted per process).
            "HETPOOL_MASTER_PORT": str(29500 + zlib.crc32(request.task_id.encode()) % 1000),
        }
    )
    if worker.visible_devices_env:
        env[worker.visible_devices_env] = ",".join(str(i) for i in worker.device_indices)
    if request.checkpoint_dir:
        env["HETPOOL_CHECKPOINT_DIR"] = request.checkpoint_dir
        env["HETPOOL_STOP_SIGNAL"] = request.stop_signal
    if request.resume_from is not None:
        env["HETPOOL_RESUME"] = "1"
        env["HETPOOL_RESUME_FROM_ATTEMPT"] = str(request.resume_from)
    return env


@dataclass(frozen=True)
class Unsupported:
    """A feature an engine cannot provide, and why (SkyPilot's per-cloud feature table).

    `plan` lists these for the engine of a candidate cluster; where a placement needs the
    feature, it reports a gap under `counts_as` (default: the feature itself) — with
    `advice`, as "<reason> (<what the placement needs>); <advice>"."""

    reason: str
    counts_as: str = ""
    advice: str = ""

    def gap(self, kind: str, feature: str, why: str) -> dict[str, str]:
        if self.advice:
            return {"capability": self.counts_as or feature, "reason": f"{self.reason} ({why}); {self.advice}"}
        return {"capability": self.counts_as or feature, "reason": f"the {kind} backend cannot do {feature} ({why})"}


class Backend(ABC):
    """Runs placed work. Optional abilities are declared by mixins (see `capabilities`);
    what the engine cannot do is declared, with reasons, in `UNSUPPORTED_FEATURES`."""

    kind: str = "abstract"
    # feature -> why this engine cannot provide it. Every capability mixin the class lacks is
    # here (tests/engines/test_registry.py checks it), plus limits within declared capabilities.
    UNSUPPORTED_FEATURES: ClassVar[dict[str, Unsupported]] = {}

    @classmethod
    def unsupported_features(cls, config: dict[str, str]) -> dict[str, Unsupported]:
        """The table for a cluster with this backend_config (some limits depend on a setting)."""
        return dict(cls.UNSUPPORTED_FEATURES)

    @abstractmethod
    def submit(self, request: LaunchRequest) -> JobHandle:
        """Start the job; when a job named `request.job_name` exists, return its handle."""

    @abstractmethod
    def find(self, task_id: str, attempt: int) -> JobHandle | None:
        """The handle of a job earlier submitted for (task, attempt), if the backend has it."""

    @abstractmethod
    def poll(self, handles: list[JobHandle]) -> dict[str, JobStatus]:
        """Status per job_id. Unknown jobs are reported as LOST."""

    @abstractmethod
    def cancel(self, handle: JobHandle) -> None:
        """Stop the job (all workers). Cancelling a finished job does nothing."""

    @abstractmethod
    def logs(self, handle: JobHandle, rank: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        """Up to `limit` bytes of worker `rank`'s output starting at byte `offset`."""

    def stop_gracefully(self, handle: JobHandle, signal_name: str, grace_s: float) -> None:
        """Send `signal_name` (SIGTERM, SIGUSR1 …) to the job's processes and let them exit
        within `grace_s` (to write a checkpoint). The reconciler calls `cancel` once the
        grace has passed, so an engine that cannot signal may simply stop the job: this
        default does, with whatever grace the engine itself gives."""
        self.cancel(handle)


class SupportsGang:
    """All workers of a task start together, on several nodes."""


class SupportsLogStreaming:
    """Logs can be followed while the job runs."""


class SupportsFractionalDevices:
    """Several tasks may share one device."""


CAPABILITY_MIXINS = {
    "gang": SupportsGang,
    "log-streaming": SupportsLogStreaming,
    "fractional-devices": SupportsFractionalDevices,
}


def capabilities(backend: type[Backend] | Backend) -> dict[str, bool]:
    cls = backend if isinstance(backend, type) else type(backend)
    return {name: issubclass(cls, mixin) for name, mixin in CAPABILITY_MIXINS.items()}


@dataclass(frozen=True)
class Engine:
    """What the registry knows of one engine kind; each engine package declares its own."""

    kind: str
    compute: type[Backend]
    build: Callable[[dict[str, str], DeviceCatalog, Path], Backend]  # (backend_config, catalog, work_dir)
    config_problems: Callable[[dict[str, str]], list[dict[str, str]]]  # {"loc", "msg"} each, for apply's 422
    inventory: Callable[[dict[str, str], DeviceCatalog], InventoryConnector] | None = None  # None: nodes come from host agents


# -- the inventory contract ------------------------------------------------------------------
# A connector observes; it never writes. `fetch()` returns an `InventoryObservation`: the
# engine's nodes in hetpool's vocabulary (catalog models, node states, normalised labels)
# plus what the connector can see at all (`sees`), so the sync service knows which facts
# are authoritative (a connector that cannot see used counts must not zero them).


class NodeState(StrEnum):
    """hetpool's node states. Only READY nodes receive new work."""

    READY = "ready"  # Slurm IDLE / MIXED / ALLOCATED, k8s Ready, Ray ALIVE
    DRAINING = "draining"  # Slurm DRAINING / DRAIN with jobs, k8s cordoned: running work stays, nothing new
    DRAINED = "drained"  # Slurm DRAINED: drained and empty
    DOWN = "down"  # Slurm DOWN / NOT_RESPONDING / FAIL, k8s NotReady, Ray DEAD
    OFFLINE = "offline"  # host agent missed its heartbeats (set by the server, not by connectors)
    UNKNOWN = "unknown"


# Facts a connector may be able to see; declared per connector class.
SEES_NODES = "nodes"
SEES_DEVICES = "devices"  # typed accelerator counts per node
SEES_USED = "used"  # accelerators in use by the engine's own workloads
SEES_STATES = "states"
SEES_LABELS = "labels"
SEES_TAINTS = "taints"
SEES_STACK = "stack"  # driver / runtime versions
SEES_PARTITIONS = "partitions"


@dataclass
class ObservedNode:
    name: str  # as the engine names it (the sync service lower-cases it for hetpool)
    cpu_cores: int
    memory_gb: float
    state: NodeState = NodeState.READY
    reason: str = ""  # why the state is not ready (Slurm Reason, k8s condition message)
    arch: str = "x86_64"  # x86_64 | aarch64
    devices: dict[str, int] = field(default_factory=dict)  # catalog model -> total count
    used: dict[str, int] = field(default_factory=dict)  # catalog model -> in use by the engine's workloads
    labels: dict[str, str] = field(default_factory=dict)  # normalised hetpool.io/... labels (plus engine labels kept as-is)
    taints: list[str] = field(default_factory=list)  # "key=value:Effect"
    partitions: list[str] = field(default_factory=list)  # Slurm partitions, Ray / k8s node groups
    features: list[str] = field(default_factory=list)  # Slurm features / AvailableFeatures
    stack: dict | None = None  # {"driver": "535.104.05", "runtime": {"name": "cuda", "version": "12.2"}}
    extra: dict = field(default_factory=dict)  # engine facts shown to operators, never scheduled on


@dataclass
class InventoryObservation:
    connector: str  # "slurm" | "kubernetes" | "ray"
    sees: frozenset[str]
    nodes: list[ObservedNode] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # unknown models, unreadable fields … never silently dropped
    extra: dict = field(default_factory=dict)  # cluster-level facts (partitions, Ray cluster resources …)


class InventoryConnector(ABC):
    """Reads one engine's inventory. Constructed from a Cluster's `backend_config`."""

    kind: str = ""
    sees: frozenset[str] = frozenset()

    @abstractmethod
    def fetch(self) -> InventoryObservation:
        """Observe the engine now. Raises ConnectorError when the engine cannot be read."""


class ConnectorError(BackendUnavailableError):
    """The engine could not be read (command failed, API unreachable, bad credentials)."""

    def __init__(self, message: str, **kwargs) -> None:  # also accepts plain positional use like RuntimeError
        super().__init__(message, **kwargs)


def unknown_model(vendor: str, name: str) -> str:
    """The placeholder id for a device the catalog does not know (never dropped)."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{vendor}-{name}".lower()).strip("-")
    return f"unknown-{slug}"
