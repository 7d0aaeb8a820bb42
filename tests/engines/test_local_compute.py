"""The local backend with real processes: no mocks, every job runs under /bin/sh."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hetpool.engines.base import JobHandle, JobPhase, JobStatus, LaunchRequest, WorkerLaunch, capabilities
from hetpool.engines.local import LocalBackend

DEADLINE_S = 10.0


def worker(rank: int, indices: list[int] | None = None, env: str = "CUDA_VISIBLE_DEVICES") -> WorkerLaunch:
    return WorkerLaunch(
        rank=rank,
        node="localhost",
        pool="local",
        model="emulated",
        device_indices=[rank] if indices is None else indices,
        visible_devices_env=env,
        cpu=1.0,
        memory_gb=1.0,
    )


def request(task_id: str, command: str, workers: list[WorkerLaunch] | None = None, attempt: int = 1) -> LaunchRequest:
    return LaunchRequest(
        task_id=task_id,
        attempt=attempt,
        name=f"test {task_id}",
        tenant="team-a",
        command=command,
        workers=workers or [worker(0)],
        env={"GREETING": "hi"},
    )


def wait_for(predicate: Callable[[], object], what: str, timeout: float = DEADLINE_S) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def wait_terminal(backend: LocalBackend, handle: JobHandle) -> JobStatus:
    def terminal() -> JobStatus | None:
        status = backend.poll([handle])[handle.job_id]
        return status if status.phase.terminal else None

    return wait_for(terminal, f"{handle.job_id} to end")  # type: ignore[return-value]


def gone(pid: int) -> bool:
    """No such process, or only a zombie left (orphans may be reaped late by pid 1)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def zombie_children() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                found.append(int(entry.name))
    return found


def worker_dir(backend: LocalBackend, handle: JobHandle, rank: int) -> Path:
    return backend.work_dir / "jobs" / handle.job_id / f"worker-{rank}"


def task_dir(backend: LocalBackend, handle: JobHandle, rank: int = 0) -> Path:
    """The command's own working directory (outside the control tree; gone when it ends)."""
    return wait_for(lambda: backend.workdir(handle, rank), f"{handle.job_id} rank {rank} to get a working directory")  # type: ignore[return-value]


def ranks_logged(backend: LocalBackend, handle: JobHandle, ranks: int) -> list[str]:
    return sorted(line for r in range(ranks) for line in read_all(backend, handle, r).split())


def read_all(backend: LocalBackend, handle: JobHandle, rank: int = 0) -> str:
    return backend.logs(handle, rank=rank, limit=1 << 20).text


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(tmp_path / "work")
    yield b
    # Leave no detached processes behind, whatever the test did.
    for job_dir in (b.work_dir / "jobs").iterdir():
        b.cancel(JobHandle("local", job_dir.name))


def test_kind_and_capabilities(backend: LocalBackend) -> None:
    assert backend.kind == "local"
    assert capabilities(LocalBackend) == {"gang": True, "log-streaming": True, "fractional-devices": True}


def test_success_reports_exit_zero_and_logs(backend: LocalBackend) -> None:
    handle = backend.submit(request("ok", 'echo "hello $GREETING"; echo oops >&2; pwd'))
    assert handle == JobHandle(backend="local", job_id="hetpool-ok-1")
    runners = {child.pid for child in backend._children}  # this backend's own; other tests' zombies in this process are not its
    status = wait_terminal(backend, handle)
    assert status.phase is JobPhase.SUCCEEDED and status.exit_code == 0
    chunk = backend.logs(handle)
    workdir = backend.workdir(handle, 0)
    assert chunk.text.splitlines() == ["hello hi", "oops", str(workdir)]
    assert chunk.complete
    assert not workdir.exists(), "the working directory is deleted when the command ends"
    assert (backend.work_dir / "jobs" / handle.job_id / "request.json").is_file()
    # Finished runners are reaped, not left as zombies of the server.
    wait_for(lambda: backend.poll([handle]) and not runners & set(zombie_children()), "runners to be reaped")


def test_failure_reports_exit_code(backend: LocalBackend) -> None:
    handle = backend.submit(request("bad", "echo boom; exit 3"))
    status = wait_terminal(backend, handle)
    assert status.phase is JobPhase.FAILED
    assert status.exit_code == 3
    assert "rank 0" in status.message
    assert "boom" in read_all(backend, handle)


def test_visible_devices_and_gang_variables(backend: LocalBackend) -> None:
    workers = [worker(0, [2, 3], "ASCEND_RT_VISIBLE_DEVICES"), worker(1, [5], "HIP_VISIBLE_DEVICES")]
    command = (
        'echo "ascend=$ASCEND_RT_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES '
        'rank=$HETPOOL_WORKER_RANK world=$HETPOOL_WORLD_SIZE port=$HETPOOL_MASTER_PORT"'
    )
    handle = backend.submit(request("devices", command, workers))
    assert wait_terminal(backend, handle).phase is JobPhase.SUCCEEDED
    line0, line1 = read_all(backend, handle, 0).strip(), read_all(backend, handle, 1).strip()
    assert line0.startswith("ascend=2,3 hip= rank=0 world=2 port=")
    assert line1.startswith("ascend= hip=5 rank=1 world=2 port=")
    # The whole gang agrees on the rendezvous port.
    assert line0.rsplit("port=", 1)[1] == line1.rsplit("port=", 1)[1]


