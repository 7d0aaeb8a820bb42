"""How one worker's command is confined on this machine (used by the runner and the server).

The runner (a supervisor that keeps the server's identity) owns the control files in the
server's private work_dir; only the command changes identity. What a command gets:

- an identity that is neither root nor the server (config.py), with no supplementary
  groups unless the operator lists some, and PR_SET_NO_NEW_PRIVS so a setuid binary
  cannot raise it again;
- a working directory of its own, mode 0700, owned by that identity, with an unguessable
  name in a task root that others may traverse but not list (0711) — it never sees the
  control tree, where other tasks' output.log files and the database live;
- a clean environment (`task_environment`);
- resource limits (no core dumps; open files, processes, file size, address space).

When the command ends its processes are killed — all processes of a dynamic uid, so a
process that left the group (setsid) dies too — its working directory is deleted and a
dynamic uid's top-level leftovers in /tmp, /var/tmp and /dev/shm are removed before the
uid is released; a uid is never handed out while a process still runs with it. A reused
uid therefore finds nothing of the task before it there (see docs for what remains).
"""

from __future__ import annotations

import ctypes
import os
import pwd
import re
import resource
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from hetpool.engines.files import create_exclusive, read_int, write_atomic

TASK_PATH = "/usr/local/bin:/usr/bin:/bin"
SWEPT_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
_PR_SET_NO_NEW_PRIVS = 38
_KILL_ROUNDS = 50


class SandboxError(RuntimeError):
    """The sandbox cannot be set up as configured; the message names what to fix."""


# -- the task root ---------------------------------------------------------------------------


def check_task_root(root: Path, via: str) -> Path:
    """Create the task root when missing and check it and every directory above it.

    Every ancestor must be owned by root or the server, traversable by others, and not
    writable by group or others (unless sticky, as /tmp is: there only the owner may
    replace an entry, and the next component's owner is checked in turn). The root itself:
    owned by the server; 0711 when the server switches identity itself (only it creates the
    per-task directories); with sudo, the task users create their own directories, so it
    must be sticky and unreadable by others (e.g. 1730 with the hetpool-tasks group).
    """
    root = Path(os.path.realpath(root))
    me = os.geteuid()
    parts = [Path(*root.parts[: i + 1]) for i in range(len(root.parts))]
    # The ancestors first: nothing is created below a directory tasks could tamper with.
    for path in parts[:-1]:
        if not path.exists():
            break  # made by us below, 0711
        st = os.stat(path)
        if st.st_uid not in (0, me):
            raise SandboxError(f"task root ancestor {path} is owned by uid {st.st_uid}, not root or the server")
        if not st.st_mode & stat.S_IXOTH:
            raise SandboxError(f"task root ancestor {path} (mode {st.st_mode & 0o7777:o}) is not traversable by task users (needs o+x)")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise SandboxError(f"task root ancestor {path} (mode {st.st_mode & 0o7777:o}) is writable by group or others")
    if not root.exists():
        if via != "setuid":
            raise SandboxError(f"task root {root} does not exist; create it with deploy/local-runas.sh")
        create_task_root(root)
    st = os.stat(root)
    mode = st.st_mode & 0o7777
    if via == "setuid" and st.st_uid == me and mode == 0o700:
        # Another server or runner of ours is making it (mkdir under umask 077, then chmod):
        # finish its chmod rather than fail the task (seen with two replicas on one data dir).
        os.chmod(root, 0o711)
        mode = 0o711
    if st.st_uid != me:
        raise SandboxError(f"task root {root} is owned by uid {st.st_uid}, not the server (uid {me})")
    if via == "setuid" and mode != 0o711:
        raise SandboxError(f"task root {root} has mode {mode:o}; it must be 711 (traversable, not listable or writable by tasks)")
    if via != "setuid" and (not mode & stat.S_ISVTX or mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IRGRP)):
        raise SandboxError(f"task root {root} has mode {mode:o}; with sudo it must be sticky, unreadable and not writable by others (e.g. 1730)")
    return root


def create_task_root(root: Path) -> None:
    """Create the missing directories of `root`, each 0711 (traversable, not listable)."""
    missing = []
    path = root
    while not path.exists():
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            pass  # another runner or server made it in between
        os.chmod(path, 0o711)  # explicit: the umask must not decide


def make_workdir(path: Path, uid: int, gid: int) -> None:
    """A fresh 0700 directory owned by the task identity (the name is new: mkdir fails otherwise)."""
    os.mkdir(path, 0o700)
    os.chown(path, uid, gid)
    os.chmod(path, 0o700)


def adopt_checkpoint_dir(path: Path, uid: int, gid: int) -> None:
    """The task's checkpoint directory (kept across its attempts), made or handed to this
    attempt's identity: a resumed attempt may run under another dynamic uid than the one
    that wrote the checkpoint. Run as root, so nothing inside is followed: symlinks and
    special files are left alone (never chowned), and so is a file with other hard links
    (it could be someone else's file linked in). `path` is <task root>/ckpt-<task>/rank-<r>:
    the task's directory is root's (0711), each rank's is its worker's."""
    create_task_root(path.parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise SandboxError(f"checkpoint directory {path} is not a directory") from None
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, 0o700)
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            entry = os.path.join(top, name)
            st = os.lstat(entry)
            if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                os.chown(entry, uid, gid, follow_symlinks=False)


