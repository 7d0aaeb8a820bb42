"""`hetpool db upgrade | current | backup | restore` on SQLite: an empty database is brought to
the heads, a backup taken while the server's engine holds the database (WAL) restores into a
new path with every task, and bad URLs or paths give an error naming the option."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml
from click.testing import Result
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from tests.conftest import TASKS_DIR, database_url

# The commands are about the SQLite file; PostgreSQL backups are pg_dump / pg_restore (docs/operations.md).
pytestmark = pytest.mark.parametrize("db_kind", ["sqlite"])


def hetpool(*args: str, env: dict[str, str] | None = None) -> Result:
    from hetpool.cli.main import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "HETPOOL_CONFIG": "", **(env or {})})


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def heads() -> list[str]:
    from alembic.script import ScriptDirectory

    from hetpool.server.db.session import alembic_config

    return sorted(ScriptDirectory.from_config(alembic_config()).get_heads())


def test_upgrade_an_empty_database_then_current(db_kind: str, tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "fresh.db")
    pending = hetpool("db", "current", "--database-url", url, "--check")
    assert pending.exit_code == 3, pending.output
    assert "current: (empty database)" in pending.stdout and "pending migrations" in pending.stdout

    first = hetpool("db", "upgrade", "--database-url", url)
    assert first.exit_code == 0, first.output
    assert "before: (empty database)" in first.stdout
    assert f"after:  {', '.join(heads())}" in first.stdout

    again = hetpool("db", "upgrade", "--database-url", url)
    assert again.exit_code == 0 and "already up to date" in again.stdout

    now = hetpool("db", "current", "--database-url", url, "--check")
    assert now.exit_code == 0, now.output
    assert f"current: {', '.join(heads())}" in now.stdout and "up to date" in now.stdout
    with sqlite3.connect(tmp_path / "fresh.db") as conn:
        assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


def test_backup_while_serving_and_restore_into_a_new_path(demo: TestClient, tmp_path: Path) -> None:
    task = yaml.safe_load((TASKS_DIR / "data-prep.yaml").read_text())
    ids = []
    for i in range(3):
        response = demo.post("/api/v1/tasks", json={**task, "name": f"prep-{i}"})
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    live = demo.app.state.ctx.db.url
    assert live.startswith("sqlite:///")
    with sqlite3.connect(live.removeprefix("sqlite:///")) as conn:  # the server's engine runs the file in WAL mode
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    out = tmp_path / "backup" / "hetpool-backup.db"
    missing_dir = hetpool("db", "backup", "--out", str(out), "--database-url", live)
    assert missing_dir.exit_code == 2 and f"--out {out}: directory {out.parent} does not exist" in missing_dir.stderr
    out.parent.mkdir()
    made = hetpool("db", "backup", "--out", str(out), "--database-url", live)
    assert made.exit_code == 0, made.output
    assert "3 tasks" in made.stdout
    # The server keeps working after the online backup; this task is not in the backup.
    assert demo.post("/api/v1/tasks", json={**task, "name": "after-backup"}).status_code == 201
    exists = hetpool("db", "backup", "--out", str(out), "--database-url", live)
    assert exists.exit_code == 2 and "already exists (pass --force to overwrite)" in exists.stderr

    target = tmp_path / "restored" / "hetpool.db"
    restored = hetpool("db", "restore", "--from", str(out), "--database-url", sqlite_url(target))
    assert restored.exit_code == 0, restored.output
    with sqlite3.connect(target) as conn:
        names = sorted(row[0] for row in conn.execute("SELECT name FROM tasks"))
        found = sorted(row[0] for row in conn.execute("SELECT id FROM tasks"))
    assert names == ["prep-0", "prep-1", "prep-2"] and found == sorted(ids)
    current = hetpool("db", "current", "--database-url", sqlite_url(target), "--check")
    assert current.exit_code == 0 and "up to date" in current.stdout

    # A restore never silently replaces a database; --force does (server stopped).
    again = hetpool("db", "restore", "--from", str(out), "--database-url", sqlite_url(target))
    assert again.exit_code == 2 and "already exists (stop the server and pass --force to replace it)" in again.stderr
    assert hetpool("db", "restore", "--from", str(out), "--database-url", sqlite_url(target), "--force").exit_code == 0

    not_a_backup = tmp_path / "notes.txt"
    not_a_backup.write_text("hello")
    wrong = hetpool("db", "restore", "--from", str(not_a_backup), "--database-url", sqlite_url(tmp_path / "x.db"))
    assert wrong.exit_code == 2 and "not a hetpool SQLite backup" in wrong.stderr


def test_bad_urls_give_a_clear_error(db_kind: str, tmp_path: Path) -> None:
    garbage = hetpool("db", "upgrade", "--database-url", "not-a-url")
    assert garbage.exit_code == 2
    assert "--database-url not-a-url: not a database URL" in garbage.stderr and "expected sqlite:///PATH or postgresql+psycopg://" in garbage.stderr

    unknown = hetpool("db", "current", "--database-url", "nosuchdb://x/y")
    assert unknown.exit_code == 2 and "--database-url nosuchdb://x/y: not a database URL" in unknown.stderr

    no_dir = hetpool("db", "upgrade", "--database-url", sqlite_url(tmp_path / "nope" / "h.db"))
    assert no_dir.exit_code == 2 and f"directory {tmp_path / 'nope'} does not exist" in no_dir.stderr

    # Port 1 refuses at once; the password never reaches the terminal.
    refused = hetpool("db", "current", "--database-url", "postgresql+psycopg://hp:s3cret-pw@127.0.0.1:1/hetpool")
    assert refused.exit_code == 1, refused.output
    assert "cannot connect" in refused.stderr and "s3cret-pw" not in refused.output and "hp:***@127.0.0.1:1" in refused.stderr


@pytest.mark.postgres
@pytest.mark.skipif(not shutil.which("pg_dump") or not shutil.which("pg_restore"), reason="PostgreSQL client tools not on PATH")
def test_postgres_backup_and_restore_run_pg_dump(db_kind: str, tmp_path: Path) -> None:
    source, target = database_url("postgres", tmp_path), database_url("postgres", tmp_path)
    assert hetpool("db", "upgrade", "--database-url", source).exit_code == 0
    engine = create_engine(source)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE ops_probe (n int)"))  # a marker row the restore must carry over
        conn.execute(text("INSERT INTO ops_probe VALUES (7)"))
    engine.dispose()
    dump = tmp_path / "hetpool.dump"
    made = hetpool("db", "backup", "--out", str(dump), "--database-url", source)
    assert made.exit_code == 0, made.output
    restored = hetpool("db", "restore", "--from", str(dump), "--database-url", target)
    assert restored.exit_code == 0, restored.output
    assert hetpool("db", "current", "--check", "--database-url", target).exit_code == 0
    engine = create_engine(target)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM ops_probe")).scalar() == 7
    engine.dispose()
    # Into a non-empty database without --force: pg_restore's own error, exit 1.
    again = hetpool("db", "restore", "--from", str(dump), "--database-url", target)
    assert again.exit_code == 1 and "pg_restore failed" in again.stderr
