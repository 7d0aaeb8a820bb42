"""ORM row of the approvals area: one approval request (a task waiting, or a held change or
delete of a governed object: Quota, Budget, ApprovalPolicy)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base
from hetpool.server.db.types import UTCDateTime


class ApprovalRow(Base):
    __tablename__ = "approval_requests"
    # The expiry step looks up pending requests by deadline.
    __table_args__ = (Index("ix_approval_requests_state_expires", "state", "expires_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # task | quota | budget | approvalpolicy
    operation: Mapped[str] = mapped_column(String(16), default="apply", server_default="apply")  # apply | delete (held objects)
    state: Mapped[str] = mapped_column(String(16), index=True)  # pending | approved | rejected | expired | withdrawn
    tenant: Mapped[str] = mapped_column(String(200), index=True)
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    document: Mapped[dict | None] = mapped_column(JSON)  # the held Quota document (kind quota)
    reasons: Mapped[list] = mapped_column(JSON)  # [{rule, message, policy}]
    reason: Mapped[str] = mapped_column(Text, default="")  # the submitter's own words
    policies: Mapped[list] = mapped_column(JSON)
    approvers: Mapped[list] = mapped_column(JSON)  # users named by the policies
    requested_by: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expire_after: Mapped[str] = mapped_column(String(32))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    decided_by: Mapped[str | None] = mapped_column(String(64))
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    comment: Mapped[str] = mapped_column(Text, default="")
