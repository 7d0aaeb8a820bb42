"""The local backend's `backend_config` (a Cluster's, all values strings) and who a task runs as.

Tasks never run as the control plane (DESIGN.md, principle 6). Each worker's command runs
under an identity chosen here:

- ``run_as_tenants: "ai-lab=hp-ai-lab,infra/data=hp-data"`` — a named user per tenant
  prefix (the longest matching prefix wins);
- else ``run_as_user: hetpool-task`` — one named user for the cluster;
- else a **dynamic uid** of its own from ``run_as_uid_range`` (default 60600-61099), as
  systemd's DynamicUser does. Two tasks then never share a uid, so neither can read the
  other's files, signal or ptrace its processes or read its /proc/<pid>/environ — all of
  which one shared run-as user would allow. Needs a root server.

A root server switches identity itself (setuid in the child); a server that is not root
goes through ``sudo -n -u <user>`` (named users only; see docs/backends.md). Never uid 0,
never the server's own uid: `resolve_identity` refuses them, as it refuses a user that
does not exist.

Other keys: ``task_root`` (where per-task working directories live), ``env_passthrough``
(names of server environment variables a task may see, e.g. ``LD_LIBRARY_PATH``),
``run_as_groups`` (supplementary groups, e.g. ``video,render`` for device nodes), and
resource limits ``rlimit_nofile``, ``rlimit_nproc``, ``rlimit_fsize_mb``, ``rlimit_as_mb``
(0: unlimited; core dumps are always off).
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
from dataclasses import dataclass, field
from pathlib import Path

from hetpool.engines.base import ENV_NAME, NEVER_PASSED_THROUGH
from hetpool.engines.runas import account_for_tenant, split_tenant_map

DEFAULT_UID_RANGE = (60600, 61099)  # unused by systemd (60578-61183); see docs/backends.md
DEFAULT_TASK_ROOT = Path("/var/lib/hetpool/tasks")
UID_LEASES = Path("/var/lib/hetpool/uids")  # host-wide leases of dynamic uids (root only)
MIN_TASK_UID = 1000  # below: system accounts (daemon, www-data, ...) a task must never become
MAX_TASK_UID = 2**31 - 2
DEFAULT_LIMITS = {"rlimit_nofile": 4096, "rlimit_nproc": 4096, "rlimit_fsize_mb": 65536, "rlimit_as_mb": 0}
_LIMIT_MAX = {"rlimit_nofile": 1 << 20, "rlimit_nproc": 1 << 22, "rlimit_fsize_mb": 1 << 30, "rlimit_as_mb": 1 << 30}
_NEVER_PASSED = re.compile(NEVER_PASSED_THROUGH, re.IGNORECASE)
# Keys other parts of hetpool read from any cluster's backend_config.
_SHARED_KEYS = {"sync", "sync_interval_s", "node_prefix"}
KEYS = {
    "run_as_user",
    "run_as_tenants",
    "run_as_uid_range",
    "run_as_groups",
    "task_root",
    "env_passthrough",
    *DEFAULT_LIMITS,
}


class LocalConfigError(ValueError):
    """A backend_config value is unusable; `field` names the key."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"backend_config.{field_name}: {message}")
        self.field = field_name
        self.reason = message


@dataclass(frozen=True)
class LocalConfig:
    run_as_user: str = ""
    run_as_tenants: tuple[tuple[str, str], ...] = ()
    uid_range: tuple[int, int] = DEFAULT_UID_RANGE
    groups: tuple[int, ...] = ()
    task_root: Path | None = None  # None: DEFAULT_TASK_ROOT/<instance>
    env_passthrough: tuple[str, ...] = ()
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))

    def task_root_for(self, work_dir: Path) -> Path:
        # One directory per server data dir, so two servers (or test runs) never share one.
        instance = hashlib.sha256(str(work_dir).encode()).hexdigest()[:12]
        return self.task_root or DEFAULT_TASK_ROOT / instance


