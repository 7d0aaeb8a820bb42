"""How the local engine talks to its workers: the runner and launch modules it starts (as
`python -m`, through sudo when the server is not root), and setting up and tearing down one
worker's sandbox from the files of the control tree.

Shared by the runner (which normally does both) and the server (which finishes the
teardown when a runner died before it could), so everything needed is read from files::

    /var/lib/hetpool/uids/<uid>       lease of a dynamic uid, host-wide: "<job_dir> <rank>"
    <job_dir>/worker-<rank>/uid       the dynamic uid the worker got
    <job_dir>/worker-<rank>/workdir   the task's working directory (written before it exists)
    <job_dir>/worker-<rank>/cleaned   marker: teardown complete, uid released
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hetpool.engines.files import create_exclusive, read_int, read_text, write_atomic
from hetpool.engines.local.config import DEFAULT_TASK_ROOT, UID_LEASES
from hetpool.engines.local.sandbox import (
    TASK_PATH,
    SandboxError,
    allocate_uid,
    create_task_root,
    kill_uid,
    lease_owner,
    make_workdir,
    release_uid,
    remove_tree,
    sweep_shared_tmp,
    uids_in_use,
)

LAUNCH_MODULE = "hetpool.engines.local.launch"
RUNNER_MODULE = "hetpool.engines.local.runner"


@dataclass(frozen=True)
class Placement:
    """Where and as whom one worker's command runs."""

    uid: int | None  # None with sudo (the sudoers target decides)
    gid: int | None
    groups: list[int]
    user: str
    workdir: Path


def lease_dir(job_dir: Path) -> Path:
    # Host-wide, not per work_dir: two servers on one host (or two test runs) draw from the
    # same range, and a uid must never be held by two tasks at once.
    return UID_LEASES


def _owner(job_dir: Path, rank: int) -> str:
    return f"{job_dir} {rank}"


def _stale(owner: str, uid: int) -> bool:
    """A lease whose worker's runner is gone and no process of the uid lives (a server that
    died with its data dir, a test's deleted tmp dir, a runner killed before teardown)."""
    path, _, rank = owner.rpartition(" ")
    job_dir = Path(path)
    pid = read_int(job_dir / f"worker-{rank}" / "pid") if rank.isdigit() else None
    if pid is not None and runner_alive(pid, job_dir, int(rank)):
        return False
    return uid not in uids_in_use()


def _allocate(job_dir: Path, rank: int, uid_range: tuple[int, int]) -> int:
    try:
        return allocate_uid(lease_dir(job_dir), uid_range, _owner(job_dir, rank))
    except SandboxError:
        # Full: take back leases nobody will release, then try once more.
        low, high = uid_range
        for uid in range(low, high + 1):
            owner = lease_owner(lease_dir(job_dir), uid)
            if owner is not None and _stale(owner, uid):
                release_uid(lease_dir(job_dir), uid, owner)
        return allocate_uid(lease_dir(job_dir), uid_range, _owner(job_dir, rank))


def sudo_launch(identity: dict, *args: str) -> list[str]:
    """The command line that runs the launcher as the task user (matches the sudoers line)."""
    return ["sudo", "-n", "-u", identity["user"], "--", sys.executable, "-I", "-m", LAUNCH_MODULE, *args]


def prepare(job_dir: Path, rank: int, identity: dict, task_root: Path) -> Placement:
    """Pick the identity (leasing a dynamic uid) and create the working directory."""
    wdir = job_dir / f"worker-{rank}"
    if identity["mode"] == "dynamic":
        uid = _allocate(job_dir, rank, tuple(identity["uid_range"]))
        write_atomic(wdir / "uid", str(uid))
        gid, user = uid, f"hetpool-{uid}"
    else:
        uid, gid, user = identity["uid"], identity["gid"], identity["user"]
    # The last gate before the command runs: whatever the stored request says.
    if uid is not None and uid in (0, os.geteuid()):
        raise SandboxError(f"refusing to run the task as uid {uid} (root or the server's own uid)")
    # Unguessable, so nobody can create or watch for it in advance.
    workdir = task_root / f"{job_dir.name}-w{rank}-{secrets.token_hex(8)}"
    write_atomic(wdir / "workdir", str(workdir))  # first, so teardown finds it after any crash
    if identity["via"] == "setuid":
        for attempt in range(5):
            try:
                make_workdir(workdir, uid, gid)
                break
            except FileNotFoundError:
                # Another worker's teardown removed the (then empty) task root: make it again.
                if attempt == 4:
                    raise
                create_task_root(task_root)
    # With sudo the launcher creates it, as the task user (the server cannot chown).
    return Placement(uid=uid, gid=gid, groups=list(identity.get("groups") or []), user=user, workdir=workdir)


def finish(job_dir: Path, rank: int, identity: dict) -> list[str]:
    """Kill what is left, delete the working directory, release the uid. Idempotent.

    Returns problems (the uid stays leased while any of its processes might live)."""
    wdir = job_dir / f"worker-{rank}"
    if (wdir / "cleaned").exists():
        return []
    owner = _owner(job_dir, rank)
    problems = []
    uid = read_int(wdir / "uid") if identity["mode"] == "dynamic" else None
    if identity["mode"] == "dynamic" and uid is None:
        uid = _leased_by(lease_dir(job_dir), owner)  # died between leasing and writing worker/uid
    if uid is not None and not kill_uid(uid):
        problems.append(f"processes of uid {uid} survived SIGKILL; the uid stays leased")
    workdir = read_text(wdir / "workdir")
    if workdir:
        try:
            if identity["via"] == "sudo":
                subprocess.run(sudo_launch(identity, "--cleanup", workdir), env={"PATH": TASK_PATH}, capture_output=True, check=True, timeout=120)
            else:
                remove_tree(Path(workdir))
                _prune(Path(workdir).parent)
        except (OSError, subprocess.SubprocessError) as exc:
            problems.append(f"could not delete {workdir}: {exc}")
    if uid is not None:
        sweep_shared_tmp(uid)
        if not problems:
            release_uid(lease_dir(job_dir), uid, owner)
    if not problems:
        create_exclusive(wdir / "cleaned", "")
    return problems


def _prune(task_root: Path) -> None:
    # A default task root is one directory per server data dir (tests make many): remove it
    # when its last task is gone; `prepare` makes it again when needed.
    if task_root.parent == DEFAULT_TASK_ROOT:
        try:
            task_root.rmdir()
        except OSError:
            pass  # other tasks' directories are still in it


def _leased_by(leases: Path, owner: str) -> int | None:
    try:
        names = [p.name for p in leases.iterdir() if p.name.isdigit()]
    except FileNotFoundError:
        return None
    return next((int(n) for n in names if lease_owner(leases, int(n)) == owner), None)


def runner_alive(pid: int, job_dir: Path, rank: int) -> bool:
    """Is `pid` still our runner for this worker (and not a zombie or a reused pid)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # someone else's process: ours run as us
    proc = Path("/proc")
    if not proc.is_dir():
        return True  # no /proc (e.g. macOS): the signal check is all we have
    try:
        args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    # A zombie has an empty cmdline; a reused pid runs something else.
    return RUNNER_MODULE.encode() in args and str(job_dir).encode() in args and str(rank).encode() in args
