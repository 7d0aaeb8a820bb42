"""Who a Slurm job runs as, and how the server touches files such a job can write.

A job must never run as the control plane's own user: that user can read hetpool's
database, its secrets and every tenant's job output. So every job is submitted for a mapped
Unix account (backend_config, all strings as everywhere in backend_config)::

    run_as_user     the cluster's default account, "user" or "user:group" (default hetpool-task,
                    which deploy/slurm-accounts.sh creates)
    run_as_tenants  per tenant prefix, "ai-lab=hp-ai-lab, infra/data=hp-etl:hp-etl"; the longest
                    prefix of the task's tenant path wins, else run_as_user

(the same keys as the local engine's, engines/local/config.py; the matching is engines/runas.py.)
    jobs_dir        where job directories live: a directory every Slurm node mounts at the same
                    path, whose parents each run-as account can traverse (x); default: the
                    server's backend directory (usually private to the server: set this)

The server submits with `sbatch --uid/--gid` when it runs as root, else through
`sudo -n -u <account>` (docs/backends.md#the-slurm-backend gives the sudoers line). Root, gid 0,
system accounts (uid < 1000: slurm, munge, postgres … hold keys of the platform) and the
server's own account are refused, at `apply` (422) and again at submit (a permanent
failure of the task), because a config stored earlier or a server started under another user
must not slip through.

Job directory (one per job, under jobs_dir/jobs, which is mode 0711: enterable, not listable)::

    <job>/            server-owned, group = the account's group, 2750: the job reads its scripts,
                      cannot change them nor the server's own files (request.json, final.json …)
    <job>/out/        the only place the job writes: owned by the account, 0700 (root server) or
                      group-shared 2770 with the server's user in the account's group (sudo mode)

Everything under out/ is written by a process that a tenant controls, so the server (root!)
reads it only through `read_job_file`: no symlink is followed at any level below the job
directory, only regular files owned by the account are read. Otherwise a job could link its
output.log to /etc/shadow or to another tenant's log and have `hetpool logs` serve it.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from hetpool.core.tenancy import validate_tenant_path
from hetpool.engines.runas import account_for_tenant, split_tenant_map

DEFAULT_ACCOUNT = "hetpool-task"
MIN_UID = 1000  # below: system accounts, as the local backend (MIN_TASK_UID)
# POSIX-portable user / group names (useradd's default NAME_REGEX, without the trailing $).
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
SUDO = ("sudo", "-n")


class RunAsError(ValueError):
    """backend_config's run-as settings are malformed or name a forbidden account."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"backend_config.{field}: {message}")
        self.loc = f"backend_config.{field}"
        self.reason = message


class UnsafeJobFile(ValueError):
    """A file under a job's out/ directory is a link, not a regular file, or not the job's own."""


@dataclass(frozen=True)
class Account:
    user: str
    group: str = ""  # "" = the user's primary group

    def __str__(self) -> str:
        return f"{self.user}:{self.group}" if self.group else self.user


@dataclass(frozen=True)
class Identity:
    """An account resolved on the submit host (uid and gid are what sbatch and chown get)."""

    user: str
    uid: int
    gid: int
    group: str = ""  # set when not the user's primary group (sudo then needs -g)

    def as_dict(self) -> dict:
        return {"user": self.user, "uid": self.uid, "gid": self.gid, "group": self.group}


def _account(text: str, field: str) -> Account:
    user, _, group = text.strip().partition(":")
    for name, what in ((user, "user"), (group, "group")):
        if (name or what == "user") and not _ACCOUNT.fullmatch(name):
            raise RunAsError(field, f"{what} {name!r} is not a Unix account name ([a-z_][a-z0-9_-]*, at most 32)")
    if user == "root" or group == "root":
        raise RunAsError(field, f"{text.strip()!r} is refused: jobs never run as root")
    return Account(user, group)