def config_problems(config: dict[str, str]) -> list[tuple[str, str]]:
    """(key, message) for each unusable key of a local cluster's backend_config."""
    problems = []
    for key in sorted(config):
        if key not in KEYS and key not in _SHARED_KEYS:
            problems.append((key, f"unknown key for the local backend; known: {', '.join(sorted(KEYS | _SHARED_KEYS))}"))
    try:
        parse_config({k: v for k, v in config.items() if k in KEYS})
    except LocalConfigError as exc:
        problems.append((exc.field, exc.reason))
    return problems


def backend_config_problems(config: dict[str, str]) -> list[dict[str, str]]:
    """`config_problems` as every engine reports them: {"loc": "backend_config.<key>", "msg"}."""
    return [{"loc": f"backend_config.{key}", "msg": msg} for key, msg in config_problems(config)]


def parse_config(config: dict[str, str]) -> LocalConfig:
    """Validated config; raises LocalConfigError naming the first bad key."""
    unknown = sorted(set(config) - KEYS - _SHARED_KEYS)
    if unknown:
        raise LocalConfigError(unknown[0], f"unknown key for the local backend; known: {', '.join(sorted(KEYS | _SHARED_KEYS))}")
    user = config.get("run_as_user", "").strip()
    if user:
        _named_user("run_as_user", user)
    tenants = _parse_tenants(config.get("run_as_tenants", ""))
    limits = dict(DEFAULT_LIMITS)
    for key in DEFAULT_LIMITS:
        if key in config:
            limits[key] = _parse_int(key, config[key], 0, _LIMIT_MAX[key])
    if limits["rlimit_nofile"] and limits["rlimit_nofile"] < 64:
        raise LocalConfigError("rlimit_nofile", f"{limits['rlimit_nofile']} is below 64 (0: unlimited); a shell needs more")
    if limits["rlimit_nproc"] and limits["rlimit_nproc"] < 16:
        raise LocalConfigError("rlimit_nproc", f"{limits['rlimit_nproc']} is below 16 (0: unlimited)")
    root = config.get("task_root", "").strip()
    if root and not root.startswith("/"):
        raise LocalConfigError("task_root", f"{root!r} is not an absolute path")
    return LocalConfig(
        run_as_user=user,
        run_as_tenants=tenants,
        uid_range=_parse_range(config["run_as_uid_range"]) if "run_as_uid_range" in config else DEFAULT_UID_RANGE,
        groups=_parse_groups(config.get("run_as_groups", "")),
        task_root=Path(os.path.normpath(root)) if root else None,
        env_passthrough=_parse_env_names(config.get("env_passthrough", "")),
        limits=limits,
    )