def test_cancel_kills_command_and_its_children(backend: LocalBackend) -> None:
    handle = backend.submit(request("long", "sleep 60 & echo $! > child.pid; sleep 60"))
    wdir = task_dir(backend, handle)
    wait_for(lambda: (wdir / "child.pid").exists() and (wdir / "child.pid").read_text().strip(), "the child")
    assert backend.poll([handle])[handle.job_id].phase is JobPhase.RUNNING
    runner_pid = int((worker_dir(backend, handle, 0) / "pid").read_text())
    child_pid = int((wdir / "child.pid").read_text())

    started = time.monotonic()
    backend.cancel(handle)
    assert time.monotonic() - started < 1.0, "cancel must not block"
    status = wait_terminal(backend, handle)
    assert status.phase is JobPhase.CANCELLED
    wait_for(lambda: gone(runner_pid) and gone(child_pid), "the runner and the command's child to die")

    backend.cancel(handle)  # cancelling a finished job does nothing
    assert backend.poll([handle])[handle.job_id].phase is JobPhase.CANCELLED


def test_cancel_escalates_to_sigkill_when_sigterm_is_ignored(backend: LocalBackend) -> None:
    handle = backend.submit(request("stubborn", "trap '' TERM; echo ready; sleep 60"))
    wait_for(lambda: backend.logs(handle).text, "the command to start")
    runner_pid = int((worker_dir(backend, handle, 0) / "pid").read_text())
    backend.cancel(handle)
    assert wait_terminal(backend, handle).phase is JobPhase.CANCELLED
    assert (worker_dir(backend, handle, 0) / "exit_code").read_text() == "137"
    wait_for(lambda: gone(runner_pid), "the runner to end")


def test_submit_twice_starts_each_worker_once(backend: LocalBackend) -> None:
    # Every start appends to the worker's log: a second start would print its rank twice.
    req = request("once", 'echo "$HETPOOL_WORKER_RANK"; sleep 0.3', [worker(0), worker(1)])
    first = backend.submit(req)
    assert backend.submit(req) == first
    assert LocalBackend(backend.work_dir).submit(req) == first  # also across a restart
    assert wait_terminal(backend, first).phase is JobPhase.SUCCEEDED
    assert ranks_logged(backend, first, 2) == ["0", "1"]


class _CrashAfterFirstWorker(LocalBackend):
    """Fault injection: the server dies after starting rank 0 of a gang."""

    def _spawn(self, job_dir: Path, wdir: Path, rank: int) -> None:
        if rank > 0:
            raise RuntimeError("server crashed")
        super()._spawn(job_dir, wdir, rank)


def test_resubmit_after_crash_halfway_through_a_gang(backend: LocalBackend) -> None:
    req = request("halfway", 'echo "$HETPOOL_WORKER_RANK"', [worker(0), worker(1), worker(2)])
    with pytest.raises(RuntimeError):
        _CrashAfterFirstWorker(backend.work_dir).submit(req)
    handle = backend.find("halfway", 1)
    assert handle is not None
    assert backend.submit(req) == handle  # starts ranks 1 and 2 only
    status = wait_terminal(backend, handle)
    assert status.phase is JobPhase.SUCCEEDED, status
    assert ranks_logged(backend, handle, 3) == ["0", "1", "2"]


def test_new_instance_takes_over_a_job_after_the_server_died(tmp_path: Path) -> None:
    work = tmp_path / "work"
    # A separate server process submits and exits: the job must outlive it.
    server = textwrap.dedent(
        f"""
        from pathlib import Path
        from hetpool.engines.base import LaunchRequest, WorkerLaunch
        from hetpool.engines.local import LocalBackend
        w = WorkerLaunch(0, "localhost", "local", None, [0], "CUDA_VISIBLE_DEVICES", 1.0, 1.0)
        cmd = "echo started; while [ ! -e release ]; do sleep 0.05; done; echo finished"
        LocalBackend(Path({str(work)!r})).submit(LaunchRequest("restart", 7, "r", "t", cmd, [w]))
        """
    )
    subprocess.run([sys.executable, "-c", server], check=True, timeout=DEADLINE_S)

    backend = LocalBackend(work)
    try:
        assert backend.find("restart", 6) is None
        handle = backend.find("restart", 7)
        assert handle == JobHandle("local", "hetpool-restart-7")
        assert backend.poll([handle])[handle.job_id].phase is JobPhase.RUNNING
        first = wait_for(lambda: (c := backend.logs(handle)).text and c, "the first output")
        assert first.text == "started\n" and not first.complete
        (task_dir(backend, handle) / "release").touch()
        assert wait_terminal(backend, handle).phase is JobPhase.SUCCEEDED
        rest = backend.logs(handle, offset=first.offset)
        assert rest.text == "finished\n" and rest.complete
    finally:
        for job_dir in (work / "jobs").iterdir():
            backend.cancel(JobHandle("local", job_dir.name))


