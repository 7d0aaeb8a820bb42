"""The audit chain's head (migration 20261130_0005d) and the events waiting to be chained (20261201_0012)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base
from hetpool.server.db.types import UTCDateTime


class AuditHeadRow(Base):
    """One row, kept apart from the events: a hash chain alone cannot tell that its last
    events were deleted (what remains still links up), nor that a well-formed event was
    appended by hand. The head records which event hetpool wrote last, and new events
    link to it, so truncating the trail breaks the next link as well."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    last_id: Mapped[int] = mapped_column(Integer)
    hash: Mapped[str] = mapped_column(String(64))


class AuditPendingRow(Base):
    """An event committed by its request but not yet linked into the chain (services/audit_chain.py).

    Requests insert here without touching the head, so none waits on another for the chain;
    the chainer moves these rows into audit_events in batches, one transaction per batch.
    `mac` (HMAC-SHA256 under the audit key, over `nonce` and the hashed fields) shows an
    edit or a forged row while it waits; `nonce` is unique so a copied row is refused."""

    __tablename__ = "audit_pending"
    # AUTOINCREMENT on SQLite: a deleted last id is never handed out again.
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[datetime] = mapped_column(UTCDateTime())
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    object_kind: Mapped[str] = mapped_column(String(32))
    object_id: Mapped[str] = mapped_column(String(200))
    before: Mapped[dict | None] = mapped_column(JSON)
    after: Mapped[dict | None] = mapped_column(JSON)
    nonce: Mapped[str] = mapped_column(String(32), unique=True)
    # Which key made `mac` (governance/audit_anchor.key_id): a replica with another key
    # leaves the row to the replica that wrote it.
    key_id: Mapped[str] = mapped_column(String(64), index=True)
    mac: Mapped[str] = mapped_column(String(64))
