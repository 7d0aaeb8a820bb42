"""The Ray backend: pure parts without Ray, then the shared contract and Ray-specific cases
against the real head of deploy/ray.sh (HETPOOL_TEST_RAY_ADDRESS; the Makefile sets it)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.base import JobHandle, JobPhase, LaunchRequest, WorkerLaunch, capabilities
from hetpool.engines.ray import RayBackend, RayNeverFitsError
from hetpool.engines.ray.compute import START_GRACE_S, aggregate, build_entrypoint, command_output, exit_code_of
from hetpool.engines.ray.config import parse_resource_models
from hetpool.engines.ray.resources import RayNode, ResourceNames

CATALOG = DeviceCatalog.builtin()
ADDRESS = os.environ.get("HETPOOL_TEST_RAY_ADDRESS", "")
needs_ray = pytest.mark.skipif(not ADDRESS, reason="no Ray head: set HETPOOL_TEST_RAY_ADDRESS=$(deploy/ray.sh start) (the Makefile does)")


def node(name: str, resources: dict[str, float], types: list[str] | None = None) -> RayNode:
    return RayNode(node_id=name + "-id", name=name, ip="10.0.0.1", resources=resources, accelerator_types=types or [])


# -- without Ray ------------------------------------------------------------------------------


def test_kind_and_capabilities() -> None:
    assert RayBackend.kind == "ray"
    assert capabilities(RayBackend) == {"gang": True, "log-streaming": True, "fractional-devices": False}


def test_model_to_resource_is_the_connector_convention_in_reverse() -> None:
    names = ResourceNames(CATALOG, {})
    head = node("head", {"CPU": 2, "GPU_H100": 4, "NPU_910B3": 8, "memory": 1e9, "node:1.2.3.4": 1})
    assert names.resource_for("nvidia-h100", [head]) == "GPU_H100"
    assert names.resource_for("ascend-910b3", [head]) == "NPU_910B3"
    assert names.resource_for("nvidia-a100-80g", [head]) is None
    # Ray's built-in GPU stands for the node's accelerator type; a custom name is preferred when both exist.
    builtin = node("b", {"GPU": 8, "accelerator_type:H100": 1}, ["H100"])
    assert names.resource_for("nvidia-h100", [builtin]) == "GPU"
    assert names.resource_for("nvidia-h100", [builtin, head]) == "GPU_H100"
    # Overrides win, spelled as the node spells the resource.
    overrides = ResourceNames(CATALOG, parse_resource_models("gpu_a100=nvidia-a100-80g"))
    assert overrides.resource_for("nvidia-a100-80g", [node("x", {"GPU_A100": 2})]) == "GPU_A100"
    assert overrides.resource_for("nvidia-a100-80g", []) == "gpu_a100"
    with pytest.raises(ValueError, match="RESOURCE=MODEL"):
        parse_resource_models("GPU_A100")


def test_entrypoint_exports_devices_and_keeps_the_exit_code(tmp_path: Path) -> None:
    exports = {"ASCEND_RT_VISIBLE_DEVICES": "2,5", "GREETING": "hi"}
    entrypoint = build_entrypoint('echo "it\'s $GREETING"; echo dev=$ASCEND_RT_VISIBLE_DEVICES; exit 7', exports)
    # The Ray node's own environment stays out (backends/ray/environment.py), but for PATH & co.
    done = subprocess.run(["/bin/sh", "-c", entrypoint], env={"GREETING": "no", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode == 7
    assert done.stdout == "HETPOOL_OUTPUT_BEGIN\nit's hi\ndev=2,5\n"
    assert "HETPOOL_OUTPUT_BEGIN" not in entrypoint  # Ray copies the entrypoint into the log


def test_command_output_drops_rays_own_lines_wherever_they_land() -> None:
    entrypoint = build_entrypoint("echo a; echo b", {})
    ray_line = f"Running entrypoint for job j-r0: {entrypoint}\n"
    setup = "2026-01-01 00:00:00,000\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
    assert command_output(setup + ray_line + "HETPOOL_OUTPUT_BEGIN\na\nb\n", entrypoint, "j-r0") == "a\nb\n"
    assert command_output(setup + "HETPOOL_OUTPUT_BEGIN\na\n" + ray_line + "b\n", entrypoint, "j-r0") == "a\nb\n"
    assert command_output(setup, entrypoint, "j-r0") is None


def test_exit_codes() -> None:
    assert exit_code_of({"driver_exit_code": 3}) == 3
    assert exit_code_of({"driver_exit_code": -9}) == 137
    assert exit_code_of({"message": "Job entrypoint command failed with exit code 4, last available logs"}) == 4
    assert exit_code_of({"message": "runtime_env setup failed"}) is None


def _info(status: str, age_s: float = 1.0, **extra: object) -> dict:
    return {"status": status, "start_time": (time.time() - age_s) * 1000, "metadata": {"hetpool_asks": "GPU_H100=2"}, **extra}


def test_aggregate_over_the_ranks_of_a_gang() -> None:
    now = time.time()
    ok = aggregate([(0, _info("SUCCEEDED")), (1, _info("SUCCEEDED"))], None, now, 60)
    assert ok.status.phase is JobPhase.SUCCEEDED and ok.status.exit_code == 0
    assert aggregate([(0, _info("SUCCEEDED")), (1, _info("RUNNING"))], None, now, 60).status.phase is JobPhase.RUNNING
    assert aggregate([(0, _info("PENDING")), (1, _info("PENDING"))], None, now, 60).status.phase is JobPhase.PENDING

    # One rank fails: the others are stopped, the job fails once nothing runs, with that rank's code.
    failing = aggregate([(0, _info("RUNNING")), (1, _info("FAILED", driver_exit_code=4)), (2, _info("PENDING"))], None, now, 60)
    assert failing.status.phase is JobPhase.RUNNING and "rank 1 exited with code 4" in failing.status.message
    assert sorted(failing.stop) == [0, 2] and failing.verdict is not None
    failed = aggregate([(0, _info("STOPPED")), (1, _info("FAILED", driver_exit_code=4)), (2, _info("PENDING"))], failing.verdict, now, 60)
    assert failed.status.phase is JobPhase.FAILED and failed.status.exit_code == 4 and failed.stop == []

    # Pending too long: never fit, and the verdict holds although Ray still says PENDING.
    stuck = aggregate([(0, _info("PENDING", age_s=90))], None, now, 60)
    assert stuck.status.phase is JobPhase.FAILED and stuck.status.message.startswith("never fit: worker rank 0 stayed pending")
    assert "GPU_H100=2" in stuck.status.message and stuck.stop == [0]
    assert aggregate([(0, _info("PENDING", age_s=90))], stuck.verdict, now, 60).status == stuck.status
    ray_gave_up = aggregate([(0, _info("FAILED", error_type="JOB_SUPERVISOR_ACTOR_START_TIMEOUT"))], None, now, 60)
    assert ray_gave_up.status.phase is JobPhase.FAILED and ray_gave_up.status.message.startswith("never fit:")

    # Cancelled (by hetpool's verdict, or a rank stopped in Ray): pending ranks count as ended.
    cancelled = {"outcome": "cancelled", "message": "cancelled", "exit_code": None}
    assert aggregate([(0, _info("PENDING")), (1, _info("STOPPED"))], cancelled, now, 60).status.phase is JobPhase.CANCELLED
    outside = aggregate([(0, _info("STOPPED")), (1, _info("RUNNING"))], None, now, 60)
    assert outside.status.phase is JobPhase.RUNNING and outside.stop == [1] and outside.verdict["outcome"] == "cancelled"

    # A rank never submitted (crash between the POSTs, no resubmit) fails the gang after a grace period.
    assert aggregate([(0, _info("RUNNING")), (1, None)], None, now, 60).status.phase is JobPhase.RUNNING
    late = aggregate([(0, _info("SUCCEEDED", age_s=START_GRACE_S + 5)), (1, None)], None, now, 60)
    assert late.status.phase is JobPhase.FAILED and "rank 1 was never submitted" in late.status.message


def test_config_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="address"):
        RayBackend({}, CATALOG, tmp_path)
    with pytest.raises(ValueError, match="pending_timeout_s"):
        RayBackend({"address": "http://h:8265", "pending_timeout_s": "soon"}, CATALOG, tmp_path)


def test_unreachable_address_is_a_clear_error_never_lost(tmp_path: Path) -> None:
    backend = RayBackend({"address": "127.0.0.1:9", "timeout_s": "2"}, CATALOG, tmp_path)
    worker = WorkerLaunch(0, "n", "p", None, [], "", 0.1, 0.0)
    with pytest.raises(BackendUnavailableError, match=r"cannot reach the dashboard at http://127\.0\.0\.1:9"):
        backend.submit(LaunchRequest("t-x", 1, "x", "t", "true", [worker]))
    with pytest.raises(BackendUnavailableError):
        backend.poll([JobHandle("ray", "hetpool-t-x-1")])
    # A 404 that is not Ray's "does not exist" (a wrong URL, a proxy) must not read as LOST.
    other = RayBackend({"address": "http://h"}, CATALOG, tmp_path, transport=httpx.MockTransport(lambda r: httpx.Response(404, text="Not Found")))
    with pytest.raises(BackendUnavailableError, match="is it a Ray dashboard"):
        other.poll([JobHandle("ray", "hetpool-t-x-1")])


# -- against the Ray head -------------------------------------------------------------------------


def _head_name() -> str:
    reply = httpx.get(f"{ADDRESS}/api/v0/nodes?detail=1&limit=100", timeout=10).json()
    alive = [n for n in reply["data"]["result"]["result"] if n["state"] == "ALIVE"]
    head = next((n for n in alive if n.get("is_head_node")), alive[0])
    return head.get("node_name") or head["node_ip"]


def h100(rank: int, devices: int, node_name: str) -> WorkerLaunch:
    env = "CUDA_VISIBLE_DEVICES" if devices else ""  # as the dispatcher sets it
    return WorkerLaunch(rank, node_name, "ray-h100", "nvidia-h100", list(range(devices)), env, 0.1, 0.0)


@pytest.fixture
def ray_backend(tmp_path: Path) -> Iterator[RayBackend]:
    if not ADDRESS:
        pytest.skip("no Ray head: set HETPOOL_TEST_RAY_ADDRESS=$(deploy/ray.sh start) (the Makefile does)")
    backend = RayBackend({"address": ADDRESS, "pending_timeout_s": "60"}, CATALOG, tmp_path / "ray")
    yield backend


from tests.engines.contract import *  # noqa: E402, F403 (the contract cases)
from tests.engines.contract import Harness, wait_phase  # noqa: E402


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    if not ADDRESS:
        pytest.skip("no Ray head: set HETPOOL_TEST_RAY_ADDRESS=$(deploy/ray.sh start) (the Makefile does)")
    head = _head_name()
    work = tmp_path / "ray"
    h = Harness(
        kind="ray",
        make_backend=lambda: RayBackend({"address": ADDRESS}, CATALOG, work),
        make_worker=lambda rank, devices: h100(rank, devices, head),
        timeout_s=60,
    )
    yield h
    backend = RayBackend({"address": ADDRESS}, CATALOG, work)
    for handle in h.cleanup:
        backend.cancel(handle)


def _request(command: str, workers: list[WorkerLaunch]) -> LaunchRequest:
    task_id = "t-" + uuid.uuid4().hex[:10]
    return LaunchRequest(task_id, 1, f"ray test {task_id}", "org/team", command, workers)


@needs_ray
def test_never_fit_is_refused_at_submit(ray_backend: RayBackend) -> None:
    head = _head_name()
    too_big = _request("true", [h100(0, 64, head)])
    with pytest.raises(RayNeverFitsError, match=rf"never fit: .* asks for CPU=0\.1, GPU_H100=64; its node {head} has only GPU_H100=\d+"):
        ray_backend.submit(too_big)
    assert ray_backend.find(too_big.task_id, 1) is None  # nothing was started
    # A node unknown to Ray: any node may run it, but none is large enough either.
    elsewhere = _request("true", [h100(0, 64, "no-such-node")])
    with pytest.raises(RayNeverFitsError, match="no Ray node has that much"):
        ray_backend.submit(elsewhere)
    no_resource = _request("true", [WorkerLaunch(0, head, "p", "nvidia-a100-80g", [0], "CUDA_VISIBLE_DEVICES", 0.1, 0.0)])
    with pytest.raises(RayNeverFitsError, match="no Ray resource .* stands for device model 'nvidia-a100-80g'"):
        ray_backend.submit(no_resource)


@needs_ray
def test_pending_too_long_is_never_fit_and_pending_jobs_can_be_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A resource no node has, past the submit check: as if the node left after submit. Unpinned,
    # because Ray fails a job pinned to a node that lacks the resources at once (next test).
    config = {"address": ADDRESS, "pending_timeout_s": "1", "pin_nodes": "false", "resource_models": "GPU_HETPOOL_TEST_NOWHERE=nvidia-a100-80g"}
    backend = RayBackend(config, CATALOG, tmp_path / "ray")
    monkeypatch.setattr(backend, "_check_fit", lambda *args: None)
    head = _head_name()
    worker = WorkerLaunch(0, head, "p", "nvidia-a100-80g", [0], "CUDA_VISIBLE_DEVICES", 0.1, 0.0)
    stuck, cancelled = _request("echo never", [worker]), _request("echo never", [worker])
    handle = backend.submit(stuck)
    other = backend.submit(cancelled)
    assert backend.poll([other])[other.job_id].phase is JobPhase.PENDING
    backend.cancel(other)
    assert backend.poll([other])[other.job_id].phase is JobPhase.CANCELLED
    status = wait_phase(backend, handle, {JobPhase.FAILED, JobPhase.SUCCEEDED}, 15)
    assert status.phase is JobPhase.FAILED and status.message.startswith("never fit: worker rank 0 stayed pending"), status
    assert "GPU_HETPOOL_TEST_NOWHERE=1" in status.message
    # Ray still shows it PENDING (it cannot drop it): a restarted server gives the same answer.
    again = RayBackend(config, CATALOG, tmp_path / "ray").poll([handle, other])
    assert again[handle.job_id] == status and again[other.job_id].phase is JobPhase.CANCELLED
    assert backend.logs(handle).complete
    # Pinned to a node that lacks the resource, Ray refuses the job as infeasible at once. A
    # long pending timeout here: on a loaded machine Ray's refusal can take over a second, and
    # the 1 s timeout above would then answer first with the other message.
    pinned = RayBackend({**config, "pin_nodes": "true", "pending_timeout_s": "60"}, CATALOG, tmp_path / "ray")
    monkeypatch.setattr(pinned, "_check_fit", lambda *args: None)
    refused = pinned.submit(_request("echo never", [worker]))
    status = wait_phase(pinned, refused, {JobPhase.FAILED, JobPhase.SUCCEEDED}, 45)
    assert status.phase is JobPhase.FAILED and status.message.startswith("never fit: worker rank 0 was never started by Ray"), status


@needs_ray
def test_ascend_npu_visible_devices_and_exact_output(ray_backend: RayBackend) -> None:
    head = _head_name()
    worker = WorkerLaunch(0, head, "ray-910b3", "ascend-910b3", [2, 5], "ASCEND_RT_VISIBLE_DEVICES", 0.1, 0.1)
    command = 'echo "npu=$ASCEND_RT_VISIBLE_DEVICES model=$HETPOOL_DEVICE_MODEL price=$PRICE"; printf "算力\\n"'
    request = LaunchRequest("t-" + uuid.uuid4().hex[:10], 1, "npu", "org/team", command, [worker], env={"PRICE": "$5 ${HOME}"})
    handle = ray_backend.submit(request)
    try:
        status = wait_phase(ray_backend, handle, {JobPhase.SUCCEEDED, JobPhase.FAILED}, 60)
        assert status.phase is JobPhase.SUCCEEDED, status
        expected = "npu=2,5 model=ascend-910b3 price=$5 ${HOME}\n算力\n"  # values stay literal
        # Only the command's output (none of Ray's own lines), read in small whole-character steps.
        pieces, offset = [], 0
        for _ in range(100):
            chunk = ray_backend.logs(handle, offset=offset, limit=5)
            pieces.append(chunk.text)
            offset = chunk.offset
            if chunk.complete:
                break
        assert "".join(pieces) == expected and offset == len(expected.encode())
        with pytest.raises(ValueError, match=r"valid ranks: \[0\]"):
            ray_backend.logs(handle, rank=1)
    finally:
        ray_backend.cancel(handle)


@needs_ray
def test_failed_rank_stops_the_rest_of_the_gang(ray_backend: RayBackend) -> None:
    head = _head_name()
    command = 'if [ "$HETPOOL_WORKER_RANK" = 1 ]; then sleep 1; exit 5; fi; echo waiting; sleep 300'
    handle = ray_backend.submit(_request(command, [h100(0, 1, head), h100(1, 1, head)]))
    try:
        status = wait_phase(ray_backend, handle, {JobPhase.FAILED, JobPhase.SUCCEEDED, JobPhase.CANCELLED}, 60)
        assert status.phase is JobPhase.FAILED and status.exit_code == 5, status
        assert "rank 1 exited with code 5" in status.message
        # Rank 0 (sleeping) was stopped; once the gang is reported failed it runs no more.
        with ray_backend._client() as client:
            assert ray_backend._job(client, f"{handle.job_id}-r0")["status"] == "STOPPED"
    finally:
        ray_backend.cancel(handle)
