"""Writing and checking the audit trail (within the caller's transaction)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from hetpool.core.clock import as_utc
from hetpool.core.errors import SpecError
from hetpool.core.units import parse_duration
from hetpool.governance.audit import GENESIS_HASH, Anchor, ChainBreak, ChainHead, canonical_json, event_hash, verify_chain
from hetpool.server.db.models import AuditEventRow
from hetpool.server.db.models_audit import AuditHeadRow

# Held for the rest of the transaction on PostgreSQL so concurrent writers extend the
# chain one after the other instead of forking it. SQLite serialises writers anyway.
_AUDIT_LOCK_KEY = 0x68657470


def _ts_text(ts: datetime) -> str:
    return as_utc(ts).replace(tzinfo=None).isoformat(timespec="microseconds")  # naive-UTC text, as first hashed


def hashed_fields(row: AuditEventRow) -> dict[str, Any]:
    return {
        "ts": _ts_text(row.ts),
        "actor": row.actor,
        "action": row.action,
        "object_kind": row.object_kind,
        "object_id": row.object_id,
        "before": row.before,
        "after": row.after,
    }


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    object_kind: str,
    object_id: str,
    before: dict | None = None,
    after: dict | None = None,
    ts: datetime,
) -> AuditEventRow:
    if session.bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _AUDIT_LOCK_KEY})
    # New events link to the head, not to whatever row is last: after a truncation the
    # next event's link breaks too, so writing on does not hide the deletion. Ids are
    # given here, one past both the head and the highest id, so they are never reused
    # (SQLite would reuse a deleted last id) and have no gaps (a PostgreSQL sequence
    # skips on rollback): a gap in the trail is then always a deletion.
    # One round trip for both: this runs under the chain's lock on every audited write.
    top_id = select(func.max(AuditEventRow.id)).scalar_subquery()
    found = session.execute(select(AuditHeadRow.last_id, AuditHeadRow.hash, top_id).where(AuditHeadRow.id == 1)).first()
    head = ChainHead(found[0], found[1]) if found else None
    top = (found[2] if found else session.execute(select(func.max(AuditEventRow.id))).scalar()) or 0
    last = head.hash if head else session.execute(select(AuditEventRow.hash).where(AuditEventRow.id == top)).scalar()
    row = AuditEventRow(
        id=max(top, head.last_id if head else 0) + 1,
        ts=ts,
        actor=actor,
        action=action,
        object_kind=object_kind,
        object_id=object_id,
        before=before,
        after=after,
        prev_hash=last or GENESIS_HASH,
        hash="",
    )
    row.hash = event_hash(row.prev_hash, hashed_fields(row))
    session.add(row)
    session.flush()
    if head is None:
        session.add(AuditHeadRow(id=1, last_id=row.id, hash=row.hash))
        session.flush()
    else:
        move_head = update(AuditHeadRow).where(AuditHeadRow.id == 1).values(last_id=row.id, hash=row.hash)
        session.execute(move_head.execution_options(synchronize_session=False))
    return row


def head(session: Session) -> ChainHead | None:
    found = session.execute(select(AuditHeadRow.last_id, AuditHeadRow.hash).where(AuditHeadRow.id == 1)).first()
    return ChainHead(found[0], found[1]) if found else None


_EVENT_COLUMNS = (
    AuditEventRow.id,
    AuditEventRow.ts,
    AuditEventRow.actor,
    AuditEventRow.action,
    AuditEventRow.object_kind,
    AuditEventRow.object_id,
    AuditEventRow.before,
    AuditEventRow.after,
    AuditEventRow.prev_hash,
    AuditEventRow.hash,
)
_PAGE = 2000


def _paged(session: Session, stmt, page: int = _PAGE) -> Iterator:
    """Rows of `stmt` (ordered by id) a page at a time, so a long trail is never held whole."""
    after = None
    while True:
        query = stmt if after is None else stmt.where(AuditEventRow.id > after)
        rows = session.execute(query.limit(page)).all()
        yield from rows
        if len(rows) < page:
            return
        after = rows[-1].id


def verify(session: Session, anchor: Anchor | None = None) -> ChainBreak | None:
    """The first break of the whole trail; with an `anchor`, also against its checkpoints."""
    # On PostgreSQL each statement sees what was committed by then: an event past the head
    # read first is checked against the head as it is now before it is called inserted.
    found = head(session)
    events = _paged(session, select(*_EVENT_COLUMNS).order_by(AuditEventRow.id))
    if found is None:
        last = session.execute(select(func.max(AuditEventRow.id))).scalar()
        found = head(session)  # the first event may have been written meanwhile
        if last is not None and found is None:
            return ChainBreak(last, "the chain head record is missing (deleted?): the end of the trail cannot be checked")
    rows = ((r.id, r.prev_hash, r.hash, hashed_fields(r)) for r in events)
    return verify_chain(rows, found, lambda: head(session), anchor)


def verify_since(session: Session, event_id: int, event_hash_: str, until: ChainHead) -> ChainBreak | None:
    """Whether the trail from `event_id` (known to have had `event_hash_`) to `until` still
    links up: what a new checkpoint needs, without walking the whole trail again."""
    if until.last_id < event_id:
        return ChainBreak(until.last_id + 1, f"missing: the chain head is at event {until.last_id}, before checkpointed event {event_id} (deleted)")
    stmt = select(*_EVENT_COLUMNS).where(AuditEventRow.id >= event_id, AuditEventRow.id <= until.last_id).order_by(AuditEventRow.id)
    expected_id, expected_prev = event_id, None
    for r in _paged(session, stmt):
        if r.id != expected_id:
            return ChainBreak(expected_id, f"missing: event {expected_id} is no longer in the trail (deleted)")
        if r.id == event_id and r.hash != event_hash_:
            return ChainBreak(r.id, "hash differs from the last checkpoint (the trail was rewritten and re-hashed)")
        if expected_prev is not None and r.prev_hash != expected_prev:
            return ChainBreak(r.id, "previous-hash link broken (an event before it was changed, inserted or deleted)")
        if event_hash(r.prev_hash, hashed_fields(r)) != r.hash:
            return ChainBreak(r.id, "content does not match its hash (the event was modified)")
        expected_id, expected_prev = r.id + 1, r.hash
    if expected_id <= until.last_id:
        end = f"the trail ends at event {expected_id - 1}"
        return ChainBreak(expected_id, f"missing: event {until.last_id} was the last one recorded, but {end} (deleted)")
    if expected_prev != until.hash:
        return ChainBreak(until.last_id, "hash differs from the one recorded when it was written (the event was modified)")
    return None


def count(session: Session) -> int:
    return session.execute(select(func.count(AuditEventRow.id))).scalar_one()


def event_dict(row: AuditEventRow) -> dict:
    return {
        "id": row.id,
        "ts": _ts_text(row.ts) + "Z",
        "actor": row.actor,
        "action": row.action,
        "object_kind": row.object_kind,
        "object_id": row.object_id,
        "before": row.before,
        "after": row.after,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }


# ------------------------------------------------------------------- reading and export
@dataclass(frozen=True)
class EventFilter:
    actor: str | None = None
    object_kind: str | None = None
    object_id: str | None = None
    action: str | None = None  # exact, or a prefix ending in '*' ("task.reclaim*")
    since: datetime | None = None
    until: datetime | None = None

    def apply(self, stmt):
        if self.actor:
            stmt = stmt.where(AuditEventRow.actor == self.actor)
        if self.object_kind:
            stmt = stmt.where(AuditEventRow.object_kind == self.object_kind)
        if self.object_id:
            stmt = stmt.where(AuditEventRow.object_id == self.object_id)
        if self.action and self.action.endswith("*"):
            stmt = stmt.where(AuditEventRow.action.startswith(self.action[:-1], autoescape=True))
        elif self.action:
            stmt = stmt.where(AuditEventRow.action == self.action)
        if self.since is not None:
            stmt = stmt.where(AuditEventRow.ts >= self.since)
        if self.until is not None:
            stmt = stmt.where(AuditEventRow.ts < self.until)
        return stmt


def parse_time(value: str | None, now: datetime, field: str) -> datetime | None:
    """An ISO time (without zone: UTC) or a duration back from now ("2h": two hours ago)."""
    if not value:
        return None
    text_value = value.strip()
    try:
        ts = datetime.fromisoformat(text_value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        try:
            return now - timedelta(seconds=parse_duration(text_value))
        except (ValueError, OverflowError):  # OverflowError: a duration reaching back before year 1
            raise SpecError(f"{field}: expected an ISO time such as 2026-11-30T12:00:00Z or a duration back from now such as 2h") from None
    try:
        return as_utc(ts)  # the query compares in UTC: 0001-01-01T00:00+14:00 is before year 1 there
    except OverflowError:
        raise SpecError(f"{field}: {text_value!r} is outside the years 1 to 9999 in UTC") from None


def list_events(session: Session, flt: EventFilter, *, after_id: int = 0, limit: int = 500) -> list[dict]:
    stmt = flt.apply(select(AuditEventRow).where(AuditEventRow.id > after_id)).order_by(AuditEventRow.id).limit(limit)
    return [event_dict(e) for e in session.execute(stmt).scalars()]


EXPORT_COLUMNS = ("id", "ts", "actor", "action", "object_kind", "object_id", "before", "after", "prev_hash", "hash")


def export_lines(db, flt: EventFilter, fmt: str) -> Iterator[str]:
    """The matching events as JSON lines or CSV (a header, then one row per event; before
    and after as JSON text), read a page per transaction so a long export holds no lock."""
    if fmt == "csv":
        yield _csv_line(EXPORT_COLUMNS)
    after = 0
    while True:
        with db.transaction() as session:
            rows = session.execute(flt.apply(select(*_EVENT_COLUMNS).where(AuditEventRow.id > after)).order_by(AuditEventRow.id).limit(_PAGE)).all()
            events = [event_dict(r) for r in rows]
        for event in events:
            if fmt == "csv":
                yield _csv_line([canonical_json(event[c]) if c in ("before", "after") and event[c] is not None else event[c] for c in EXPORT_COLUMNS])
            else:
                yield canonical_json(event) + "\n"
        if len(rows) < _PAGE:
            return
        after = rows[-1].id


def _csv_line(values) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return out.getvalue()
