"""deploy/postgres.sh, the script `make test` and the demo start PostgreSQL with, on a
private port and directory: a start after an immediate stop (or a crash) replays the WAL
first, and the script waits that out instead of failing on the recovering server's lock
file (a suite's immediate stop left ~780 MB of WAL, 60 s of redo: make test could not start)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "postgres.sh"
PG_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not PG_BIN or not os.environ.get("HETPOOL_TEST_POSTGRES_URL"),
    reason="needs root and Debian's PostgreSQL (make test installs and starts it)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def private_pg():
    base = tempfile.mkdtemp(prefix="hetpool-pgtest-", dir="/tmp")
    os.chmod(base, 0o755)
    env = {**os.environ, "HETPOOL_PG_PORT": str(_free_port()), "HETPOOL_PG_DIR": f"{base}/pg"}
    yield env
    subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(base, ignore_errors=True)


def _script(env: dict, *args: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], env={**env, **extra}, capture_output=True, text=True, timeout=600)


def _psql(env: dict, sql: str) -> None:
    password = Path(env["HETPOOL_PG_DIR"], "password").read_text()
    cmd = [
        str(PG_BIN[-1] / "psql"),
        "-q",
        "-h",
        "127.0.0.1",
        "-p",
        env["HETPOOL_PG_PORT"],
        "-U",
        "postgres",
        "-d",
        "hetpool",
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        sql,
    ]
    subprocess.run(cmd, env={**env, "PGPASSWORD": password}, check=True, capture_output=True, timeout=300)


def test_a_start_that_must_replay_the_wal_waits_for_it(private_pg: dict) -> None:
    started = _script(private_pg, "start")
    assert started.returncode == 0, started.stderr
    _psql(private_pg, "CREATE TABLE wal_filler (a int, b text); INSERT INTO wal_filler SELECT g, repeat('x', 200) FROM generate_series(1, 2000000) g")
    data = Path(private_pg["HETPOOL_PG_DIR"], "data")
    subprocess.run(
        ["runuser", "-u", "postgres", "--", str(PG_BIN[-1] / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], check=True, capture_output=True
    )
    # pg_ctl is allowed one second, far less than the replay takes: the script must see the
    # server recovering and wait for it, not try to start another on its lock file.
    again = _script(private_pg, "start", HETPOOL_PG_START_WAIT_S="1")
    assert again.returncode == 0, again.stderr
    assert "did not start in time" in again.stderr  # the recovery outlasted pg_ctl's wait: the path under test
    assert again.stdout.strip().startswith("postgresql+psycopg://postgres:")
    # Up and answering (the test server runs with synchronous_commit off: the last commits
    # before an immediate stop may be gone, so no count is asserted).
    _psql(private_pg, "SELECT 1")


def test_stop_is_clean_so_the_next_start_replays_nothing(private_pg: dict) -> None:
    assert _script(private_pg, "start").returncode == 0
    _psql(private_pg, "CREATE TABLE t (a int); INSERT INTO t SELECT generate_series(1, 1000)")
    assert _script(private_pg, "stop").returncode == 0
    log = Path(private_pg["HETPOOL_PG_DIR"], "server.log").read_text()
    assert "shutdown request" in log and "immediate shutdown" not in log
    assert _script(private_pg, "start").returncode == 0
    assert "automatic recovery" not in Path(private_pg["HETPOOL_PG_DIR"], "server.log").read_text()
