"""Writing and checking the audit trail.

An audited write records its event in its own transaction. Where the engine batches appends
(services/audit_chain.py, every server), that is a pending row with a MAC and no chain
hash: no request takes the chain's lock. The chainer links committed pending rows into the
chain a batch per transaction (chain_pending). Elsewhere the event is linked at once.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, delete, func, insert, select, text, update
from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session

from hetpool.core.clock import as_utc
from hetpool.core.errors import SpecError
from hetpool.core.units import parse_duration
from hetpool.governance.audit import GENESIS_HASH, Anchor, ChainBreak, ChainHead, canonical_json, event_hash, verify_chain
from hetpool.governance.audit_anchor import key_id
from hetpool.server.db.models import AuditEventRow
from hetpool.server.db.models_audit import AuditHeadRow, AuditPendingRow

log = logging.getLogger(__name__)

# Held for the rest of the transaction on PostgreSQL by whoever links events (an inline
# record, or the chainer's round) so the chain is extended one batch after the other
# instead of forking. SQLite serialises writers anyway.
_AUDIT_LOCK_KEY = 0x68657470


def _ts_text(ts: datetime) -> str:
    return as_utc(ts).replace(tzinfo=None).isoformat(timespec="microseconds")  # naive-UTC text, as first hashed


_LINKED = ("ts", "actor", "action", "object_kind", "object_id", "before", "after")


def hashed_fields(row) -> dict[str, Any]:
    """What an event's hash covers, from a row (ORM object or selected columns)."""
    return fields_hashed({name: getattr(row, name) for name in _LINKED})


def fields_hashed(fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "ts": _ts_text(fields["ts"])}


class PendingSink(Protocol):
    """Where batched appends go (services/audit_chain.py: AuditChainer)."""

    key: bytes  # the audit key: pending rows carry a MAC under it
    key_id: str  # governance/audit_anchor.key_id(key), stored with each pending row

    def chained_after_commit(self) -> None: ...


# Engines whose audited writes are batched: their events wait in audit_pending for the
# chainer instead of taking the chain's lock. An engine without one appends inline (the
# offline CLI, tests that build a bare context, `audit_bench --mode legacy`).
_sinks: WeakKeyDictionary[Engine, PendingSink] = WeakKeyDictionary()


def batch_appends(engine: Engine, sink: PendingSink | None) -> None:
    if sink is None:
        _sinks.pop(engine, None)
    else:
        _sinks[engine] = sink


def sink_for(engine: Engine) -> PendingSink | None:
    return _sinks.get(engine)


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
) -> None:
    """Record an event in the caller's transaction: as a pending row linked after the commit
    when the engine batches appends, else linked here under the chain's lock."""
    fields = {"ts": ts, "actor": actor, "action": action, "object_kind": object_kind, "object_id": object_id, "before": before, "after": after}
    collected = session.info.get(_COLLECTED)
    if collected is None and getattr(_inline, "on", False):
        link_at_commit(session)
        collected = session.info[_COLLECTED]
    if collected is not None:  # linked all at once when the transaction commits (link_at_commit)
        collected.append(fields)
        return
    sink = _sinks.get(session.get_bind())
    if sink is None:
        lock_chain(session)
        link(session, [fields])
        return
    nonce = secrets.token_hex(16)
    mac = _mac(sink.key, nonce, fields_hashed(fields))
    session.execute(insert(AuditPendingRow).values(**fields, nonce=nonce, key_id=sink.key_id, mac=mac))
    # Run by Database.transaction once the commit is done and the connection is back in the
    # pool: the request then waits for (or leads) the round that chains its event.
    hooks = session.info.setdefault("after_commit", [])
    if sink.chained_after_commit not in hooks:
        hooks.append(sink.chained_after_commit)


_COLLECTED = "audit_collected"
_inline = threading.local()


@contextmanager
def linked_at_commit() -> Iterator[None]:
    """While inside, every transaction of this thread that records an event links its events
    as it commits (link_at_commit), instead of leaving pending rows for a chainer round. For
    the leader's worker pipelines: one process, a few threads, each transaction already its
    own batch — a pending row and then a round would double its commits (two fsyncs on a
    durable database per task transition)."""
    previous = getattr(_inline, "on", False)
    _inline.on = True
    try:
        yield
    finally:
        _inline.on = previous


def link_at_commit(session: Session) -> None:
    """For the rest of this transaction, events are kept and linked into the chain all at
    once as it commits (one chain lock, one insert, held only from there to the commit):
    a single appender per transaction, for writers that batch many events (the submit
    batcher, services/submit_batch.py). Linked in the same transaction as the writes they
    describe: both commit or neither."""
    if _COLLECTED in session.info:
        return
    session.info[_COLLECTED] = []
    sa_event.listen(session, "before_commit", _link_collected, once=True)


def _link_collected(session: Session) -> None:
    events = session.info.pop(_COLLECTED, None)
    if events:
        lock_chain(session)
        link(session, events)


def lock_chain(session: Session) -> None:
    """Held for the rest of the transaction: one writer of the chain at a time."""
    if session.bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _AUDIT_LOCK_KEY})
    else:
        # SQLite: a write first, so this transaction holds the database's write lock before
        # it reads the head (a read first could be overtaken by another writer).
        session.execute(delete(AuditHeadRow).where(AuditHeadRow.id == -1))


