"""Who is calling: API tokens (random; only their SHA-256 is stored) and, when configured,
OIDC bearer tokens (JWTs checked against the issuer's JWKS). Either way the caller must be
a hetpool user; what it may do comes from its role bindings, never from token claims."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from hetpool.governance.access import GLOBAL_ROLES, Binding
from hetpool.server.db.models import ApiTokenRow, UserRow
from hetpool.server.db.models_access import RoleBindingRow, TokenUseRow
from hetpool.server.services import audit, auth_cache

TOKEN_PREFIX = "hp_"
ADMIN_USER = "admin"
USE_AUDIT_INTERVAL = timedelta(hours=1)  # token.use is audited at most this often per token
LAST_USED_RESOLUTION = timedelta(minutes=1)  # last_used_at is written at most this often


@dataclass(frozen=True)
class Principal:
    user_id: int
    name: str
    role: str  # the strongest role held, for display; decisions use `bindings`
    bindings: tuple[Binding, ...] = ()
    token_id: int | None = None
    via: str = "token"  # token | oidc | system

    def __post_init__(self) -> None:
        # A principal built the old way (one global role, no bindings) keeps that role.
        if not self.bindings and self.role in GLOBAL_ROLES:
            object.__setattr__(self, "bindings", (Binding(self.role, None),))


# What every caller refused authentication is told, whatever the reason: telling an
# unknown token from a revoked or expired one would confirm that a leaked or guessed token
# was once real (and whose, through the audit of its use). Operators read the reason and
# the detail in the audit trail (auth.failure).
UNAUTHORIZED_MESSAGE = (
    "not authenticated: send 'Authorization: Bearer <token>' with a valid token; "
    "one that worked before may have expired or been revoked (hetpool tokens create makes a new one)"
)


class AuthFailure(Exception):
    """Authentication refused. `reason` (missing | invalid | expired | revoked | unknown_user)
    and `message` (the detail) go into the audit trail only; the caller gets
    UNAUTHORIZED_MESSAGE. Neither contains the token."""

    def __init__(self, reason: str, message: str, *, token_id: int | None = None, user: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.token_id = token_id
        self.user = user


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


# ----------------------------------------------------------------------------- users
def load_bindings(session: Session, user_id: int) -> tuple[Binding, ...]:
    rows = session.execute(select(RoleBindingRow.role, RoleBindingRow.tenant).where(RoleBindingRow.user_id == user_id)).all()
    return tuple(sorted(Binding(role, tenant or None) for role, tenant in rows))


def principal_for(session: Session, user: UserRow, *, token_id: int | None = None, via: str = "token") -> Principal:
    return Principal(user_id=user.id, name=user.name, role=user.role, bindings=load_bindings(session, user.id), token_id=token_id, via=via)


def _bind_admin(session: Session, user: UserRow, now: datetime) -> None:
    exists = session.execute(
        select(RoleBindingRow.id).where(RoleBindingRow.user_id == user.id, RoleBindingRow.role == "platform-admin", RoleBindingRow.tenant == "")
    ).first()
    if exists is None:
        session.add(RoleBindingRow(user_id=user.id, role="platform-admin", tenant="", created_at=now, created_by="system"))
        user.role = "platform-admin"
        session.flush()


def ensure_admin(session: Session, now: datetime) -> str | None:
    """Create the admin user and a token the first time; returns the token then, else None."""
    if session.execute(select(UserRow).where(UserRow.name == ADMIN_USER)).scalar_one_or_none() is not None:
        return None
    user = UserRow(name=ADMIN_USER, role="platform-admin", created_at=now)
    session.add(user)
    session.flush()
    _bind_admin(session, user, now)
    token = issue_token(session, user, label="bootstrap", now=now)
    audit.record(session, actor="system", action="user.create", object_kind="User", object_id=ADMIN_USER, after={"role": user.role}, ts=now)
    return token


def issue_token(session: Session, user: UserRow, *, label: str, now: datetime, expires_at: datetime | None = None) -> str:
    token, _row = issue_token_row(session, user, label=label, now=now, expires_at=expires_at)
    return token


def issue_token_row(session: Session, user: UserRow, *, label: str, now: datetime, expires_at: datetime | None = None) -> tuple[str, ApiTokenRow]:
    token = new_token()
    row = ApiTokenRow(user_id=user.id, token_hash=hash_token(token), label=label, created_at=now, expires_at=expires_at)
    session.add(row)
    session.flush()
    return token, row


def reset_admin_token(session: Session, now: datetime) -> str:
    """Revoke the admin's tokens and issue a new one (for an operator who lost it); the
    admin gets its platform-admin binding back if someone removed it."""
    user = session.execute(select(UserRow).where(UserRow.name == ADMIN_USER)).scalar_one_or_none()
    if user is None:
        token = ensure_admin(session, now)
        assert token is not None
        return token
    for row in session.execute(select(ApiTokenRow).where(ApiTokenRow.user_id == user.id, ApiTokenRow.revoked_at.is_(None))).scalars():
        row.revoked_at = now
    _bind_admin(session, user, now)
    token = issue_token(session, user, label="reset", now=now)
    audit.record(session, actor="system", action="token.reset", object_kind="User", object_id=ADMIN_USER, ts=now)
    return token


# ------------------------------------------------------------------------ API tokens
def looks_like_jwt(token: str) -> bool:
    return not token.startswith(TOKEN_PREFIX) and token.count(".") == 2


def resolve(session: Session, token: str, now: datetime, settings=None, *, source: str = "") -> Principal:
    """The principal for a bearer token, or AuthFailure. A successful use is noted on the
    token (last_used_at) and audited at most hourly (token.use)."""
    if not token:
        raise AuthFailure("missing", "missing bearer token: send 'Authorization: Bearer <token>'")
    if looks_like_jwt(token):
        return _resolve_oidc(session, token, now, settings, source=source)
    digest = hash_token(token)
    cached = auth_cache.lookup(session, digest, now)
    if cached is not None:
        if not _noted_lately(session, cached.token_id, now) and _note_use(session, cached.token_id, now):
            _audit_use(session, cached.principal.name, cached.token_id, cached.label, source, now)
        return cached.principal
    row = session.execute(select(ApiTokenRow).where(ApiTokenRow.token_hash == digest)).scalar_one_or_none()
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        raise AuthFailure("invalid", "invalid token (unknown to this server)")
    if row.revoked_at is not None:
        raise AuthFailure("revoked", "token revoked; create a new one (hetpool tokens create)", token_id=row.id)
    if row.expires_at is not None and row.expires_at <= now:
        raise AuthFailure("expired", f"token expired at {row.expires_at.isoformat()}; create a new one (hetpool tokens create)", token_id=row.id)
    user = session.get(UserRow, row.user_id)
    if user is None:  # tokens go with their user; a row left behind by hand still opens nothing
        raise AuthFailure("unknown_user", "the token's user no longer exists", token_id=row.id)
    if not _noted_lately(session, row.id, now) and _note_use(session, row.id, now):
        _audit_use(session, user.name, row.id, row.label, source, now)
    principal = principal_for(session, user, token_id=row.id)
    auth_cache.store(session, digest, principal, row.id, row.label, row.expires_at)
    return principal


def _audit_use(session: Session, user: str, token_id: int, label: str, source: str, now: datetime) -> None:
    audit.record(
        session,
        actor=user,
        action="token.use",
        object_kind="ApiToken",
        object_id=str(token_id),
        after={"label": label, **({"source": source} if source else {})},
        ts=now,
    )


def _insert_use(session: Session, token_id: int, now: datetime) -> bool:
    """Insert the token's first use; False if a concurrent request already did."""
    if session.bind.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    stmt = insert(TokenUseRow).values(token_id=token_id, last_used_at=now, audited_at=now).on_conflict_do_nothing(index_elements=["token_id"])
    # RETURNING, not rowcount: psycopg reports -1 for an INSERT … ON CONFLICT through SQLAlchemy.
    return session.execute(stmt.returning(TokenUseRow.token_id)).scalar() is not None


