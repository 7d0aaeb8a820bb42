"""End to end through the real CLI against a real `hetpool up --demo` server process.

This is the newcomer's path: start the server with the demo inventory, submit the
examples with the CLI, read logs, plan an impossible task, cancel, verify the audit
trail — and kill the server mid-run to check that nothing is lost or started twice.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import REPO, TASKS_DIR, database_url

TERMINAL = {"succeeded", "failed", "cancelled"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, data_dir: Path, db_url: str) -> None:
        self.data_dir = data_dir
        self.db_url = db_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.token: str | None = None
        self.log = data_dir / f"server-{self.port}.log"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "hetpool.cli.main", "up", "--demo", "--data-dir", str(self.data_dir), "--port", str(self.port)]
        cmd += ["--database-url", self.db_url]
        # A short leader lease: a server restarted after kill -9 has a new holder id and
        # waits out its predecessor's lease before its workers run.
        env = {**os.environ, "HETPOOL_LEADER_LEASE_S": "2", "HETPOOL_LEADER_RENEW_S": "0.5"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise AssertionError("server did not start:\n" + self.log.read_text())
        match = re.search(r"(hp_[A-Za-z0-9_-]{20,})", self.log.read_text())
        if match and self.token is None:
            self.token = match.group(1)

    def kill(self) -> None:
        """SIGKILL the server only (not the task runners, which live in their own sessions)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "HETPOOL_URL": self.url, "HETPOOL_TOKEN": self.token or "", "COLUMNS": "200"}
        result = subprocess.run([sys.executable, "-m", "hetpool.cli.main", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        if check:
            assert result.returncode == 0, f"hetpool {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def task(self, task_id: str) -> dict:
        return json.loads(self.cli("describe", "task", task_id, "-o", "json").stdout)

    def wait_for(self, task_id: str, states: set[str], timeout_s: float = 40) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            task = self.task(task_id)
            if task["state"] in states:
                return task
            time.sleep(0.3)
        raise AssertionError(f"{task_id} stayed {task['state']}; server log:\n{self.log.read_text()[-3000:]}")


@pytest.fixture
def server(db_kind: str, tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "data", database_url(db_kind, tmp_path))
    srv.start()
    yield srv
    srv.stop()


def test_demo_examples_run_through_the_cli(server: Server) -> None:
    assert server.token, "the admin token is printed once at first start"
    pools = json.loads(server.cli("get", "pools", "-o", "json").stdout)
    assert {p["cluster"] for p in pools} == {"bj-train", "sh-ascend", "gz-general"}
    ids = {}
    for name in ["pytorch-ddp-training.yaml", "llm-inference.yaml", "mindspore-ascend.yaml", "batch-inference.yaml"]:
        out = server.cli("submit", "-f", str(TASKS_DIR / name)).stdout.strip()
        assert re.fullmatch(r"t-[0-9a-f]{10}", out), out
        ids[name] = out
    for name, task_id in ids.items():
        task = server.wait_for(task_id, TERMINAL)
        assert task["state"] == "succeeded", (name, task["message"])
        logs = server.cli("logs", task_id).stdout
        assert logs.strip(), name
    mindspore = server.task(ids["mindspore-ascend.yaml"])
    assert all(p["model"].startswith("ascend-") for p in mindspore["placements"])
    ddp_logs = server.cli("logs", ids["pytorch-ddp-training.yaml"]).stdout
    assert "[0] rank 0/2" in ddp_logs and "[1] rank 1/2" in ddp_logs
    listed = json.loads(server.cli("get", "tasks", "-o", "json").stdout)
    assert {t["id"] for t in listed} == set(ids.values())
    for t in listed:
        assert {"id", "name", "state", "placements"} <= set(t)
    assert server.cli("audit", "verify").returncode == 0


@pytest.mark.parametrize("db_kind", ["sqlite"])  # CLI behaviour; PostgreSQL is covered by the API tests
def test_plan_explains_an_impossible_task_and_submit_refuses_it(server: Server) -> None:
    plan = json.loads(server.cli("plan", "-f", str(TASKS_DIR / "impossible.yaml"), "-o", "json").stdout)
    assert plan["feasible"] is False and plan["placements"] == [] and plan["fallback_used"] is False
    assert plan["reasons"] == {"fewer devices per node than requested": 3}
    human = server.cli("plan", "-f", str(TASKS_DIR / "impossible.yaml")).stdout
    assert "cannot run anywhere" in human and "fewer devices per node" in human
    refused = server.cli("submit", "-f", str(TASKS_DIR / "impossible.yaml"), check=False)
    assert refused.returncode == 2 and "cannot run on any pool" in refused.stderr


@pytest.mark.parametrize("db_kind", ["sqlite"])  # CLI behaviour; PostgreSQL is covered by the API tests
def test_bad_spec_file_is_rejected_with_the_field(server: Server, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Cluster\nname: c9\nbackend: nomad\n---\nkind: Tenant\nname: ok-tenant\n")
    result = server.cli("apply", "-f", str(bad), check=False)
    assert result.returncode == 2
    assert "backend" in result.stderr and "slurm" in result.stderr
    tenants = json.loads(server.cli("get", "tenants", "-o", "json").stdout)
    assert "ok-tenant" not in {t["name"] for t in tenants}  # nothing half-applied


@pytest.mark.parametrize("db_kind", ["sqlite"])  # CLI behaviour; PostgreSQL is covered by the API tests
def test_logs_follow_and_cancel(server: Server, tmp_path: Path) -> None:
    spec = tmp_path / "long.yaml"
    spec.write_text(
        "kind: Task\nname: long-job\ntenant: infra/data/etl\ntemplate: data-prep\ncommand: 'for i in 1 2 3; do echo tick $i; sleep 0.3; done'\n"
    )
    task_id = server.cli("submit", "-f", str(spec)).stdout.strip()
    followed = server.cli("logs", task_id, "-f").stdout
    assert followed.splitlines() == ["tick 1", "tick 2", "tick 3"]
    sleeper = tmp_path / "sleeper.yaml"
    sleeper.write_text("kind: Task\nname: sleeper\ntenant: infra/data/etl\ntemplate: data-prep\ncommand: 'echo up; sleep 120'\n")
    sleeper_id = server.cli("submit", "-f", str(sleeper)).stdout.strip()
    server.wait_for(sleeper_id, {"running"})
    assert "cancelling" in server.cli("cancel", sleeper_id).stdout
    assert server.wait_for(sleeper_id, TERMINAL)["state"] == "cancelled"


def test_server_killed_mid_run_reconciles_without_losing_or_restarting(server: Server, tmp_path: Path) -> None:
    spec = tmp_path / "restart.yaml"
    spec.write_text(  # each start appends to the log (tasks cannot write to the test's tmp_path)
        "kind: Task\nname: survives-restart\ntenant: infra/data/etl\ntemplate: data-prep\ncommand: 'echo start; sleep 4; echo finished'\n"
    )
    task_id = server.cli("submit", "-f", str(spec)).stdout.strip()
    server.wait_for(task_id, {"running"})
    server.kill()
    time.sleep(1)
    server.start()  # same data dir and database
    task = server.wait_for(task_id, TERMINAL)
    assert task["state"] == "succeeded"
    assert server.cli("logs", task_id).stdout.splitlines() == ["start", "finished"]  # ran exactly once
    assert server.cli("audit", "verify").returncode == 0


@pytest.mark.parametrize("db_kind", ["sqlite"])  # CLI behaviour
def test_tables_are_whole_when_piped_and_text_is_never_markup(server: Server, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"HETPOOL_URL": server.url, "HETPOOL_TOKEN": server.token or ""}

    def piped(*args: str, columns: str | None = None) -> str:
        extra = {"COLUMNS": columns} if columns else {}
        done = subprocess.run(
            [sys.executable, "-m", "hetpool.cli.main", *args], cwd=REPO, env=env | extra, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # Piped (no terminal, no COLUMNS), the table is as wide as it needs: every name whole.
    pools, listed = piped("get", "pools"), json.loads(piped("get", "pools", "-o", "json"))
    assert all(p["name"] in pools and p["model"] in pools for p in listed)
    assert max(len(line) for line in pools.splitlines()) > 80
    # -o wide: whole on a narrow terminal too; the plain table there is cut.
    assert all(p["model"] in piped("get", "pools", "-o", "wide", columns="40") for p in listed)
    assert not all(p["model"] in piped("get", "pools", columns="40") for p in listed)
    # Text is text: a description with brackets is shown as written, not eaten as Rich markup.
    doc = tmp_path / "tenant.yaml"
    doc.write_text("kind: Tenant\nname: markup-team\ndescription: 'ids match [a-z0-9]+ and [bold]this[/bold] stays'\n")
    server.cli("apply", "-f", str(doc))
    assert "ids match [a-z0-9]+ and [bold]this[/bold] stays" in piped("get", "tenants")
    # get clusters shows the backend and where each cluster is; describe node its zone.
    clusters = piped("get", "clusters")
    assert all(word in clusters for word in ("BACKEND", "ZONE", "OWNER"))
    row = next(line for line in clusters.splitlines() if "gz-general" in line)
    assert "local" in row and " gz " in row and "infra/data" in row
    node = yaml.safe_load(piped("describe", "node", "cpu-01"))
    assert node["zone"] == "gz" and node["zone_from"] == "cluster gz-general"
