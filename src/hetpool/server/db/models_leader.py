"""Leader leases: one row per group of background loops (migration 20261130_0007a)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base
from hetpool.server.db.types import UTCDateTime


class LeaderLeaseRow(Base):
    """Who runs a loop group ('workers', 'connectors') and until when. `token` grows on
    every change of holder, so a write guarded by the token a replica loaded with is
    refused once another replica has taken over (fencing)."""

    __tablename__ = "leader_lease"

    group: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), default="")  # hostname:pid:random; '' when released
    token: Mapped[int] = mapped_column(Integer, default=0)
    acquired_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    renewed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
