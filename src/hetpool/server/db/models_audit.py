"""The audit chain's head: the last event written and its hash (migration 20261130_0005d)."""

from __future__ import annotations

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base


class AuditHeadRow(Base):
    """One row, kept apart from the events: a hash chain alone cannot tell that its last
    events were deleted (what remains still links up), nor that a well-formed event was
    appended by hand. The head records which event hetpool wrote last, and new events
    link to it, so truncating the trail breaks the next link as well."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    last_id: Mapped[int] = mapped_column(Integer)
    hash: Mapped[str] = mapped_column(String(64))