@dataclass(frozen=True)
class RunAsConfig:
    default: Account
    tenants: dict[str, Account]  # tenant path prefix -> account

    @classmethod
    def from_config(cls, config: dict[str, str]) -> RunAsConfig:
        default = _account(config.get("run_as_user") or DEFAULT_ACCOUNT, "run_as_user")
        tenants: dict[str, Account] = {}
        for item, prefix, account in split_tenant_map(config.get("run_as_tenants") or ""):
            if not prefix or not account:
                raise RunAsError("run_as_tenants", f"entry {item!r} is not 'tenant-prefix=user[:group]'")
            try:
                validate_tenant_path(prefix)
            except ValueError as exc:
                raise RunAsError("run_as_tenants", f"{prefix!r}: {exc}") from None
            if prefix in tenants:
                raise RunAsError("run_as_tenants", f"tenant prefix {prefix!r} appears twice")
            tenants[prefix] = _account(account, "run_as_tenants")
        return cls(default, tenants)

    def account_for(self, tenant: str) -> Account:
        """The longest configured prefix of `tenant` (whole path segments), else the default."""
        return account_for_tenant(self.tenants.items(), tenant) or self.default


def resolve(account: Account, field: str, server_uid: int | None = None) -> Identity:
    """The account's uid / gid on this host; RunAsError when it is missing or forbidden."""
    server_uid = os.geteuid() if server_uid is None else server_uid
    try:
        entry = pwd.getpwnam(account.user)
    except KeyError:
        raise RunAsError(
            field,
            f"run-as account {account.user!r} does not exist on the hetpool server's host "
            "(create it there and on every Slurm node, e.g. deploy/slurm-accounts.sh)",
        ) from None
    gid = entry.pw_gid
    if account.group:
        try:
            gid = grp.getgrnam(account.group).gr_gid
        except KeyError:
            raise RunAsError(field, f"group {account.group!r} does not exist on the hetpool server's host") from None
    if entry.pw_uid == 0 or gid == 0:
        raise RunAsError(field, f"{account} is refused: it is uid/gid 0 (root); jobs never run as root")
    if entry.pw_uid < MIN_UID:
        raise RunAsError(field, f"{account} is refused: uid {entry.pw_uid} is a system account (< {MIN_UID}), which may hold the platform's keys")
    if entry.pw_uid == server_uid:
        raise RunAsError(
            field,
            f"{account} is refused: it is the hetpool server's own account (uid {server_uid}), which can read the database and every tenant's output",
        )
    return Identity(account.user, entry.pw_uid, gid, account.group if gid != entry.pw_gid else "")


def config_problems(config: dict[str, str]) -> list[dict[str, str]]:
    """Problems with the run-as keys of a Slurm backend_config, as {"loc", "msg"} (for apply's 422).
    Accounts that do not exist on this host are not an error here: they may be created later."""
    problems: list[dict[str, str]] = []
    try:
        parsed = RunAsConfig.from_config(config)
    except RunAsError as exc:
        return [{"loc": exc.loc, "msg": exc.reason}]
    for field, account in [("run_as_user", parsed.default)] + [("run_as_tenants", a) for a in parsed.tenants.values()]:
        try:
            resolve(account, field)
        except RunAsError as exc:
            if "does not exist" not in exc.reason:
                problems.append({"loc": exc.loc, "msg": exc.reason})
    jobs_dir = str(config.get("jobs_dir") or "").strip()
    if jobs_dir and (not os.path.isabs(jobs_dir) or "\0" in jobs_dir):
        problems.append({"loc": "backend_config.jobs_dir", "msg": f"{jobs_dir!r} must be an absolute path (the Slurm nodes see it as is)"})
    return problems


# -- the job directory ---------------------------------------------------------------------------


def unreachable(path: Path, ident: Identity) -> str:
    """Why `ident` cannot traverse to `path` ("" when it can): a job could not even start there."""
    groups = set(os.getgrouplist(ident.user, ident.gid))
    current = Path(path.anchor or "/")
    for part in (None, *path.parts[1:]):
        if part is not None:
            current = current / part
        st = os.stat(current)
        if st.st_uid == ident.uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return f"{current} is mode {stat.S_IMODE(st.st_mode):o} (owner {st.st_uid}:{st.st_gid}) and cannot be traversed by {ident.user}"
    return ""