def _parse_int(key: str, text: str, low: int, high: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise LocalConfigError(key, f"{text!r} is not a whole number") from None
    if not low <= value <= high:
        raise LocalConfigError(key, f"{value} is outside {low}..{high}")
    return value


def _parse_range(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d{1,10})\s*-\s*(\d{1,10})\s*", text)
    if not match:
        raise LocalConfigError("run_as_uid_range", f"{text!r} is not LOW-HIGH (e.g. 60600-61099)")
    low, high = int(match[1]), int(match[2])
    if not MIN_TASK_UID <= low <= high <= MAX_TASK_UID:
        raise LocalConfigError("run_as_uid_range", f"{low}-{high} must satisfy {MIN_TASK_UID} <= LOW <= HIGH <= {MAX_TASK_UID}")
    if high - low >= 1 << 20:
        raise LocalConfigError("run_as_uid_range", f"{low}-{high} holds more than {1 << 20} uids")
    taken = sorted(u.pw_uid for u in pwd.getpwall() if low <= u.pw_uid <= high)
    if taken:
        # A dynamic uid that belongs to a real account would give the task that account's files.
        owner = pwd.getpwuid(taken[0]).pw_name
        raise LocalConfigError("run_as_uid_range", f"{low}-{high} contains uid {taken[0]} of user {owner!r}; choose a range no account uses")
    taken_groups = sorted(g.gr_gid for g in grp.getgrall() if low <= g.gr_gid <= high)
    if taken_groups:
        raise LocalConfigError("run_as_uid_range", f"{low}-{high} contains gid {taken_groups[0]} of group {grp.getgrgid(taken_groups[0]).gr_name!r}")
    if not _mapped(low, high):
        raise LocalConfigError("run_as_uid_range", f"{low}-{high} is not mapped in this user namespace (/proc/self/uid_map)")
    return low, high


def _mapped(low: int, high: int) -> bool:
    try:
        lines = Path("/proc/self/uid_map").read_text().split("\n")
    except OSError:
        return True  # no user namespaces here (not Linux): nothing to check
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and int(parts[0]) <= low and high < int(parts[0]) + int(parts[2]):
            return True
    return False


def _parse_tenants(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item, prefix, user in split_tenant_map(text):
        if not prefix or not user:
            raise LocalConfigError("run_as_tenants", f"entry {item!r} is not TENANT=USER (e.g. ai-lab=hp-ai-lab)")
        _named_user("run_as_tenants", user)
        pairs.append((prefix.strip("/"), user))
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


def _parse_groups(text: str) -> tuple[int, ...]:
    gids = []
    for name in filter(None, (p.strip() for p in text.split(","))):
        try:
            gid = grp.getgrnam(name).gr_gid
        except KeyError:
            raise LocalConfigError("run_as_groups", f"no group {name!r} on this host") from None
        if gid == 0 or gid == os.getegid():
            raise LocalConfigError("run_as_groups", f"group {name!r} is gid {gid}, the server's or root's group")
        gids.append(gid)
    return tuple(gids)


def _parse_env_names(text: str) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if not ENV_NAME.fullmatch(name):
            raise LocalConfigError("env_passthrough", f"{name!r} is not an environment variable name")
        if _NEVER_PASSED.match(name):
            raise LocalConfigError("env_passthrough", f"{name!r} may hold a server secret or change what code runs; it is never passed to tasks")
    return tuple(names)


def _named_user(key: str, name: str) -> pwd.struct_passwd:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise LocalConfigError(key, f"no user {name!r} on this host (deploy/local-runas.sh creates hetpool-task)") from None
    _refuse_privileged(key, entry.pw_uid, name)
    if entry.pw_gid == 0:
        raise LocalConfigError(key, f"user {name!r} has gid 0 (root's group) as its primary group")
    return entry


def _refuse_privileged(key: str, uid: int, name: str) -> None:
    if uid == 0:
        raise LocalConfigError(key, f"user {name!r} is uid 0: tasks never run as root")
    if uid == os.geteuid():
        raise LocalConfigError(key, f"user {name!r} is uid {uid}, the server's own: tasks never run as the control plane")


@dataclass(frozen=True)
class Identity:
    """Who one worker's command runs as. `uid` is None for a dynamic uid (picked by the runner)."""

    mode: str  # "dynamic" | "user"
    via: str  # "setuid" (root server) | "sudo"
    user: str = ""
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()
    uid_range: tuple[int, int] = DEFAULT_UID_RANGE

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "via": self.via,
            "user": self.user,
            "uid": self.uid,
            "gid": self.gid,
            "groups": list(self.groups),
            "uid_range": list(self.uid_range),
        }


def resolve_identity(config: LocalConfig, tenant: str) -> Identity:
    """The identity for a task of `tenant`; raises LocalConfigError when none is usable."""
    root = os.geteuid() == 0
    via = "setuid" if root else "sudo"
    name = account_for_tenant(config.run_as_tenants, tenant) or ""
    key = "run_as_tenants" if name else "run_as_user"
    name = name or config.run_as_user
    if name:
        entry = _named_user(key, name)  # again at submit: /etc/passwd may have changed since apply
        if root:
            groups = tuple(sorted({*os.getgrouplist(name, entry.pw_gid), *config.groups} - {0}))
        else:
            groups = ()  # sudo sets the target user's own groups
        return Identity(mode="user", via=via, user=name, uid=entry.pw_uid, gid=entry.pw_gid, groups=groups)
    if not root:
        raise LocalConfigError(
            "run_as_user",
            f"the server runs as uid {os.geteuid()}, not root, so it cannot give each task a uid of its own; "
            "set run_as_user (a user the server may `sudo -n -u` to: deploy/local-runas.sh sudo <server-user>)",
        )
    return Identity(mode="dynamic", via=via, groups=config.groups, uid_range=config.uid_range)
