"""Dashboard sessions (migration 20261201_0008d)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base
from hetpool.server.db.types import UTCDateTime


class WebSessionRow(Base):
    """One signed-in browser. The cookie holds a random id; only its SHA-256 is kept here,
    so a copy of the database opens no session. The session acts as the user of the token
    it was made from and ends with it: the foreign keys delete it with the token or the
    user, and a revoked or expired token is refused when the session is used."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # None for a sign-in with an OIDC token (the session then ends at that token's exp).
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)  # the absolute end
