"""Detached supervisor for one worker of a local job.

Run as ``python -m hetpool.backends.local.runner <job_dir> <rank>`` by `LocalBackend`, in a
session of its own so that it outlives the hetpool server. It starts the task's command with
``/bin/sh -c`` in its own process group, waits for it, records the exit code atomically and
then kills whatever the command left behind in the group.

Everything it knows comes from ``<job_dir>/request.json``; everything it reports goes to
files in ``<job_dir>/worker-<rank>/``, so a restarted server can pick the job up again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

# Imported from the backend, not the other way round: `python -m` of a module that its own
# package __init__ already imported would run it twice.
from hetpool.backends.local.backend import create_exclusive, write_atomic

# After SIGTERM the command gets this long to exit before the whole group is SIGKILLed. The
# runner escalates itself so that `LocalBackend.cancel` never has to block.
GRACE_S = 1.5


class _Escalate(Exception):
    """Raised by the SIGALRM handler: the grace period after SIGTERM is over."""


def _kill_own_group() -> None:
    # Only as a session leader (start_new_session) is the group ours alone; never take down
    # the group of whoever started us by hand.
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    job_dir, rank = Path(argv[1]), int(argv[2])
    wdir = job_dir / f"worker-{rank}"
    terminating = False

    def on_term(signum: int, frame: object) -> None:
        # Usually the whole group got the signal (LocalBackend.cancel uses killpg), so the
        # command has it too; the runner only arms the escalation to SIGKILL.
        nonlocal terminating
        if not terminating:
            terminating = True
            signal.setitimer(signal.ITIMER_REAL, GRACE_S)

    def on_alarm(signum: int, frame: object) -> None:
        raise _Escalate

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGALRM, on_alarm)

    # Claim the worker: the server normally wrote our pid already; a second runner for the
    # same worker (two racing submits) finds another pid there and leaves without running.
    pid_file = wdir / "pid"
    if not create_exclusive(pid_file, str(os.getpid())) and pid_file.read_text().strip() != str(os.getpid()):
        return 0
    if (wdir / "exit_code").exists():
        return 0
    if terminating or (wdir / "cancelled").exists():
        write_atomic(wdir / "exit_code", str(128 + signal.SIGTERM))
        return 0

    payload = json.loads((job_dir / "request.json").read_text(encoding="utf-8"))
    env = {**os.environ, **payload["env"][str(rank)]}
    with open(wdir / "output.log", "ab") as log:
        child = subprocess.Popen(
            ["/bin/sh", "-c", payload["request"]["command"]],
            cwd=wdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if terminating:  # cancelled between the check above and the spawn: the group signal missed it
        child.terminate()
    try:
        rc = child.wait()
        code = 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N, as shells report it
    except _Escalate:
        code = 128 + signal.SIGKILL
    write_atomic(wdir / "exit_code", str(code))
    # The job ends with its command: background processes it left behind die with it (this
    # also ends the runner itself, which has nothing left to do).
    _kill_own_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
