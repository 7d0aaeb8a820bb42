"""Issue 14, finding 6, through the CLI against a running server: `hetpool audit checkpoint`,
then the trail rewritten in the SQLite file behind the server's back. `hetpool audit verify`
— through the API and `--offline` from the database, key and checkpoint file, or from the
server's JSON log when the checkpoint file is gone — exits 1 and names the first bad event.
A key file others may read stops `hetpool up`.

One server for the module; the CLI runs as a real process where its exit code is the point.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetpool.cli.main import app
from hetpool.governance.audit_anchor import GENESIS_CHECKPOINT, sign
from tests.cli.test_cli_e2e import Server, free_port
from tests.conftest import REPO


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("audit-anchor")
    srv = Server(root / "data", f"sqlite:///{root / 'hetpool.db'}")
    srv.db_path = root / "hetpool.db"
    # JSON logs: the checkpoints' copies must be readable from the log alone.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HETPOOL_LOG_FORMAT", "json")
        srv.start()
    # The server anchors what it wrote at start in its first checkpoint, from its
    # housekeeping pipeline, which may come after the server answers: wait for it, so that
    # the tests' own checkpoints find their events new (on a busy machine it comes late).
    checkpoints = srv.data_dir / "audit-checkpoints.jsonl"
    deadline = time.monotonic() + 60
    while not (checkpoints.exists() and checkpoints.read_text().strip()):
        assert time.monotonic() < deadline, "the server wrote no checkpoint in 60 s"
        time.sleep(0.2)
    yield srv
    srv.stop()


def _cli(server: Server, *args: str) -> tuple[int, str]:
    env = {"HETPOOL_URL": server.url, "HETPOOL_TOKEN": server.token or "", "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout + result.stderr


def _offline(server: Server, *extra: str) -> subprocess.CompletedProcess:
    """A real process that never talks to the server."""
    args = ["audit", "verify", "--offline", "--data-dir", str(server.data_dir), "--database-url", server.db_url, *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETPOOL_")} | {"COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "hetpool.cli.main", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def _sql(server: Server, statement: str, params: tuple = ()) -> list[tuple]:
    """Straight into the SQLite file, as someone with the database (not the key) would."""
    with sqlite3.connect(server.db_path, timeout=30) as conn:
        rows = conn.execute(statement, params).fetchall()
    conn.close()
    return rows


def test_a_rewritten_trail_is_found_through_the_api_offline_and_from_the_log(server: Server, tmp_path: Path) -> None:
    assert _cli(server, "users", "create", "anchor-a", "--role", "auditor")[0] == 0  # something new to anchor
    taken = server.cli("audit", "checkpoint")  # a real process
    match = re.search(r"checkpoint (\d+) written to (\S+): event (\d+)", taken.stdout)
    assert match, taken.stdout
    seq, path, end = int(match[1]), Path(match[2]), int(match[3])
    assert path == server.data_dir / "audit-checkpoints.jsonl" and len(path.read_text().splitlines()) == seq
    code, out = _cli(server, "audit", "verify")
    assert code == 0 and "audit chain intact" in out and f"anchored by checkpoint {seq} " in out and f"up to event {end};" in out, out
    assert _offline(server).returncode == 0

    # The attack: the last three events deleted and the head moved back; the chain still links up.
    saved = _sql(server, "SELECT * FROM audit_events WHERE id > ? ORDER BY id", (end - 3,))
    [head] = _sql(server, "SELECT last_id, hash FROM audit_head")
    [(kept_hash,)] = _sql(server, "SELECT hash FROM audit_events WHERE id = ?", (end - 3,))
    _sql(server, "DELETE FROM audit_events WHERE id > ?", (end - 3,))
    _sql(server, "UPDATE audit_head SET last_id = ?, hash = ?", (end - 3, kept_hash))

    anchored = f"checkpoint {seq} of "
    verify = server.cli("audit", "verify", check=False)
    [(left,)] = _sql(server, "SELECT max(id) FROM audit_events")  # the server may have written on since
    assert verify.returncode == 1, verify.stdout
    assert f"audit chain broken at event {left + 1}: missing: {anchored}" in verify.stdout and f"up to {end}" in verify.stdout
    offline = _offline(server)
    assert offline.returncode == 1 and f"audit chain broken at event {left + 1}: missing: {anchored}" in offline.stdout, offline.stdout
    # The checkpoint file gone too: the copies in the server's log still tell.
    path.rename(tmp_path / "aside.jsonl")
    unanchored = _offline(server)  # a chain that holds, and nothing to hold it against
    assert unanchored.returncode == 0 and "no checkpoint yet" in unanchored.stdout, unanchored.stdout
    from_log = _offline(server, "--log", str(server.log))
    assert from_log.returncode == 1 and f"audit chain broken at event {left + 1}" in from_log.stdout, from_log.stdout
    (tmp_path / "aside.jsonl").rename(path)

    # Restored: intact again, through the API and offline.
    _sql(server, "DELETE FROM audit_events WHERE id > ?", (end - 3,))
    for row in saved:
        _sql(server, f"INSERT INTO audit_events VALUES ({', '.join('?' * len(row))})", row)
    _sql(server, "UPDATE audit_head SET last_id = ?, hash = ?", head)
    assert _cli(server, "audit", "verify")[0] == 0
    assert _offline(server).returncode == 0


def test_forged_checkpoints_and_a_wrong_key_are_refused_offline(server: Server, tmp_path: Path) -> None:
    [(last_id, last_hash)] = _sql(server, "SELECT last_id, hash FROM audit_head")
    forged = sign(b"x" * 32, seq=1, ts="2026-01-01T00:00:00Z", event_id=last_id, event_hash=last_hash, events=last_id, prev=GENESIS_CHECKPOINT)
    fake = tmp_path / "forged.jsonl"
    fake.write_text(forged.to_line() + "\n")
    result = _offline(server, "--checkpoints", str(fake))
    assert result.returncode == 1 and f"audit checkpoints damaged: {fake} line 1: made with another key" in result.stdout, result.stdout

    other_key = tmp_path / "other.key"
    other_key.write_text("y" * 64)
    other_key.chmod(0o600)
    result = _offline(server, "--key-file", str(other_key))
    assert result.returncode == 1 and "line 1: made with another key" in result.stdout, result.stdout
    other_key.chmod(0o644)
    refused = _offline(server, "--key-file", str(other_key))
    assert refused.returncode == 2 and f"chmod 600 {other_key}" in refused.stderr, refused.stderr


def test_offline_setup_errors_and_flags_without_offline(server: Server, tmp_path: Path) -> None:
    missing = _offline(server, "--database-url", f"sqlite:///{tmp_path / 'nope.db'}")
    assert missing.returncode == 2 and "no such database file" in missing.stderr
    code, out = _cli(server, "audit", "verify", "--data-dir", str(tmp_path))
    assert code == 2 and "go with --offline" in out


def test_checkpoint_through_the_cli_names_an_unchanged_head(server: Server) -> None:
    code, out = _cli(server, "audit", "checkpoint", "-o", "json")
    assert code == 0
    first = json.loads(out)
    code, out = _cli(server, "audit", "checkpoint")
    assert code == 0 and (f"nothing new since checkpoint {first['seq']}" in out or "written to" in out), out  # a token.use may land between


def test_a_key_file_others_can_read_stops_the_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    key = data / "audit.key"
    key.write_text("ab" * 32 + "\n")
    key.chmod(0o644)
    cmd = [sys.executable, "-m", "hetpool.cli.main", "up", "--data-dir", str(data), "--port", str(free_port())]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETPOOL_")}
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"audit key file {key} is accessible to group or others (mode 0644)" in result.stderr, result.stderr
    assert f"chmod 600 {key}" in result.stderr
    assert "Traceback" not in result.stderr
