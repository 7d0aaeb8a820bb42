"""The contract every execution backend implements.

A backend never decides placement: it receives a `LaunchRequest` whose workers already
carry node, device model and device indices, and runs it. `submit` is idempotent per
(task id, attempt): the job's name is derived from both, so a dispatcher that crashed
between the backend's submit and its own database commit can `find` the job again
instead of starting it twice.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum


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

    @property
    def job_name(self) -> str:
        """Deterministic backend-side name: the key for exactly-once dispatch."""
        return job_name(self.task_id, self.attempt)


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
    return env


class Backend(ABC):
    """Runs placed work. Optional abilities are declared by mixins (see `capabilities`)."""

    kind: str = "abstract"

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
