"""Tampering with the audit trail in the database behind a running server: `hetpool audit
verify` exits 1 and names the first bad event for a modified, a deleted (in the middle
and at the end) and an inserted row; export through the CLI as JSON lines and CSV.

One server for the module. The CLI runs as a real process where its exit code is the
point (a failed verify), otherwise in-process against the same server: starting Python
for every command would make this slow.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetpool.cli.main import app
from hetpool.governance.audit import event_hash
from tests.cli.test_cli_e2e import Server

COLUMNS = ["id", "ts", "actor", "action", "object_kind", "object_id", "before", "after", "prev_hash", "hash"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("audit-tamper")
    srv = Server(root / "data", f"sqlite:///{root / 'hetpool.db'}")
    srv.db_path = root / "hetpool.db"
    srv.start()
    yield srv
    srv.stop()


def _cli(server: Server, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"HETPOOL_URL": server.url, "HETPOOL_TOKEN": server.token or "", "COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def _sql(server: Server, statement: str, params: tuple = ()) -> list[tuple]:
    """Straight into the SQLite file, as someone with access to the database would."""
    with sqlite3.connect(server.db_path, timeout=30) as conn:
        rows = conn.execute(statement, params).fetchall()
    conn.close()
    return rows


def _verify(server: Server, real_process: bool = False) -> tuple[int, str]:
    if real_process:
        result = server.cli("audit", "verify", check=False)
        return result.returncode, result.stdout + result.stderr
    code, out, err = _cli(server, "audit", "verify")
    return code, out + err


def _broken_at(server: Server, event_id: int, words: str, real_process: bool = False) -> None:
    code, out = _verify(server, real_process)
    assert code == 1, out
    assert f"audit chain broken at event {event_id}:" in out and words in out, out


def _intact(server: Server) -> None:
    code, out = _verify(server)
    assert code == 0 and "audit chain intact" in out, out


def test_tampering_is_found_and_named(server: Server) -> None:
    _intact(server)
    [(count,)] = _sql(server, "SELECT count(*) FROM audit_events")
    assert count > 8  # the demo inventory applied at start-up

    # Modified: one field of an event in the middle.
    [(actor,)] = _sql(server, "SELECT actor FROM audit_events WHERE id = 5")
    _sql(server, "UPDATE audit_events SET actor = 'mallory' WHERE id = 5")
    _broken_at(server, 5, "modified", real_process=True)
    _sql(server, "UPDATE audit_events SET actor = ? WHERE id = 5", (actor,))
    _intact(server)

    # Deleted in the middle: the next event's link breaks and the gap is named.
    [saved] = _sql(server, "SELECT * FROM audit_events WHERE id = 6")
    _sql(server, "DELETE FROM audit_events WHERE id = 6")
    _broken_at(server, 7, "event(s) 6 are missing")
    _sql(server, f"INSERT INTO audit_events VALUES ({', '.join('?' * len(saved))})", saved)
    _intact(server)

    # Deleted at the end: what is left still links up; the chain head tells.
    [(last,)] = _sql(server, "SELECT max(id) FROM audit_events")
    [saved] = _sql(server, "SELECT * FROM audit_events WHERE id = ?", (last,))
    _sql(server, "DELETE FROM audit_events WHERE id = ?", (last,))
    _broken_at(server, last, f"event {last} was the last one recorded")
    _sql(server, f"INSERT INTO audit_events VALUES ({', '.join('?' * len(saved))})", saved)
    _intact(server)

    # Inserted: a well-formed event (linked, hash recomputed) appended by hand.
    [(last, last_hash)] = _sql(server, "SELECT id, hash FROM audit_events ORDER BY id DESC LIMIT 1")
    fields = {"ts": "2026-06-01T00:00:00.000000", "actor": "admin", "action": "quota.change", "object_kind": "Quota", "object_id": "q"}
    fields |= {"before": None, "after": None}
    forged = event_hash(last_hash, fields)
    _sql(
        server,
        "INSERT INTO audit_events (id, ts, actor, action, object_kind, object_id, before, after, prev_hash, hash) "
        "VALUES (?, '2026-06-01 00:00:00.000000', 'admin', 'quota.change', 'Quota', 'q', 'null', 'null', ?, ?)",
        (last + 1, last_hash, forged),
    )
    _broken_at(server, last + 1, "inserted")
    json_out = json.loads(_cli(server, "audit", "verify", "-o", "json")[1])
    assert json_out["ok"] is False and json_out["first_bad_event"] == last + 1
    _sql(server, "DELETE FROM audit_events WHERE id = ?", (last + 1,))
    _intact(server)


def test_export_and_filters_through_the_cli(server: Server, tmp_path: Path) -> None:
    events = json.loads(_cli(server, "audit", "verify", "-o", "json")[1])["events"]
    out = tmp_path / "audit.jsonl"
    assert "written to" in server.cli("audit", "export", "--format", "jsonl", "-f", str(out)).stdout  # a real process, to a file
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) >= events and [e["id"] for e in lines] == list(range(1, len(lines) + 1))
    assert all(set(e) == set(COLUMNS) for e in lines)
    assert all(b["prev_hash"] == a["hash"] for a, b in zip(lines, lines[1:], strict=False))
    code, pools, _ = _cli(server, "audit", "export", "--format", "csv", "--kind", "Pool", "--action", "inventory.*")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(pools)))
    assert rows and all(r["object_kind"] == "Pool" and r["action"].startswith("inventory.") for r in rows)
    assert list(rows[0]) == COLUMNS and json.loads(rows[0]["after"]) is not None
    listed = json.loads(_cli(server, "audit", "list", "--kind", "Pool", "--action", "inventory.*", "-o", "json")[1])
    assert [e["id"] for e in listed] == [int(r["id"]) for r in rows]
    assert json.loads(_cli(server, "audit", "list", "--since", "2000-01-01", "--until", "2000-01-02", "-o", "json")[1]) == []
    code, _, err = _cli(server, "audit", "list", "--since", "whenever")
    assert code == 2 and "since" in err
