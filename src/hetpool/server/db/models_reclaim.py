"""Reclaim state per task attempt: since when it has been idle, and a notice given (migration 20261130_0005d)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base
from hetpool.server.db.types import UTCDateTime


class ReclaimStateRow(Base):
    """Idleness needs history that a single heartbeat does not carry; one row per running
    attempt, removed by the reclaim pass once the attempt no longer runs."""

    __tablename__ = "reclaim_state"

    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    idle_since: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # A notice given and not withdrawn: what for, why, when the action is due.
    notice_cause: Mapped[str | None] = mapped_column(String(16))
    notice_reason: Mapped[str | None] = mapped_column(Text)
    notice_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    act_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    action: Mapped[str | None] = mapped_column(String(16))
    policy: Mapped[str | None] = mapped_column(String(200))
    # Set once the action was taken, so a task still stopping is not acted on twice.
    acted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
