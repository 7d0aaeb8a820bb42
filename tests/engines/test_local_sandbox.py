"""The local backend's sandbox (issue 14, finding 1), with real processes as real uids:
identity, clean environment, limits, working directories, uid leases and their reuse."""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hetpool.engines.base import JobHandle, JobPhase
from hetpool.engines.local import LocalBackend, sandbox
from hetpool.engines.local import config as local_config
from hetpool.engines.local.config import DEFAULT_UID_RANGE, UID_LEASES, LocalConfigError
from tests.engines.test_local_compute import gone, read_all, request, wait_for, wait_terminal, worker, worker_dir

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching task identities needs a root server (sudo mode: test_local_sudo.py)")


@pytest.fixture
def make(tmp_path: Path) -> Iterator:
    made: list[LocalBackend] = []

    def build(**config: str) -> LocalBackend:
        backend = LocalBackend(tmp_path / "work", config)
        made.append(backend)
        return backend

    yield build
    for backend in made:
        for job_dir in (backend.work_dir / "jobs").iterdir():
            backend.cancel(JobHandle("local", job_dir.name))
            wait_terminal(backend, JobHandle("local", job_dir.name))


def run(backend: LocalBackend, task_id: str, command: str, **kwargs) -> tuple[JobPhase, str]:
    handle = backend.submit(request(task_id, command, **kwargs))
    status = wait_terminal(backend, handle)
    return status.phase, read_all(backend, handle)


def leases(backend: LocalBackend) -> list[str]:
    """This backend's leases among the host's (other servers may hold some)."""
    mine = []
    for path in UID_LEASES.iterdir():
        try:
            if path.name.isdigit() and path.read_text().startswith(f"{backend.work_dir}/"):
                mine.append(path.name)
        except FileNotFoundError:
            continue
    return sorted(mine)


def test_the_command_sees_only_its_own_environment(make, monkeypatch) -> None:
    monkeypatch.setenv("HETPOOL_TEST_SECRET", "server-secret")
    monkeypatch.setenv("HETPOOL_DATABASE_URL", "postgresql://hetpool:pw@db/hetpool")
    monkeypatch.setenv("HF_HOME", "/srv/hf")
    monkeypatch.setenv("NOT_LISTED", "x")
    backend = make(env_passthrough="HF_HOME")
    phase, out = run(backend, "env", "env -0; echo")
    assert phase is JobPhase.SUCCEEDED
    env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    env.pop("PWD", None)  # set by the shell itself
    workdir = env["HOME"]
    assert workdir.startswith("/var/lib/hetpool/tasks/")
    expected = {"PATH", "HOME", "TMPDIR", "LANG", "USER", "LOGNAME", "HF_HOME", "GREETING", "CUDA_VISIBLE_DEVICES"}
    assert set(env) - {k for k in env if k.startswith("HETPOOL_")} - {"SHLVL", "_"} == expected
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin" and env["TMPDIR"] == workdir and env["HF_HOME"] == "/srv/hf"
    assert "server-secret" not in out and "pw@db" not in out


def test_limits_and_no_new_privileges_apply_to_the_command(make) -> None:
    backend = make(rlimit_nofile="256", rlimit_nproc="64", rlimit_fsize_mb="1")
    command = "cat /proc/self/limits; grep NoNewPrivs /proc/self/status; umask; head -c 2000000 /dev/zero > big; echo wrote=$?"
    phase, out = run(backend, "limits", command)
    assert phase is JobPhase.SUCCEEDED
    limits = {m[0]: (m[1], m[2]) for m in re.findall(r"^(Max [a-z ]+?)\s{2,}(\S+)\s+(\S+)", out, re.M)}
    assert limits["Max core file size"] == ("0", "0")
    assert limits["Max open files"] == ("256", "256")
    assert limits["Max processes"] == ("64", "64")
    assert limits["Max file size"] == (str(1 << 20), str(1 << 20))
    assert re.search(r"^NoNewPrivs:\s+1$", out, re.M)
    assert re.search(r"^0077$", out, re.M)
    assert "wrote=0" not in out, "RLIMIT_FSIZE did not stop a 2 MB write"


def test_each_task_gets_a_uid_of_its_own_that_is_released_when_it_ends(make) -> None:
    backend = make()
    handles = [backend.submit(request(f"uid{i}", 'echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"; sleep 0.5')) for i in range(3)]
    for handle in handles:
        assert wait_terminal(backend, handle).phase is JobPhase.SUCCEEDED
    seen = [re.search(r"uid=(\d+) gid=(\d+) groups=(.*)", read_all(backend, h)).groups() for h in handles]
    uids = [int(uid) for uid, _, _ in seen]
    assert len(set(uids)) == 3, "concurrent tasks must not share a uid"
    low, high = DEFAULT_UID_RANGE
    assert all(low <= uid <= high and uid != os.geteuid() for uid in uids)
    assert all(gid == uid and groups.strip() == uid for uid, gid, groups in seen), "no supplementary groups"
    assert leases(backend) == []
    for handle in handles:
        assert not backend.workdir(handle).exists()


