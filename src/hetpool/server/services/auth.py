"""Users and API tokens. Tokens are random; only their SHA-256 is stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.server.db.models import ApiTokenRow, UserRow
from hetpool.server.services import audit

TOKEN_PREFIX = "hp_"
ADMIN_USER = "admin"


@dataclass(frozen=True)
class Principal:
    user_id: int
    name: str
    role: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def ensure_admin(session: Session, now: datetime) -> str | None:
    """Create the admin user and a token the first time; returns the token then, else None."""
    if session.execute(select(UserRow).where(UserRow.name == ADMIN_USER)).scalar_one_or_none() is not None:
        return None
    user = UserRow(name=ADMIN_USER, role="platform-admin", created_at=now)
    session.add(user)
    session.flush()
    token = issue_token(session, user, label="bootstrap", now=now)
    audit.record(session, actor="system", action="user.create", object_kind="User", object_id=ADMIN_USER, after={"role": user.role}, ts=now)
    return token


def issue_token(session: Session, user: UserRow, *, label: str, now: datetime, expires_at: datetime | None = None) -> str:
    token = new_token()
    session.add(ApiTokenRow(user_id=user.id, token_hash=hash_token(token), label=label, created_at=now, expires_at=expires_at))
    session.flush()
    return token


def reset_admin_token(session: Session, now: datetime) -> str:
    """Revoke the admin's tokens and issue a new one (for an operator who lost it)."""
    user = session.execute(select(UserRow).where(UserRow.name == ADMIN_USER)).scalar_one_or_none()
    if user is None:
        token = ensure_admin(session, now)
        assert token is not None
        return token
    for row in session.execute(select(ApiTokenRow).where(ApiTokenRow.user_id == user.id, ApiTokenRow.revoked_at.is_(None))).scalars():
        row.revoked_at = now
    token = issue_token(session, user, label="reset", now=now)
    audit.record(session, actor="system", action="token.reset", object_kind="User", object_id=ADMIN_USER, ts=now)
    return token


def authenticate(session: Session, token: str, now: datetime) -> Principal | None:
    digest = hash_token(token)
    row = session.execute(select(ApiTokenRow).where(ApiTokenRow.token_hash == digest)).scalar_one_or_none()
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        return None
    if row.revoked_at is not None:
        return None
    if row.expires_at is not None and _aware(row.expires_at) <= now:
        return None
    user = session.get(UserRow, row.user_id)
    return Principal(user_id=user.id, name=user.name, role=user.role)


def _aware(ts: datetime) -> datetime:
    from datetime import UTC

    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)
