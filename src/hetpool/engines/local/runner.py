"""Detached supervisor for one worker of a local job.

Run as ``python -m hetpool.engines.local.runner <job_dir> <rank>`` by `LocalBackend`, in a
session of its own so that it outlives the hetpool server. The runner keeps the server's
identity — it owns the control files — and starts only the command under the task's
identity (client.py, sandbox.py): ``/bin/sh -c`` in a process group of its own, in the
task's working directory, with a clean environment and resource limits. It waits for the
command, records the exit code atomically, kills whatever the command left behind and
tears the sandbox down.

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

from hetpool.engines.files import create_exclusive, write_atomic
from hetpool.engines.local.client import Placement, finish, prepare, sudo_launch
from hetpool.engines.local.sandbox import TASK_PATH, SandboxError, adopt_checkpoint_dir, confine_preexec, task_environment

# After SIGTERM the command gets this long to exit before its group is SIGKILLed. The
# runner escalates itself (SIGALRM) so that `LocalBackend.cancel` never has to block.
GRACE_S = 1.5
# The command could not be started as the task's identity (as a shell reports "cannot execute").
CANNOT_START = 126


def _signal_group(pgid: int | None, signum: int) -> None:
    if pgid is None:
        return
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # gone already


def _spawn(payload: dict, rank: int, place: Placement, log) -> subprocess.Popen[bytes]:
    identity, request = payload["identity"], payload["request"]
    env = task_environment(payload["env"][str(rank)], place.workdir, place.user, payload.get("passthrough", {}))
    limits = payload["limits"]
    if env.get("HETPOOL_CHECKPOINT_DIR") and identity["via"] != "sudo":
        adopt_checkpoint_dir(Path(env["HETPOOL_CHECKPOINT_DIR"]), place.uid, place.gid)
    if identity["via"] == "sudo":
        child = subprocess.Popen(
            sudo_launch(identity, str(place.workdir)),
            cwd="/",
            env={"PATH": TASK_PATH, "LANG": "C.UTF-8"},
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,
            close_fds=True,
        )
        # The launcher reads what to run from stdin: no secret on a command line, in `ps`.
        launch = {"env": env, "command": request["command"], "limits": limits, "checkpoint_dir": env.get("HETPOOL_CHECKPOINT_DIR", "")}
        child.stdin.write(json.dumps(launch).encode())
        child.stdin.close()
        return child
    return subprocess.Popen(
        ["/bin/sh", "-c", request["command"]],
        cwd=place.workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        user=place.uid,
        group=place.gid,
        extra_groups=place.groups,
        process_group=0,  # its own group: killed as a whole, without killing the runner
        umask=0o077,
        preexec_fn=confine_preexec(limits),
        close_fds=True,
    )


def main(argv: list[str]) -> int:
    job_dir, rank = Path(argv[1]), int(argv[2])
    wdir = job_dir / f"worker-{rank}"
    state: dict = {"terminating": False, "pgid": None, "stop": None}

    def on_term(signum: int, frame: object) -> None:
        # LocalBackend.cancel signals the runner's group; the command has a group of its
        # own, so pass the signal on and arm the escalation to SIGKILL.
        if not state["terminating"]:
            state["terminating"] = True
            _signal_group(state["pgid"], signal.SIGTERM)
            signal.setitimer(signal.ITIMER_REAL, GRACE_S)

    def on_alarm(signum: int, frame: object) -> None:
        # The grace period is over: the command itself and its group, at once.
        _signal_group(state["pgid"], signal.SIGKILL)
        if state["pgid"] is not None:
            try:
                os.kill(state["pgid"], signal.SIGKILL)  # even if it moved to another group
            except ProcessLookupError:
                pass

    def on_stop(signum: int, frame: object) -> None:
        # LocalBackend.stop_gracefully: the task's own stop signal, then its grace (not ours).
        try:
            stop = json.loads((wdir / "stop").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not state["terminating"]:
            state["terminating"], state["stop"] = True, stop
            _signal_group(state["pgid"], getattr(signal, stop["signal"], signal.SIGTERM))
            signal.setitimer(signal.ITIMER_REAL, max(float(stop["grace_s"]), 0.1))

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGUSR2, on_stop)

    # Claim the worker: the server normally wrote our pid already; a second runner for the
    # same worker (two racing submits) finds another pid there and leaves without running.
    pid_file = wdir / "pid"
    if not create_exclusive(pid_file, str(os.getpid())) and pid_file.read_text().strip() != str(os.getpid()):
        return 0
    if (wdir / "exit_code").exists():
        return 0
    if state["terminating"] or (wdir / "cancelled").exists() or (wdir / "stop").exists():
        write_atomic(wdir / "exit_code", str(128 + signal.SIGTERM))
        return 0

    payload = json.loads((job_dir / "request.json").read_text(encoding="utf-8"))
    identity = payload.get("identity")
    with open(wdir / "output.log", "ab") as log:
        try:
            if identity is None:  # written by a hetpool that ran tasks as itself: never start it
                raise SandboxError("the request has no run-as identity (submitted by an older hetpool); resubmit the task")
            place = prepare(job_dir, rank, identity, Path(payload["task_root"]))
            child = _spawn(payload, rank, place, log)
        except (SandboxError, OSError, subprocess.SubprocessError) as exc:
            log.write(f"hetpool: the task could not be started as its own identity: {exc}\n".encode())
            log.flush()
            write_atomic(wdir / "exit_code", str(CANNOT_START))
            if identity is not None:
                _finish(job_dir, rank, identity, log)
            return 0
    state["pgid"] = child.pid
    if state["terminating"]:  # cancelled or stopped between the check above and the spawn
        stop = state["stop"]
        _signal_group(child.pid, getattr(signal, stop["signal"], signal.SIGTERM) if stop else signal.SIGTERM)
    rc = child.wait()
    code = 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N, as shells report it
    signal.setitimer(signal.ITIMER_REAL, 0)
    # The job ends with its command: what it left behind in its group dies with it.
    _signal_group(child.pid, signal.SIGKILL)
    write_atomic(wdir / "exit_code", str(code))
    with open(wdir / "output.log", "ab") as log:
        _finish(job_dir, rank, identity, log)
    return 0


def _finish(job_dir: Path, rank: int, identity: dict, log) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # teardown is short and must not be cut off
    for problem in finish(job_dir, rank, identity):
        log.write(f"hetpool: teardown: {problem}\n".encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