def test_a_reused_uid_finds_nothing_of_the_task_before_it(make) -> None:
    # One uid, outside the default range (60600-61099) that servers of concurrent tests lease
    # from: the second task must get it again.
    backend = make(run_as_uid_range="61100-61100")
    first = (
        "echo keep > $HOME/file; echo keep > /tmp/hetpool-leftover-61100; mkdir /dev/shm/hp-left-61100; "
        "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo escaped=$!; sleep 0.2"
    )
    phase, out = run(backend, "first", first)
    assert phase is JobPhase.SUCCEEDED
    escaped = int(re.search(r"escaped=(\d+)", out).group(1))
    wait_for(lambda: gone(escaped), "the process that left the group to be killed with its uid")
    second = (
        "id -u; ls /tmp/hetpool-leftover-61100 /dev/shm/hp-left-61100 2>&1 | grep -c 'No such'; "
        "ps -o stat=,comm= -u $(id -u) | grep -v '^Z' | grep -c sleep; true"  # a zombie runs nothing
    )
    phase, out = run(backend, "second", second)
    assert phase is JobPhase.SUCCEEDED
    assert out.split() == ["61100", "2", "0"]
    assert leases(backend) == []


def test_a_full_uid_range_fails_the_task_with_the_reason(make) -> None:
    backend = make(run_as_uid_range="61101-61101")
    holder = backend.submit(request("holder", "echo up; sleep 60"))
    wait_for(lambda: read_all(backend, holder), "the first task to start")
    handle = backend.submit(request("starved", "echo never"))
    status = wait_terminal(backend, handle)
    assert status.phase is JobPhase.FAILED and status.exit_code == 126
    assert "no free uid in run_as_uid_range 61101-61101" in read_all(backend, handle)
    assert "never" not in read_all(backend, handle)


def test_root_and_the_servers_own_uid_are_refused(make, monkeypatch) -> None:
    with pytest.raises(LocalConfigError, match=r"backend_config.run_as_user: user 'root' is uid 0: tasks never run as root"):
        make(run_as_user="root")
    nobody = pwd.getpwnam("nobody")
    monkeypatch.setattr(local_config.os, "geteuid", lambda: nobody.pw_uid)
    with pytest.raises(LocalConfigError, match=r"uid 65534, the server's own"):
        make(run_as_tenants="team-a=nobody")
    # Not root and no run_as_user: no identity to switch to -> the submit is refused, nothing runs.
    backend = make()
    with pytest.raises(LocalConfigError, match=r"not root, so it cannot give each task a uid of its own; set run_as_user"):
        backend.submit(request("as-server", "echo ran"))
    assert backend.find("as-server", 1) is None


def test_the_runner_refuses_a_stored_identity_of_uid_0(make) -> None:
    """Defence in depth: whatever request.json says, the runner never starts a command as root."""
    backend = make()
    req = request("tampered", "id -u")
    job_dir = backend.work_dir / "jobs" / req.job_name
    job_dir.mkdir(parents=True)
    payload = {
        "request": {"command": "id -u", "workers": [{"rank": 0}]},
        "env": {"0": {}},
        "identity": {"mode": "user", "via": "setuid", "user": "root", "uid": 0, "gid": 0, "groups": [], "uid_range": [0, 0]},
        "task_root": "/var/lib/hetpool/tasks",
        "limits": {},
    }
    (job_dir / "request.json").write_text(json.dumps(payload))
    handle = backend.submit(req)
    status = wait_terminal(backend, handle)
    assert status.phase is JobPhase.FAILED and status.exit_code == 126
    assert "refusing to run the task as uid 0" in read_all(backend, handle)


def test_a_named_user_per_cluster_and_per_tenant(make) -> None:
    subprocess.run([str(REPO / "deploy" / "local-runas.sh")], check=True, capture_output=True)
    backend = make(run_as_tenants="team-b=hetpool-task")
    phase, out = run(backend, "dynamic", "id -u")  # tenant team-a: no mapping -> dynamic uid
    assert phase is JobPhase.SUCCEEDED and DEFAULT_UID_RANGE[0] <= int(out) <= DEFAULT_UID_RANGE[1]
    named = make(run_as_user="hetpool-task")
    phase, out = run(named, "named", "id -un; stat -c '%U %a' .")
    assert phase is JobPhase.SUCCEEDED and out.split("\n")[:2] == ["hetpool-task", "hetpool-task 700"]


