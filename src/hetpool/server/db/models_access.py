"""Tables of tenancy and access: role bindings and token use (migration 20261130_0005a)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base
from hetpool.server.db.types import UTCDateTime


class RoleBindingRow(Base):
    """A user holds `role` on the tenant subtree `tenant` ('' for a global role: the empty
    string rather than NULL so the unique constraint also holds for global roles)."""

    __tablename__ = "role_bindings"
    __table_args__ = (UniqueConstraint("user_id", "role", "tenant", name="uq_role_bindings_user_role_tenant"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(32))
    tenant: Mapped[str] = mapped_column(String(200), default="", index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_by: Mapped[str] = mapped_column(String(64), default="")


class TokenUseRow(Base):
    """When a token was last used (kept to the minute, so a busy client does not write on
    every request) and when that use was last audited (at most hourly)."""

    __tablename__ = "api_token_use"

    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), primary_key=True)
    last_used_at: Mapped[datetime] = mapped_column(UTCDateTime())
    audited_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
