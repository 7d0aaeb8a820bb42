"""Rows that make submits and scheduling safe to retry and to run on several replicas
(migration 20261130_0007b)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base
from hetpool.server.db.types import UTCDateTime


class IdempotencyKeyRow(Base):
    """(user, Idempotency-Key) → the task its first submit created. The primary key is
    what makes two concurrent submits with one key create a single task: the loser's
    insert fails and it answers with the winner's task."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_user_created", "user_id", "created_at"),)

    user_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    body_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the canonical JSON body
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SchedulerEpochRow(Base):
    """One row (id 1): bumped by every scheduling cycle that admits or preempts. A cycle
    applies only if the epoch is still the one it loaded (compare-and-set), so two
    schedulers working from the same usage cannot both admit against it."""

    __tablename__ = "scheduler_epoch"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