def test_unknown_jobs(backend: LocalBackend) -> None:
    handle = JobHandle("local", "hetpool-nope-1")
    status = backend.poll([handle])[handle.job_id]
    assert status.phase is JobPhase.LOST
    assert backend.find("nope", 1) is None
    assert backend.poll([JobHandle("local", "../../etc")])["../../etc"].phase is JobPhase.LOST
    with pytest.raises(ValueError, match="unknown local job"):
        backend.logs(handle)


def test_failed_gang_member_ends_the_job(backend: LocalBackend) -> None:
    command = 'if [ "$HETPOOL_WORKER_RANK" = 1 ]; then sleep 0.2; exit 4; fi; sleep 60 & echo $! > child.pid; wait'
    handle = backend.submit(request("gang", command, [worker(0), worker(1)]))
    wdir0 = task_dir(backend, handle, 0)
    wait_for(lambda: (wdir0 / "child.pid").exists() and (wdir0 / "child.pid").read_text().strip(), "worker 0")
    runner_pid, child_pid = int((worker_dir(backend, handle, 0) / "pid").read_text()), int((wdir0 / "child.pid").read_text())

    status = wait_terminal(backend, handle)
    assert status.phase is JobPhase.FAILED
    assert status.exit_code == 4
    assert "rank 1" in status.message and "rank 0" not in status.message
    wait_for(lambda: gone(runner_pid) and gone(child_pid), "worker 0 to be killed")


def test_logs_continue_from_offset_and_keep_characters_whole(backend: LocalBackend) -> None:
    command = 'i=0; while [ $i -lt 50 ]; do echo "line $i"; i=$((i+1)); done; echo "héllo 异构算力"'
    handle = backend.submit(request("logs", command))
    assert wait_terminal(backend, handle).phase is JobPhase.SUCCEEDED
    expected = "".join(f"line {i}\n" for i in range(50)) + "héllo 异构算力\n"

    pieces, offset = [], 0
    for _ in range(1000):
        chunk = backend.logs(handle, offset=offset, limit=7)
        assert chunk.offset >= offset
        pieces.append(chunk.text)
        offset = chunk.offset
        if chunk.complete:
            break
    assert "".join(pieces) == expected
    assert offset == len(expected.encode())
    assert "\ufffd" not in "".join(pieces)

    with pytest.raises(ValueError, match=r"valid ranks: \[0\]"):
        backend.logs(handle, rank=3)


def test_logs_of_a_running_job_are_not_complete(backend: LocalBackend) -> None:
    handle = backend.submit(request("follow", "echo one; sleep 60"))
    chunk = wait_for(lambda: (c := backend.logs(handle)).text and c, "output")
    assert chunk.text == "one\n" and not chunk.complete
    backend.cancel(handle)
    assert wait_terminal(backend, handle).phase is JobPhase.CANCELLED
    assert backend.logs(handle, offset=chunk.offset).complete


def test_dead_runner_without_exit_code_fails_the_job(backend: LocalBackend) -> None:
    handle = backend.submit(request("orphan", "echo up $$; sleep 60"))
    wait_for(lambda: backend.logs(handle).text, "the command to start")
    command_pid = int(backend.logs(handle).text.split()[1])
    runner_pid = int((worker_dir(backend, handle, 0) / "pid").read_text())
    workdir = backend.workdir(handle, 0)
    os.kill(runner_pid, signal.SIGKILL)  # as the OOM killer or a reboot would
    try:
        status = wait_terminal(backend, handle)
        assert status.phase is JobPhase.FAILED and status.exit_code is None
        assert "runner died" in status.message
        # The server tears down what the runner could not: the orphaned command (its uid's
        # processes) and the working directory.
        wait_for(lambda: gone(command_pid), "the orphaned command to be killed")
        assert not workdir.exists()
    finally:
        # Only while it lives: once gone, its pid may already lead another test's runner.
        if not gone(command_pid):
            try:
                os.killpg(command_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_tiny_log_limit_still_makes_progress(backend: LocalBackend) -> None:
    handle = backend.submit(request("tiny", 'printf "算力"'))
    assert wait_terminal(backend, handle).phase is JobPhase.SUCCEEDED
    first = backend.logs(handle, limit=1)
    assert first.text == "算" and first.offset == 3
    second = backend.logs(handle, offset=first.offset, limit=1)
    assert second.text == "力" and second.complete


# -- the shared contract (tests/engines/contract.py) --------------------------------------
from tests.engines.contract import *  # noqa: E402, F403 (the contract cases)
from tests.engines.contract import Harness  # noqa: E402


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    work = tmp_path / "contract"
    h = Harness(
        kind="local", make_backend=lambda: LocalBackend(work), make_worker=lambda rank, devices: worker(rank, list(range(devices))), timeout_s=20
    )
    yield h
    backend = LocalBackend(work)
    for handle in h.cleanup:
        backend.cancel(handle)