def link(session: Session, events: list[dict[str, Any]]) -> ChainHead:
    """Append `events` (the hashed fields, ts as a datetime) to the chain, under lock_chain."""
    # New events link to the head, not to whatever row is last: after a truncation the
    # next event's link breaks too, so writing on does not hide the deletion. Ids are
    # given here, one past both the head and the highest id, so they are never reused
    # (SQLite would reuse a deleted last id) and have no gaps (a PostgreSQL sequence
    # skips on rollback): a gap in the trail is then always a deletion.
    # One round trip for both: this runs under the chain's lock.
    top_id = select(func.max(AuditEventRow.id)).scalar_subquery()
    found = session.execute(select(AuditHeadRow.last_id, AuditHeadRow.hash, top_id).where(AuditHeadRow.id == 1)).first()
    head = ChainHead(found[0], found[1]) if found else None
    top = (found[2] if found else session.execute(select(func.max(AuditEventRow.id))).scalar()) or 0
    last = head.hash if head else session.execute(select(AuditEventRow.hash).where(AuditEventRow.id == top)).scalar()
    next_id, prev = max(top, head.last_id if head else 0) + 1, last or GENESIS_HASH
    rows = []
    for fields in events:
        digest = event_hash(prev, fields_hashed(fields))
        rows.append({**fields, "id": next_id, "prev_hash": prev, "hash": digest})
        next_id, prev = next_id + 1, digest
    session.execute(insert(AuditEventRow), rows)  # one statement for a round's batch
    end = ChainHead(next_id - 1, prev)
    if head is None:
        session.execute(insert(AuditHeadRow).values(id=1, last_id=end.last_id, hash=end.hash))
    else:
        move_head = update(AuditHeadRow).where(AuditHeadRow.id == 1).values(last_id=end.last_id, hash=end.hash)
        session.execute(move_head.execution_options(synchronize_session=False))
    return end


def pending_mac(key: bytes, row) -> str:
    """What a pending row must carry: only a holder of the audit key can make or re-make it."""
    return _mac(key, row.nonce, hashed_fields(row))


def _mac(key: bytes, nonce: str, hashed: dict[str, Any]) -> str:
    return hmac.new(key, (nonce + "\n" + canonical_json(hashed)).encode(), hashlib.sha256).hexdigest()


_PENDING_PAGE = 1000


@dataclass(frozen=True)
class ChainRound:
    chained: int  # pending events linked into the chain
    refused: tuple[int, ...]  # pending rows whose MAC does not hold: left where they are


def chain_pending(session: Session, key: bytes) -> ChainRound:
    """Link every committed pending event made under `key` into the chain, oldest pending id
    first, in this one transaction (the chainer's round). Rows of another key are left to the
    replica holding it; rows with a bad MAC stay behind, and verify names them."""
    lock_chain(session)
    chained, refused, after = 0, [], 0
    mine = AuditPendingRow.key_id == key_id(key)
    while True:
        stmt = select(*_PENDING_COLUMNS).where(mine, AuditPendingRow.id > after).order_by(AuditPendingRow.id).limit(_PENDING_PAGE)
        page = session.execute(stmt).all()
        good = [p for p in page if hmac.compare_digest(p.mac, pending_mac(key, p))]
        linked = {p.id for p in good}
        refused += [p.id for p in page if p.id not in linked]
        if good:
            link(session, [{name: getattr(p, name) for name in _LINKED} for p in good])
            session.execute(delete(AuditPendingRow).where(AuditPendingRow.id.in_(linked)))
            chained += len(good)
        if len(page) < _PENDING_PAGE:
            break
        after = page[-1].id
    if refused:
        log.error("audit: pending events %s do not match their MAC (modified or forged); left unchained", refused)
    return ChainRound(chained, tuple(refused))


_PENDING_COLUMNS = tuple(getattr(AuditPendingRow, name) for name in ("id", *_LINKED, "nonce", "key_id", "mac"))


def unchained(session: Session, key: bytes | None, now: datetime | None, stale_after: timedelta) -> tuple[int, str | None]:
    """How many events wait for the chainer, and the first problem with them: a row whose
    MAC does not hold (modified or forged; checked for rows made under `key`: another
    replica's key is not known here), or one waiting longer than `stale_after`."""
    waiting = session.execute(select(func.count(AuditPendingRow.id))).scalar_one()
    if not waiting:
        return 0, None
    for p in _paged_pending(session):
        if key is not None and p.key_id == key_id(key) and not hmac.compare_digest(p.mac, pending_mac(key, p)):
            return waiting, f"unchained event (pending row {p.id}) does not match its MAC (modified or forged before it was chained)"
        if now is not None and now - as_utc(p.ts) > stale_after:
            return waiting, f"unchained event (pending row {p.id}) has waited since {_ts_text(p.ts)}Z: the chainer is not running"
    return waiting, None


def has_pending(session: Session) -> bool:
    return session.execute(select(AuditPendingRow.id).limit(1)).first() is not None


def _paged_pending(session: Session) -> Iterator[AuditPendingRow]:
    after = 0
    while True:
        stmt = select(AuditPendingRow).where(AuditPendingRow.id > after).order_by(AuditPendingRow.id).limit(_PENDING_PAGE)
        page = session.execute(stmt).scalars().all()
        yield from page
        if len(page) < _PENDING_PAGE:
            return
        after = page[-1].id


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
