"""Bounded batch claims for the worker pipelines (dstack's fetcher shape).

Each pipeline (server/workers/loop.py) takes at most `limit` rows per round with
`claim_batch`, oldest first, and works on them outside any transaction (engine calls
happen there). Two things must never happen: two threads of this process working on the
same row (the dispatch pipeline runs several submits at once, one lane per backend), and a
round waiting on a row that someone else is writing.

- Within a process, a `ClaimSet` holds the ids being worked on; `claim_batch` leaves them
  out of the next batch, and the caller releases each id when its work is recorded (or
  given up). This is the claim that lasts through the engine call: a row lock cannot,
  since no transaction stays open across a network call (server/db/session.py checks it).
- Between replicas, only the holder of the "workers" lease runs pipelines, and every write
  re-checks the lease's fencing token (server/leader.py), so a replica that lost the lease
  while working records nothing; the engines' submit is idempotent per (task, attempt).
- On PostgreSQL the batch is read `FOR UPDATE SKIP LOCKED`: rows an API request or another
  replica (during a takeover) has locked are skipped for this round, not waited on, and the
  rest of the batch is locked until the claim's transaction ends — so nobody changes a row
  between being claimed and the claim set recording it.
- On SQLite there is one writer at a time and no row locks: a plain `ORDER BY … LIMIT`
  read; the ClaimSet and the lease do the rest. (A claim column would add a write per row
  per round for nothing a single-writer database can race on.)

A pipeline whose rows keep matching round after round (the reconciler follows a running
job until it ends) passes a `Rotation`: a keyset cursor, so that with more rows than
`limit` each round takes the next ones and every row is visited in turn.

Usage (the dispatcher's batch):

    with ctx.db.transaction() as session:
        rows = claim_batch(session, select(TaskRow).where(TaskRow.state == "admitted"),
                           key=TaskRow.id, order_by=(TaskRow.admitted_at, TaskRow.id),
                           limit=ctx.settings.dispatch_batch, claims=claims)
        work = [...]                 # plain values: nothing lazy-loaded outside the session
    for item in work:
        try: ...                     # engine call, then one fenced transaction per row
        finally: claims.release([item.task_id])
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session


class ClaimSet:
    """The row ids one pipeline of this process is working on (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set = set()

    def held(self) -> frozenset:
        with self._lock:
            return frozenset(self._held)

    def take(self, ids: Iterable) -> list:
        """Claim the ids not already held; returns those newly claimed, in order."""
        taken = []
        with self._lock:
            for row_id in ids:
                if row_id not in self._held:
                    self._held.add(row_id)
                    taken.append(row_id)
        return taken

    def release(self, ids: Iterable) -> None:
        with self._lock:
            self._held.difference_update(ids)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


@dataclass
class Rotation:
    """Where the previous round stopped (None: start from the lowest key)."""

    after: object | None = None


def claim_batch(
    session: Session,
    query: Select,
    *,
    key: InstrumentedAttribute,
    limit: int,
    order_by: Sequence = (),
    claims: ClaimSet | None = None,
    rotation: Rotation | None = None,
) -> list:
    """At most `limit` rows of `query` (a `select(Model).where(...)`), ordered by `order_by`
    (default: `key`), leaving out ids held in `claims` and claiming the rest; on PostgreSQL
    read FOR UPDATE SKIP LOCKED. With `rotation` the order is `key` and each call continues
    after the last key of the previous full batch, wrapping to the start after a short one."""
    if limit < 1:
        raise ValueError(f"a batch takes at least one row, not {limit}")
    if claims is not None:
        held = claims.held()
        if held:
            query = query.where(key.notin_(held))
    if rotation is not None:
        if rotation.after is not None:
            query = query.where(key > rotation.after)
        order_by = (key,)
    query = query.order_by(*(order_by or (key,))).limit(limit)
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=key.class_)
    rows = list(session.execute(query).scalars().all())
    if rotation is not None:
        rotation.after = getattr(rows[-1], key.key) if len(rows) == limit else None
    if claims is not None:
        taken = set(claims.take(getattr(r, key.key) for r in rows))
        rows = [r for r in rows if getattr(r, key.key) in taken]  # another thread's since we read: theirs
    return rows
