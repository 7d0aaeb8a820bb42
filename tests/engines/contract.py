"""One contract, every backend: the same cases run against local, Slurm and Ray (real
engines started by deploy/*.sh) and Kubernetes (recorded responses).

A backend's test module provides a `harness` fixture (a `Harness`) and imports the cases:

    from tests.engines.contract import *  # noqa: F403 (the contract cases)

The harness knows what the backend needs: how to build a fresh instance with the same
configuration (a restarted hetpool server), which node / pool names its workers use, and
whether gangs are supported. Every case submits through `Backend.submit` and observes only
through `poll`, `logs`, `cancel` and `find`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from hetpool.engines.base import Backend, JobHandle, JobPhase, JobStatus, LaunchRequest, WorkerLaunch

__all__ = [
    "Harness",
    "contract_request",
    "wait_phase",
    "test_contract_success_exit_zero_and_logs",
    "test_contract_failure_reports_the_exit_code",
    "test_contract_cancel_stops_a_running_job",
    "test_contract_gang_of_two_runs_both_ranks",
    "test_contract_restarted_server_finds_and_follows_the_job",
    "test_contract_submit_is_idempotent_per_attempt",
    "test_contract_environment_and_visible_devices",
]


@dataclass
class Harness:
    kind: str
    make_backend: Callable[[], Backend]  # a new instance with the same configuration
    make_worker: Callable[[int, int], WorkerLaunch]  # (rank, devices) -> a worker this backend can place
    supports_gang: bool = True
    timeout_s: float = 60.0
    cleanup: list[JobHandle] = field(default_factory=list)


def contract_request(harness: Harness, command: str, *, workers: int = 1, devices: int = 0, attempt: int = 1) -> LaunchRequest:
    task_id = "t-" + uuid.uuid4().hex[:10]
    return LaunchRequest(
        task_id=task_id,
        attempt=attempt,
        name=f"contract {task_id}",
        tenant="org/team",
        command=command,
        workers=[harness.make_worker(rank, devices) for rank in range(workers)],
        env={"GREETING": "hello-contract"},
    )


def wait_phase(backend: Backend, handle: JobHandle, phases: set[JobPhase], timeout_s: float) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    status = JobStatus(JobPhase.PENDING)
    while time.monotonic() < deadline:
        status = backend.poll([handle])[handle.job_id]
        if status.phase in phases:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{handle.job_id} stayed {status.phase.value} ({status.message}) for {timeout_s}s; wanted {sorted(phases)}")


def _logs(backend: Backend, handle: JobHandle, rank: int, timeout_s: float, expect: str) -> str:
    # Some engines write output files a moment after the job ends.
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = backend.logs(handle, rank=rank, limit=1 << 20).text
        if expect in text:
            return text
        time.sleep(0.2)
    return text


def _submit(harness: Harness, backend: Backend, request: LaunchRequest) -> JobHandle:
    handle = backend.submit(request)
    harness.cleanup.append(handle)
    return handle


def test_contract_success_exit_zero_and_logs(harness: Harness) -> None:
    backend = harness.make_backend()
    handle = _submit(harness, backend, contract_request(harness, 'echo "out $GREETING"; echo "err line" >&2'))
    status = wait_phase(backend, handle, {JobPhase.SUCCEEDED, JobPhase.FAILED}, harness.timeout_s)
    assert status.phase == JobPhase.SUCCEEDED and status.exit_code == 0, status
    text = _logs(backend, handle, 0, 10, "out hello-contract")
    assert "out hello-contract" in text and "err line" in text


def test_contract_failure_reports_the_exit_code(harness: Harness) -> None:
    backend = harness.make_backend()
    handle = _submit(harness, backend, contract_request(harness, "echo about-to-fail; exit 3"))
    status = wait_phase(backend, handle, {JobPhase.SUCCEEDED, JobPhase.FAILED}, harness.timeout_s)
    assert status.phase == JobPhase.FAILED and status.exit_code == 3, status
    assert "about-to-fail" in _logs(backend, handle, 0, 10, "about-to-fail")


def test_contract_cancel_stops_a_running_job(harness: Harness) -> None:
    backend = harness.make_backend()
    handle = _submit(harness, backend, contract_request(harness, "echo started; sleep 300"))
    wait_phase(backend, handle, {JobPhase.RUNNING}, harness.timeout_s)
    backend.cancel(handle)
    status = wait_phase(backend, handle, {JobPhase.CANCELLED, JobPhase.FAILED}, harness.timeout_s)
    assert status.phase == JobPhase.CANCELLED, status
    backend.cancel(handle)  # cancelling an ended job does nothing


def test_contract_gang_of_two_runs_both_ranks(harness: Harness) -> None:
    if not harness.supports_gang:
        pytest.skip(f"{harness.kind} does not run gangs")
    backend = harness.make_backend()
    request = contract_request(harness, 'echo "rank $HETPOOL_WORKER_RANK of $HETPOOL_WORLD_SIZE"', workers=2)
    handle = _submit(harness, backend, request)
    status = wait_phase(backend, handle, {JobPhase.SUCCEEDED, JobPhase.FAILED}, harness.timeout_s)
    assert status.phase == JobPhase.SUCCEEDED, status
    assert "rank 0 of 2" in _logs(backend, handle, 0, 10, "rank 0 of 2")
    assert "rank 1 of 2" in _logs(backend, handle, 1, 10, "rank 1 of 2")


def test_contract_restarted_server_finds_and_follows_the_job(harness: Harness) -> None:
    first = harness.make_backend()
    request = contract_request(harness, "sleep 2; echo finished-after-restart")
    handle = _submit(harness, first, request)
    wait_phase(first, handle, {JobPhase.RUNNING, JobPhase.SUCCEEDED}, harness.timeout_s)
    del first  # the hetpool server "restarts": a new backend instance, same configuration
    second = harness.make_backend()
    found = second.find(request.task_id, request.attempt)
    assert found is not None and found.job_id == handle.job_id
    status = wait_phase(second, found, {JobPhase.SUCCEEDED, JobPhase.FAILED}, harness.timeout_s)
    assert status.phase == JobPhase.SUCCEEDED, status
    assert "finished-after-restart" in _logs(second, found, 0, 10, "finished-after-restart")
    assert second.find(request.task_id, request.attempt + 1) is None


def test_contract_submit_is_idempotent_per_attempt(harness: Harness) -> None:
    backend = harness.make_backend()
    request = contract_request(harness, "sleep 1; echo once")
    handle = _submit(harness, backend, request)
    again = harness.make_backend().submit(request)  # a dispatcher that crashed before its commit
    assert again.job_id == handle.job_id
    wait_phase(backend, handle, {JobPhase.SUCCEEDED}, harness.timeout_s)
    assert _logs(backend, handle, 0, 10, "once").count("once") == 1
    unknown = backend.poll([JobHandle(harness.kind, "no-such-job")])["no-such-job"]
    assert unknown.phase == JobPhase.LOST


def test_contract_environment_and_visible_devices(harness: Harness) -> None:
    backend = harness.make_backend()
    request = contract_request(harness, 'echo "task=$HETPOOL_TASK_ID rank=$HETPOOL_WORKER_RANK dev=$HETPOOL_DEVICE_INDICES"; env', devices=2)
    handle = _submit(harness, backend, request)
    status = wait_phase(backend, handle, {JobPhase.SUCCEEDED, JobPhase.FAILED}, harness.timeout_s)
    assert status.phase == JobPhase.SUCCEEDED, status
    text = _logs(backend, handle, 0, 10, f"task={request.task_id}")
    worker = request.workers[0]
    assert f"task={request.task_id} rank=0" in text
    if worker.visible_devices_env:
        assert f"{worker.visible_devices_env}=" in text  # the vendor's variable is set (values depend on the engine)