def share_job_dir(job_dir: Path, ident: Identity) -> None:
    """The job directory: the server's, readable by the account's group only (see the module doc)."""
    fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(fd, -1, ident.gid)
        # setgid: the scripts written next are in the account's group too (created by root, they
        # would be root's group otherwise), readable by the job whatever the server's umask.
        os.fchmod(fd, 0o2750)
    finally:
        os.close(fd)


def job_owned_dir(path: Path, ident: Identity, as_root: bool) -> None:
    """Create (or take over) a directory the job writes into, race-free: through its own fd."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UnsafeJobFile(f"{path} is not a plain directory ({exc.strerror})") from None
    try:
        if as_root:
            os.fchown(fd, ident.uid, ident.gid)
            os.fchmod(fd, 0o700)
        else:
            # setgid: whatever the job creates inside stays in the account's group, which the
            # server's user belongs to (how it reads the logs without root).
            os.fchown(fd, -1, ident.gid)
            os.fchmod(fd, 0o2770)
    finally:
        os.close(fd)


def read_job_file(base: Path, relative: str, owner: int | None, limit: int | None = None, offset: int = 0) -> tuple[bytes, int] | None:
    """(up to `limit` bytes from `offset`, file size) of base/relative, or None when it does not exist.

    No symlink is followed below `base` (which the job cannot replace), and only a regular file
    owned by `owner` is read (None: any owner, for jobs of the layout before run-as).
    """
    parts = [p for p in relative.split("/") if p]
    flags = os.O_RDONLY | os.O_NOFOLLOW
    fds: list[int] = []
    try:
        fds.append(os.open(base, os.O_RDONLY | os.O_DIRECTORY))
        for part in parts[:-1]:
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fds[-1])
        fds.append(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeJobFile(f"{relative} is not a regular file")
        if owner is not None and st.st_uid != owner:
            raise UnsafeJobFile(f"{relative} is owned by uid {st.st_uid}, not the job's account (uid {owner})")
        os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, st.st_size if limit is None else limit) if (limit is None or limit > 0) else b""
        return data, st.st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeJobFile(f"{relative} (or a directory above it) is a symbolic link") from None
        if exc.errno == errno.EACCES:
            raise UnsafeJobFile(f"{relative} cannot be read by the server: {exc.strerror}") from None
        raise
    finally:
        for fd in reversed(fds):
            os.close(fd)


def submit_command(ident: Identity, as_root: bool) -> tuple[list[str], list[str]]:
    """(command prefix, extra sbatch options) that make Slurm run the job as `ident`."""
    if as_root:
        return [], [f"--uid={ident.uid}", f"--gid={ident.gid}"]
    return [*SUDO, "-u", ident.user, *(["-g", ident.group] if ident.group else []), "--"], []


@dataclass(frozen=True)
class JobFiles:
    """The files a job wrote, read safely. Jobs submitted before run-as existed (no "run_as" in
    request.json) ran as the server and wrote into the job directory itself: read as before."""

    job_dir: Path
    owner: int | None  # the account's uid; None for the layout before run-as
    prefix: str  # "out/", or "" for the layout before run-as

    @classmethod
    def of(cls, job_dir: Path, stored: dict | None) -> JobFiles:
        run_as = (stored or {}).get("run_as")
        if not run_as:
            return cls(job_dir, None, "")
        return cls(job_dir, int(run_as["uid"]), "out/")

    def read(self, relative: str, limit: int | None = None, offset: int = 0) -> tuple[bytes, int] | None:
        """Raises UnsafeJobFile for links, non-files and files of another owner."""
        return read_job_file(self.job_dir, self.prefix + relative, self.owner, limit, offset)

    def text(self, relative: str) -> str | None:
        """The file's text; None when it is missing or unsafe (a status then comes from Slurm)."""
        try:
            found = self.read(relative)
        except UnsafeJobFile:
            return None
        return None if found is None else found[0].decode("utf-8", "replace")

    def exists(self, relative: str) -> bool:
        try:
            return self.read(relative, limit=0) is not None
        except UnsafeJobFile:
            return False
