"""Starts a task's command as the task user, for a server that is not root (through sudo).

The runner runs ``sudo -n -u <user> -- python -I -m hetpool.engines.local.launch <workdir>``
and writes ``{"env", "command", "limits"}`` as JSON to its stdin — never on a command line,
where `ps` would show it. Already the task user, this creates the working directory (0700),
applies the limits and no_new_privs, and execs ``/bin/sh -c <command>`` with exactly that
environment. ``--cleanup <workdir>`` deletes a finished task's directory; ``--check``
answers 0, to test that sudo works before a task is submitted.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from hetpool.engines.local.sandbox import confine_preexec, remove_tree


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        return 0 if os.geteuid() != 0 else 1
    if len(argv) == 3 and argv[1] == "--cleanup":
        path = Path(argv[2])
        if path.exists() and path.lstat().st_uid != os.geteuid():
            print(f"hetpool launch: {path} is not mine; not deleting it", file=sys.stderr)
            return 1
        remove_tree(path)
        return 0
    if len(argv) != 2 or os.geteuid() == 0:
        print("usage: launch <workdir> | --cleanup <workdir> | --check (never as root)", file=sys.stderr)
        return 2
    spec = json.loads(sys.stdin.buffer.read())
    workdir = Path(argv[1])
    os.mkdir(workdir, 0o700)  # fails if it exists: the runner picked a new, unguessable name
    if spec.get("checkpoint_dir"):
        _own_checkpoint_dir(Path(spec["checkpoint_dir"]))
    os.chdir(workdir)
    os.umask(0o077)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    confine_preexec(spec["limits"])()
    os.execve("/bin/sh", ["/bin/sh", "-c", spec["command"]], spec["env"])
    return 127  # not reached


def _own_checkpoint_dir(path: Path) -> None:
    """The task's checkpoint directory, kept across attempts under the same run-as user:
    made when missing; refused when it exists but is not this user's own directory (a
    task user cannot plant one for another's task: the name is the task id, but the
    check below would refuse it)."""
    for part in (path.parent, path):  # <task root>/ckpt-<task>/rank-<r>, both this user's
        _own_directory(part)


def _own_directory(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise SystemExit(f"hetpool launch: checkpoint directory {path} is not mine; not using it") from None


if __name__ == "__main__":
    sys.exit(main(sys.argv))