# Per database engine: token id -> when this process last noted a use of it. Within
# LAST_USED_RESOLUTION of that there is nothing to write (last_used_at is kept to the
# minute, token.use audited hourly), so the two queries of _note_use are skipped: under
# load every request of a busy token would otherwise read and conditionally update its row.
_NOTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NOTED_LOCK = threading.Lock()


def _noted_lately(session: Session, token_id: int, now: datetime) -> bool:
    bind = session.get_bind()
    engine = getattr(bind, "engine", bind)
    with _NOTED_LOCK:
        seen = _NOTED.setdefault(engine, {})
        last = seen.get(token_id)
        if last is not None and last <= now < last + LAST_USED_RESOLUTION:
            return True
        seen[token_id] = now
    return False


def _note_use(session: Session, token_id: int, now: datetime) -> bool:
    """Keep last_used_at; True when this use is due for a token.use audit event. The
    conditional UPDATE decides atomically, so parallel requests audit it once."""
    use = session.get(TokenUseRow, token_id)
    if use is None:
        return _insert_use(session, token_id, now)
    due = session.execute(
        update(TokenUseRow)
        .where(TokenUseRow.token_id == token_id, or_(TokenUseRow.audited_at.is_(None), TokenUseRow.audited_at <= now - USE_AUDIT_INTERVAL))
        .values(audited_at=now, last_used_at=now)
        .execution_options(synchronize_session=False)
    ).rowcount
    if due:
        return True
    if use.last_used_at <= now - LAST_USED_RESOLUTION:
        use.last_used_at = now
    return False


