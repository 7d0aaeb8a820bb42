"""Writing and checking the audit trail (within the caller's transaction)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from hetpool.governance.audit import GENESIS_HASH, ChainBreak, event_hash, verify_chain
from hetpool.server.db.models import AuditEventRow

# Held for the rest of the transaction on PostgreSQL so concurrent writers extend the
# chain one after the other instead of forking it. SQLite serialises writers anyway.
_AUDIT_LOCK_KEY = 0x68657470


def _ts_text(ts: datetime) -> str:
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    return ts.isoformat(timespec="microseconds")


def _hashed_fields(row: AuditEventRow) -> dict[str, Any]:
    return {
        "ts": _ts_text(row.ts),
        "actor": row.actor,
        "action": row.action,
        "object_kind": row.object_kind,
        "object_id": row.object_id,
        "before": row.before,
        "after": row.after,
    }


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    object_kind: str,
    object_id: str,
    before: dict | None = None,
    after: dict | None = None,
    ts: datetime,
) -> AuditEventRow:
    if session.bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _AUDIT_LOCK_KEY})
    last = session.execute(select(AuditEventRow.hash).order_by(AuditEventRow.id.desc()).limit(1)).scalar()
    row = AuditEventRow(
        ts=ts.astimezone(UTC) if ts.tzinfo else ts,
        actor=actor,
        action=action,
        object_kind=object_kind,
        object_id=object_id,
        before=before,
        after=after,
        prev_hash=last or GENESIS_HASH,
        hash="",
    )
    row.hash = event_hash(row.prev_hash, _hashed_fields(row))
    session.add(row)
    session.flush()
    return row


def verify(session: Session) -> ChainBreak | None:
    rows = session.execute(select(AuditEventRow).order_by(AuditEventRow.id)).scalars()
    return verify_chain((r.id, r.prev_hash, r.hash, _hashed_fields(r)) for r in rows)


def count(session: Session) -> int:
    return session.execute(select(func.count(AuditEventRow.id))).scalar_one()


def event_dict(row: AuditEventRow) -> dict:
    return {
        "id": row.id,
        "ts": _ts_text(row.ts) + "Z",
        "actor": row.actor,
        "action": row.action,
        "object_kind": row.object_kind,
        "object_id": row.object_id,
        "before": row.before,
        "after": row.after,
        "hash": row.hash,
    }
