"""Server-side dashboard sessions (issue 14, finding 8).

Why not keep the API token in the cookie, as the dashboard first did: whoever copies the
cookie (a shared machine, a browser profile backup, a proxy log) holds a long-lived API
credential usable from anywhere, and signing out could not take it back.

So sign-in checks the API token once and then forgets it. The cookie holds a random
session id (256 bits) that is no credential of the API: the database keeps only its
SHA-256, with the user, the token it was made from, and its idle and absolute deadlines.
Each page resolves the session here to a principal (the token's user with its current role
bindings) and its in-process API calls carry that principal in the ASGI scope
(`SCOPE_KEY`), which no network client can set: nothing secret travels, nothing is minted.

A session ends when it is signed out (its row is deleted: a copied cookie is then
useless), when unused for `web_session_idle_s`, `web_session_max_s` after sign-in, when its
token is revoked or expires, or when its user is deleted (foreign keys delete it with the
token or the user). A session made from an OIDC token ends at that token's expiry.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from hetpool.server.db.models import ApiTokenRow, UserRow
from hetpool.server.db.models_web import WebSessionRow
from hetpool.server.services import audit
from hetpool.server.services.auth import Principal, principal_for

SCOPE_KEY = "hetpool.web_caller"  # ASGI scope key of in-process dashboard calls (never set from the network)
# last_seen_at is written at most this often (or a tenth of the idle timeout when shorter): a page
# firing many requests costs no write for each.
SEEN_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class WebCaller:
    """Who an in-process dashboard call acts for."""

    principal: Principal
    session_id: int


def hash_session_id(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def jwt_expiry(token: str) -> datetime | None:
    """The `exp` of a JWT the API has already verified (the payload is only read here)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return datetime.fromtimestamp(int(claims["exp"]), UTC)
    except (IndexError, ValueError, KeyError, TypeError, OverflowError):
        return None


def start(session: Session, principal: Principal, now: datetime, settings, *, not_after: datetime | None = None) -> str:
    """Open a session for `principal` (resolved from the token just checked); returns the
    raw session id for the cookie. `not_after`: an OIDC token's expiry."""
    session.execute(delete(WebSessionRow).where(WebSessionRow.expires_at <= now))  # tidy up ended sessions
    raw = secrets.token_urlsafe(32)
    expires = now + timedelta(seconds=settings.web_session_max_s)
    if principal.token_id is not None:
        token = session.get(ApiTokenRow, principal.token_id)
        if token is not None and token.expires_at is not None:
            expires = min(expires, token.expires_at)
    if not_after is not None:
        expires = min(expires, not_after)
    row = WebSessionRow(
        session_hash=hash_session_id(raw),
        user_id=principal.user_id,
        token_id=principal.token_id,
        created_at=now,
        last_seen_at=now,
        expires_at=expires,
    )
    session.add(row)
    session.flush()
    after = {"token_id": principal.token_id, "via": principal.via, "expires_at": expires.isoformat()}
    audit.record(session, actor=principal.name, action="session.start", object_kind="WebSession", object_id=str(row.id), after=after, ts=now)
    return raw


def resolve(session: Session, raw: str, now: datetime, settings) -> WebCaller | None:
    """The caller of a live session, or None (and an ended session is deleted)."""
    if not raw or len(raw) > 200:
        return None
    row = session.execute(select(WebSessionRow).where(WebSessionRow.session_hash == hash_session_id(raw))).scalar_one_or_none()
    if row is None:
        return None
    idle = timedelta(seconds=settings.web_session_idle_s)
    ended = row.expires_at <= now or row.last_seen_at + idle <= now
    token = session.get(ApiTokenRow, row.token_id) if row.token_id is not None else None
    if row.token_id is not None:
        ended = ended or token is None or token.revoked_at is not None or (token.expires_at is not None and token.expires_at <= now)
    user = None if ended else session.get(UserRow, row.user_id)
    if user is None:
        session.delete(row)
        return None
    if now - row.last_seen_at >= min(SEEN_RESOLUTION, idle / 10):
        row.last_seen_at = now
    via = "session" if row.token_id is not None else "oidc"
    return WebCaller(principal_for(session, user, token_id=row.token_id, via=via), row.id)


def end(session: Session, raw: str, now: datetime) -> bool:
    """Sign-out: delete the session. True when there was one."""
    row = session.execute(select(WebSessionRow).where(WebSessionRow.session_hash == hash_session_id(raw or ""))).scalar_one_or_none()
    if row is None:
        return False
    user = session.get(UserRow, row.user_id)
    actor = user.name if user is not None else "anonymous"
    audit.record(session, actor=actor, action="session.end", object_kind="WebSession", object_id=str(row.id), after={"reason": "sign-out"}, ts=now)
    session.delete(row)
    return True
