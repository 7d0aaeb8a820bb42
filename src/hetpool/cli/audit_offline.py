"""`hetpool audit verify --offline`: check the trail in the database against the checkpoints
with the key, without a server — for an auditor holding copies of the key, the checkpoint
file and the log, or when the server itself is not trusted to answer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hetpool.cli.db import _engine, fail


def verify_offline(
    *,
    config: Path | None,
    data_dir: Path | None,
    database_url: str | None,
    key_file: Path | None,
    checkpoints: list[Path] | None,
    logs: list[Path],
) -> dict:
    """The same answer as GET /api/v1/audit/verify; exits 2 on a setup problem."""
    from sqlalchemy import inspect
    from sqlalchemy.orm import Session

    from hetpool.server.config_file import ConfigError, load_settings
    from hetpool.server.services import audit_anchor

    try:
        settings = load_settings(config, {"data_dir": data_dir, "database_url": database_url, "audit_key_file": key_file})
    except ConfigError as exc:
        fail(str(exc))
    url = settings.resolved_database_url()
    # SQLite would make an empty database of a mistyped path, and an empty trail verifies.
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        fail(f"--database-url {url}: no such database file (check --data-dir / --database-url)")
    anchor = audit_anchor.AuditAnchor.from_settings(settings)
    anchor.create_key = False  # verifying never makes a key
    try:
        found, problem = anchor.read(files=checkpoints, logs=logs)
    except ConfigError as exc:
        fail(str(exc))
    engine = _engine(url)
    try:
        if not inspect(engine).has_table("audit_events"):
            fail("the database has no audit_events table: not a hetpool database (or not migrated)")
        with Session(engine) as session, session.begin():
            return audit_anchor.verify(session, found, problem, key=anchor.key, now=datetime.now(UTC))
    finally:
        engine.dispose()
