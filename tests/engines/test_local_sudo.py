"""A server that is not root: the local backend switches to a named task user with sudo.

Set up as an operator would: a server account, `deploy/local-runas.sh sudo <server> hetpool-task`
(task users, task root, sudoers line for the server's python). The "server" is a python
process running as that account; hetpool is importable for it (and for the launcher that
sudo starts as the task user) through a root-owned venv with a .pth file, because this
checkout's own interpreter may live where other users cannot reach.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVER = "hetpool-test-srv"
TASK_USER = "hetpool-task"
TASK_ROOT = Path(f"/var/lib/hetpool/tasks-{SERVER}")
VENV = Path("/var/lib/hetpool/test-sudo-venv")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setting up accounts and sudoers needs root")


@pytest.fixture(scope="module")
def server_python() -> str:
    if subprocess.run(["id", SERVER], capture_output=True).returncode != 0:
        account = ["--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--user-group"]
        subprocess.run(["useradd", *account, SERVER], check=True)
    python = VENV / "bin" / "python"
    if not python.exists():
        system_python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        subprocess.run([system_python, "-m", "venv", "--without-pip", str(VENV)], check=True)
    site = next(VENV.glob("lib/python3*/site-packages"))
    (site / "hetpool-src.pth").write_text(str(REPO / "src") + "\n")  # the local backend needs only the stdlib
    env = {**os.environ, "HETPOOL_PYTHON": str(python)}
    subprocess.run([str(REPO / "deploy" / "local-runas.sh"), "sudo", SERVER, TASK_USER], check=True, env=env, capture_output=True)
    return str(python)


def as_server(python: str, work: Path, config: dict, command: str) -> dict:
    """Submit one job as the non-root server, follow it to the end, return what it saw."""
    script = textwrap.dedent(
        f"""
        import json, time
        from pathlib import Path
        from hetpool.engines.base import LaunchRequest, WorkerLaunch
        from hetpool.engines.local import LocalBackend
        b = LocalBackend(Path({str(work)!r}), {config!r})
        w = WorkerLaunch(0, "localhost", "local", None, [0], "CUDA_VISIBLE_DEVICES", 1.0, 1.0)
        try:
            h = b.submit(LaunchRequest("sudo1", 1, "s", "team-a", {command!r}, [w], env={{"GREETING": "hi"}}))
        except Exception as exc:
            print(json.dumps({{"refused": f"{{type(exc).__name__}}: {{exc}}"}})); raise SystemExit
        for _ in range(400):
            s = b.poll([h])[h.job_id]
            if s.phase.terminal:
                break
            time.sleep(0.05)
        wd = b.workdir(h)
        print(json.dumps({{"phase": s.phase.value, "log": b.logs(h).text, "workdir": str(wd), "left": wd.exists()}}))
        """
    )
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HETPOOL_TEST_SECRET": "server-canary"}
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    done = subprocess.run([runuser, "-u", SERVER, "--", python, "-c", script], capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def work() -> Path:
    path = Path(f"/var/tmp/hetpool-sudo-{os.getpid()}")
    path.mkdir(mode=0o700, exist_ok=True)
    os.chown(path, int(subprocess.check_output(["id", "-u", SERVER])), -1)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=True)


def test_a_non_root_server_runs_the_command_as_the_task_user_with_a_clean_environment(server_python: str, work: Path) -> None:
    config = {"run_as_user": TASK_USER, "task_root": str(TASK_ROOT)}
    seen = as_server(server_python, work, config, 'id -un; pwd; stat -c "%U %a" .; env; grep NoNewPrivs /proc/self/status')
    assert seen["phase"] == "succeeded", seen
    lines = seen["log"].splitlines()
    assert lines[0] == TASK_USER
    assert lines[1] == seen["workdir"] and lines[1].startswith(f"{TASK_ROOT}/hetpool-sudo1-1-w0-")
    assert lines[2] == f"{TASK_USER} 700"
    assert "GREETING=hi" in lines and "server-canary" not in seen["log"]
    assert any(line.split() == ["NoNewPrivs:", "1"] for line in lines)
    assert not seen["left"], "the working directory is deleted (as the task user) when the command ends"


def test_a_non_root_server_refuses_a_user_it_cannot_switch_to_and_dynamic_uids(server_python: str, work: Path) -> None:
    refused = as_server(server_python, work, {"run_as_user": "nobody", "task_root": str(TASK_ROOT)}, "true")
    assert refused["refused"].startswith("PermissionError: cannot switch to user 'nobody' with sudo")
    refused = as_server(server_python, work, {"task_root": str(TASK_ROOT)}, "true")
    assert "not root, so it cannot give each task a uid of its own; set run_as_user" in refused["refused"]
