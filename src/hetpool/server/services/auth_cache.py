"""A short-lived, per-process cache of who a token is.

Resolving a bearer token is three queries (token, user, role bindings) on every request,
about a fifth of a task submission's server time. Like kube-apiserver's token cache, each
replica keeps a successful resolution for a few seconds (AUTH_CACHE_S).

What this means for revocation and role changes:
- on the replica that makes the change, it applies at once: any session write to tokens,
  users or role bindings (ORM flush or bulk UPDATE/DELETE) empties that database's cache;
- on other replicas, within AUTH_CACHE_S;
- a token's expiry is checked on every hit, so an expired token is never accepted.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import event
from sqlalchemy.orm import Session

from hetpool.server.db.models import ApiTokenRow, UserRow
from hetpool.server.db.models_access import RoleBindingRow

AUTH_CACHE_S = 2.0
_WATCHED = (ApiTokenRow, UserRow, RoleBindingRow)
_WATCHED_TABLES = {m.__tablename__ for m in _WATCHED}


@dataclass(frozen=True)
class CachedToken:
    principal: object  # auth.Principal (not imported: auth imports this module)
    token_id: int
    label: str
    expires_at: datetime | None
    cached_at: float  # time.monotonic()


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # engine -> digest -> CachedToken
_LOCK = threading.Lock()


def _engine(session: Session):
    bind = session.get_bind()
    return getattr(bind, "engine", bind)


def lookup(session: Session, digest: str, now: datetime) -> CachedToken | None:
    with _LOCK:
        hit = _CACHE.get(_engine(session), {}).get(digest)
    if hit is None or time.monotonic() - hit.cached_at > AUTH_CACHE_S:
        return None
    if hit.expires_at is not None and hit.expires_at <= now:
        return None
    return hit


def store(session: Session, digest: str, principal, token_id: int, label: str, expires_at: datetime | None) -> None:
    entry = CachedToken(principal, token_id, label, expires_at, time.monotonic())
    with _LOCK:
        _CACHE.setdefault(_engine(session), {})[digest] = entry


def invalidate(session: Session) -> None:
    with _LOCK:
        _CACHE.pop(_engine(session), None)


@event.listens_for(Session, "after_flush")
def _after_flush(session: Session, _flush_context) -> None:
    changed = (*session.new, *session.dirty, *session.deleted)
    if any(isinstance(obj, _WATCHED) for obj in changed):
        invalidate(session)


@event.listens_for(Session, "do_orm_execute")
def _on_bulk_write(state) -> None:
    if not (state.is_update or state.is_delete):
        return
    table = getattr(state.statement, "table", None)
    if getattr(table, "name", None) in _WATCHED_TABLES:
        invalidate(state.session)