def remove_tree(path: Path) -> None:
    """Delete a task's directory; symlinks inside are removed, never followed (rmtree works
    from directory descriptors on Linux, so a task cannot redirect it elsewhere)."""

    def retry_writable(function, failed, _exc_info) -> None:
        # A task may leave directories without write permission (it matters without root).
        try:
            os.chmod(os.path.dirname(failed), 0o700)
            function(failed)
        except OSError:
            pass

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onerror=retry_writable)


# -- the environment -------------------------------------------------------------------------


def task_environment(task_env: dict[str, str], workdir: Path, user: str, passthrough: dict[str, str]) -> dict[str, str]:
    """Nothing of the server's environment: a minimal base, what the operator whitelisted
    (its values taken when the job was submitted), then the task's own variables."""
    env = {
        "PATH": TASK_PATH,
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": passthrough.get("LANG", "C.UTF-8"),
        "USER": user,
        "LOGNAME": user,
    }
    env.update(passthrough)
    env.update(task_env)
    return env


# -- dynamic uids ----------------------------------------------------------------------------


def uids_in_use() -> set[int]:
    """Every uid (real, effective, saved, filesystem) of a live process on this machine.

    Zombies do not count: they run nothing, and their parent (maybe not ours) reaps them."""
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue  # ended while we looked
        state = re.search(rb"^State:\s+(\S)", status, re.M)
        uids = re.search(rb"^Uid:\s+(.*)$", status, re.M)
        if uids and not (state and state[1] in (b"Z", b"X")):
            found.update(int(x) for x in uids[1].split())
    return found


def allocate_uid(lease_dir: Path, uid_range: tuple[int, int], owner: str) -> int:
    """Lease a uid of the range that no account, no live process and no other job holds.

    The lease is a file `lease_dir/<uid>` naming its owner (job and rank), created
    atomically, so two runners never get the same uid and a restarted server sees which
    uids are taken. Candidates rotate (`.next`), so a uid comes back as late as possible.
    """
    if not lease_dir.is_dir():
        create_task_root(lease_dir.parent)  # 0711 each, as for the task root
        lease_dir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(lease_dir, 0o700)
    low, high = uid_range
    size = high - low + 1
    start = read_int(lease_dir / ".next") or low
    busy = uids_in_use()
    for i in range(size):
        uid = low + (start - low + i) % size
        if uid in busy or (lease_dir / str(uid)).exists() or _has_account(uid):
            continue
        if create_exclusive(lease_dir / str(uid), owner):
            write_atomic(lease_dir / ".next", str(uid + 1 if uid < high else low))
            return uid
    raise SandboxError(f"no free uid in run_as_uid_range {low}-{high}: {size} uids are all leased or in use")


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def lease_owner(lease_dir: Path, uid: int) -> str | None:
    try:
        return (lease_dir / str(uid)).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None


def release_uid(lease_dir: Path, uid: int, owner: str) -> None:
    if lease_owner(lease_dir, uid) == owner:
        (lease_dir / str(uid)).unlink(missing_ok=True)


def kill_uid(uid: int) -> bool:
    """SIGKILL every process running as `uid`; True once none is left.

    kill(-1) sent *as that uid* reaches exactly the processes the uid may signal — its own
    — whatever process group or session they moved to. Repeated while a fork races it.
    """
    for _ in range(_KILL_ROUNDS):
        if uid not in uids_in_use():
            return True
        subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[], env={"PATH": TASK_PATH}, check=False, capture_output=True)
    return uid not in uids_in_use()


def sweep_shared_tmp(uid: int) -> list[str]:
    """Remove what `uid` left at the top of the world-writable directories."""
    removed = []
    for top in SWEPT_DIRS:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
            except OSError:
                continue
    return removed


# -- limits ----------------------------------------------------------------------------------

_RLIMITS = {
    "rlimit_nofile": (resource.RLIMIT_NOFILE, 1),
    "rlimit_nproc": (resource.RLIMIT_NPROC, 1),
    "rlimit_fsize_mb": (resource.RLIMIT_FSIZE, 1 << 20),
    "rlimit_as_mb": (resource.RLIMIT_AS, 1 << 20),
}


def rlimits(limits: dict[str, int]) -> list[tuple[int, int]]:
    """(resource, value) pairs to set: core dumps off, then the configured limits (0: leave as is)."""
    pairs = [(resource.RLIMIT_CORE, 0)]
    for key, (res, unit) in _RLIMITS.items():
        if limits.get(key):
            pairs.append((res, int(limits[key]) * unit))
    return pairs


def confine_preexec(limits: dict[str, int]) -> Callable[[], None]:
    """What the child does after dropping its identity, before exec: limits and no_new_privs.

    Everything it needs (libc, the numbers) is prepared here, in the parent: between fork
    and exec the child should only make system calls.
    """
    pairs = rlimits(limits)
    current = {res: resource.getrlimit(res) for res, _ in pairs}
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl

    def preexec() -> None:
        for res, value in pairs:
            hard = current[res][1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(res, (value, value))
        if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")

    return preexec