def last_used(session: Session, token_ids: list[int]) -> dict[int, datetime]:
    if not token_ids:
        return {}
    rows = session.execute(select(TokenUseRow.token_id, TokenUseRow.last_used_at).where(TokenUseRow.token_id.in_(token_ids))).all()
    return dict(rows)


# ------------------------------------------------------------------------------ OIDC
@dataclass
class _OidcState:
    lock: threading.Lock = field(default_factory=threading.Lock)
    clients: dict = field(default_factory=dict)  # JWKS URL → jwt.PyJWKClient (caches keys itself)
    files: dict = field(default_factory=dict)  # path → (mtime, PyJWKSet)
    audited: dict = field(default_factory=dict)  # user → monotonic time of its last oidc token.use event


_oidc = _OidcState()


def _signing_key(jwt, jwks: str, token: str):
    """The JWKS key the token names (kid), from a URL (fetched and cached) or a file."""
    if jwks.startswith(("https://", "http://")):
        with _oidc.lock:
            client = _oidc.clients.get(jwks)
            if client is None:
                client = _oidc.clients[jwks] = jwt.PyJWKClient(jwks, cache_keys=True, lifespan=300, timeout=5)
        return client.get_signing_key_from_jwt(token)
    from pathlib import Path

    path = Path(jwks)
    mtime = path.stat().st_mtime
    with _oidc.lock:
        cached = _oidc.files.get(jwks)
        if cached is None or cached[0] != mtime:
            cached = _oidc.files[jwks] = (mtime, jwt.PyJWKSet.from_json(path.read_text()))
    keys = cached[1].keys
    kid = jwt.get_unverified_header(token).get("kid")
    for key in keys:
        if kid is None or key.key_id == kid:
            return key
    raise jwt.InvalidTokenError(f"no key with kid {kid!r} in the JWKS")


def _resolve_oidc(session: Session, token: str, now: datetime, settings, *, source: str) -> Principal:
    if settings is None or not settings.oidc_issuer:
        raise AuthFailure("invalid", "invalid token: this looks like an OIDC token but OIDC is not configured on this server (HETPOOL_OIDC_ISSUER)")
    if not settings.oidc_audience or not settings.oidc_jwks:
        raise AuthFailure("invalid", "OIDC is misconfigured on this server: HETPOOL_OIDC_AUDIENCE and HETPOOL_OIDC_JWKS are required with an issuer")
    try:
        import jwt
    except ImportError:  # pragma: no cover - PyJWT is an optional extra until pyproject lists it
        raise AuthFailure("invalid", "OIDC needs PyJWT on the server: pip install 'pyjwt[crypto]>=2.8'") from None
    try:
        key = _signing_key(jwt, settings.oidc_jwks, token)
        # The algorithm comes from the issuer's key, never from the token's header (no alg confusion, no "none").
        claims = jwt.decode(
            token,
            key.key,
            algorithms=[key.algorithm_name],
            audience=settings.oidc_audience,
            issuer=settings.oidc_issuer,
            options={"require": ["exp", "iss", "aud"]},
            leeway=30,
        )
    except jwt.ExpiredSignatureError:
        raise AuthFailure("expired", "OIDC token expired; sign in again") from None
    except (jwt.PyJWKClientError, jwt.InvalidTokenError, OSError, ValueError) as exc:
        raise AuthFailure("invalid", f"invalid OIDC token: {exc}") from None
    name = claims.get(settings.oidc_username_claim)
    if not isinstance(name, str) or not name:
        raise AuthFailure("invalid", f"invalid OIDC token: no {settings.oidc_username_claim!r} claim naming the user")
    user = session.execute(select(UserRow).where(UserRow.name == name)).scalar_one_or_none()
    if user is None:
        raise AuthFailure("unknown_user", f"OIDC user {name!r} has no hetpool account; ask an admin: hetpool users create {name} --role …", user=name)
    # Per database and user: one process may serve (or test) several databases.
    key = (str(session.get_bind().url), name)
    with _oidc.lock:
        last = _oidc.audited.get(key)
        due = last is None or time.monotonic() - last >= USE_AUDIT_INTERVAL.total_seconds()
        if due:
            _oidc.audited[key] = time.monotonic()
    if due:
        after = {"issuer": settings.oidc_issuer, **({"source": source} if source else {})}
        audit.record(session, actor=name, action="token.use", object_kind="OidcToken", object_id=name, after=after, ts=now)
    return principal_for(session, user, via="oidc")