def test_task_roots_that_tasks_could_tamper_with_or_not_reach_are_refused(make, tmp_path: Path) -> None:
    private = make(task_root=str(tmp_path / "tasks"))  # pytest's tmp dirs are 0700: not traversable
    with pytest.raises(RuntimeError, match=r"task root ancestor /tmp/pytest-of-\w+ \(mode 700\) is not traversable"):
        private.submit(request("unreachable", "true"))
    loose = Path("/var/tmp") / f"hp-loose-{os.getpid()}"
    loose.mkdir(mode=0o777, exist_ok=True)
    os.chmod(loose, 0o777)
    try:
        backend = make(task_root=str(loose / "tasks"))
        with pytest.raises(RuntimeError, match=rf"task root ancestor {loose} \(mode 777\) is writable by group or others"):
            backend.submit(request("loose", "true"))
        os.chmod(loose, 0o755)
        (loose / "tasks").mkdir(mode=0o755)
        with pytest.raises(RuntimeError, match=rf"task root {loose}/tasks has mode 755; it must be 711"):
            backend.submit(request("listable", "true"))
        # 0700 and ours: another replica is making it (mkdir, then chmod): finished, not refused.
        os.chmod(loose / "tasks", 0o700)
        handle = backend.submit(request("half-made", "true"))
        assert wait_terminal(backend, handle).phase is JobPhase.SUCCEEDED
        assert os.stat(loose / "tasks").st_mode & 0o7777 == 0o711
    finally:
        subprocess.run(["rm", "-rf", str(loose)], check=True)


def test_a_restarted_server_tears_down_after_a_dead_runner_and_releases_the_uid(make) -> None:
    backend = make()
    handle = backend.submit(request("crash", "echo up $$; sleep 60", workers=[worker(0)]))
    wait_for(lambda: read_all(backend, handle), "the command to start")
    command_pid = int(read_all(backend, handle).split()[1])
    assert len(leases(backend)) == 1
    os.kill(int((worker_dir(backend, handle, 0) / "pid").read_text()), signal.SIGKILL)
    restarted = LocalBackend(backend.work_dir)  # a new server on the same files
    status = wait_terminal(restarted, handle)
    assert status.phase is JobPhase.FAILED and "runner died" in status.message
    assert gone(command_pid) and leases(restarted) == []
    assert not restarted.workdir(handle).exists()
    assert (worker_dir(restarted, handle, 0) / "cleaned").exists()


def test_two_servers_on_one_host_never_hand_out_the_same_uid(make, tmp_path: Path) -> None:
    """Another server's runner has leased the only uid and not started its command yet
    (no process runs as the uid): the lease alone must keep the uid from this server."""
    other_job = tmp_path / "other-server" / "jobs" / "hetpool-other-1"
    (other_job / "worker-0").mkdir(parents=True)
    # A stand-in for the other server's live runner: what /proc shows of one.
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "hetpool.engines.local.runner", str(other_job), "0"])
    (other_job / "worker-0" / "pid").write_text(str(runner.pid))
    lease = UID_LEASES / "61102"
    UID_LEASES.mkdir(parents=True, exist_ok=True)
    lease.write_text(f"{other_job} 0")
    try:
        backend = make(run_as_uid_range="61102-61102")
        phase, out = run(backend, "second", "id -u")
        assert phase is JobPhase.FAILED and "no free uid in run_as_uid_range 61102-61102" in out
        assert lease.read_text() == f"{other_job} 0"
    finally:
        runner.kill()
        runner.wait()
        lease.unlink(missing_ok=True)


def test_a_lease_nobody_will_release_is_taken_back_when_the_range_is_full() -> None:
    # What a server that died with its data dir leaves behind (or a test's deleted tmp dir).
    stale = UID_LEASES / "61103"  # outside the default range: a concurrent test's job may hold any uid in it
    UID_LEASES.mkdir(parents=True, exist_ok=True)
    stale.write_text("/nonexistent/data/backends/local/jobs/hetpool-gone-1 0")
    try:
        backend = LocalBackend(Path(f"/var/tmp/hp-lease-{os.getpid()}"), {"run_as_uid_range": "61103-61103"})
        phase, out = run(backend, "after", "id -u")
        assert phase is JobPhase.SUCCEEDED and out.strip() == "61103"
        # Taken back: the uid went to the new job, whose own lease goes with its teardown
        # (a moment after the job ends, on a busy machine).
        assert not stale.exists() or "hetpool-gone-1" not in stale.read_text()
    finally:
        stale.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", f"/var/tmp/hp-lease-{os.getpid()}"], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a directory to another uid needs root")
def test_a_checkpoint_directory_is_handed_over_without_following_what_a_task_planted(tmp_path: Path) -> None:
    root_file = tmp_path / "server-secret"
    root_file.write_text("secret")
    ckpt = tmp_path / "ckpt-t-1" / "rank-0"
    sandbox.adopt_checkpoint_dir(ckpt, 61001, 61001)  # first attempt: made, 0700, the attempt's uid
    assert (ckpt.stat().st_uid, ckpt.stat().st_mode & 0o777) == (61001, 0o700)
    assert (ckpt.parent.stat().st_uid, ckpt.parent.stat().st_mode & 0o777) == (0, 0o711)
    (ckpt / "step").write_text("42")
    os.chown(ckpt / "step", 61001, 61001)
    (ckpt / "link").symlink_to(root_file)  # what a hostile task could leave behind
    os.link(root_file, ckpt / "hard")
    sandbox.adopt_checkpoint_dir(ckpt, 61002, 61002)  # the resumed attempt, under another dynamic uid
    assert (ckpt / "step").stat().st_uid == 61002 and (ckpt / "step").read_text() == "42"
    assert root_file.stat().st_uid == 0  # neither the symlink nor the hard link was followed
    assert os.lstat(ckpt / "link").st_uid == 0
