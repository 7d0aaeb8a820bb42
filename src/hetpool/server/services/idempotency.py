"""Idempotent task submits: a retried `POST /api/v1/tasks` with the same Idempotency-Key
returns the task the first request created instead of creating another.

Keys are per user and live 24 hours. The (user, key) primary key settles races: of two
concurrent first requests, the loser's insert fails and it answers with the winner's task.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from typing import Any

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hetpool.core.errors import ConflictError, SpecError
from hetpool.server.db.models_idempotency import IdempotencyKeyRow
from hetpool.server.schemas.tasks import TaskResponse
from hetpool.server.services import tasks as task_service
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.task_lifecycle import get_row
from hetpool.server.services.task_views import task_response

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_TTL = timedelta(hours=24)
MAX_KEY_LENGTH = 200
_KEY = re.compile(rf"[\x20-\x7e]{{1,{MAX_KEY_LENGTH}}}")


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key) or not key.strip():
        shown = key if len(key) <= 40 else key[:40] + "…"
        raise SpecError(
            f"{HEADER}: must be 1–{MAX_KEY_LENGTH} printable ASCII characters (0x20–0x7E), not only spaces; got {shown!r} ({len(key)} characters)",
            details=[{"loc": f"header.{HEADER}", "msg": f"1–{MAX_KEY_LENGTH} printable ASCII characters"}],
        )
    return key


def body_hash(doc: Any) -> str:
    """The same JSON document, however its keys were ordered, hashes the same."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _stored(ctx: ServiceContext, session: Session, user_id: int, key: str, digest: str) -> IdempotencyKeyRow | None:
    """The live record of this key, or None; a different body under the key is a conflict."""
    row = session.get(IdempotencyKeyRow, (user_id, key))
    if row is None:
        return None
    if row.created_at <= ctx.clock.now() - KEY_TTL:
        session.delete(row)  # expired: the key is free again
        session.flush()
        return None
    if row.body_hash != digest:
        raise key_conflict(key, row.task_id)
    return row


def key_conflict(key: str, task_id: str) -> ConflictError:
    return ConflictError(
        f"{HEADER} {key!r} was already used for a different request body (task {task_id}); "
        "use a new key for a new task, or resend the original body to get that task back",
        details=[{"loc": f"header.{HEADER}", "msg": "key reused with a different body"}],
    )


def purge_expired(ctx: ServiceContext, session: Session, user_id: int | None = None) -> int:
    """Drop keys older than KEY_TTL (one user's, or everyone's); returns how many."""
    stmt = delete(IdempotencyKeyRow).where(IdempotencyKeyRow.created_at < ctx.clock.now() - KEY_TTL)
    if user_id is not None:
        stmt = stmt.where(IdempotencyKeyRow.user_id == user_id)
    return session.execute(stmt).rowcount or 0


def submit(ctx: ServiceContext, doc: dict, *, user_id: int, actor: str, key: str | None) -> tuple[TaskResponse, bool]:
    """Submit `doc` (kind already stripped); returns (task body, replayed)."""
    if key is None:
        with ctx.db.transaction() as session:
            return task_response(session, task_service.submit(ctx, session, doc, actor), ctx=ctx), False
    check_key(key)
    digest = body_hash(doc)
    try:
        with ctx.db.transaction() as session:
            stored = _stored(ctx, session, user_id, key, digest)
            if stored is not None:
                return task_response(session, get_row(session, stored.task_id), ctx=ctx), True
            # Lazily, per user: a user's stale keys go when they next use a new one.
            purge_expired(ctx, session, user_id)
            row = task_service.submit(ctx, session, doc, actor)
            session.add(IdempotencyKeyRow(user_id=user_id, key=key, task_id=row.id, body_hash=digest, created_at=ctx.clock.now()))
            session.flush()  # the unique (user, key) check happens here, before the task commits
            return task_response(session, row, ctx=ctx), False
    except IntegrityError:
        # A concurrent request with the same key won; its task (and body check) is the answer.
        with ctx.db.transaction() as session:
            stored = _stored(ctx, session, user_id, key, digest)
            if stored is None:
                raise
            return task_response(session, get_row(session, stored.task_id), ctx=ctx), True
