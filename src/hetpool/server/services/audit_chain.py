"""Group commit of the audit chain: many audited writes, one chainer round per batch.

An audited write commits its event as a pending row (services/audit.py: record) and then,
with its connection already back in the pool, calls `chained_after_commit`: the first
caller to find no round running leads one, which links every pending row committed so
far in one transaction; callers arriving meanwhile wait for the next round, led by one of
them, and that round takes them all. So the chain's lock is taken once per batch, never
once per request, and a request still returns with its event chained (unless the round
fails or takes longer than `wait_s`: the event is committed either way and the next round,
the worker's pass or the next start links it).

Across replicas the round's transaction takes the chain's lock (PostgreSQL advisory lock,
SQLite's write lock), so one round runs at a time and each one takes what the others left.
"""

from __future__ import annotations

import logging
import threading
import time

from hetpool.governance.audit_anchor import key_id
from hetpool.server.db.session import Database
from hetpool.server.services import audit

log = logging.getLogger(__name__)


class AuditChainer:
    """The process's chainer for one database (audit.PendingSink)."""

    def __init__(self, db: Database, key: bytes, *, wait_s: float = 5.0) -> None:
        self.db = db
        self.key = key
        self.key_id = key_id(key)
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._requested = 0  # tickets handed out: one per commit that wrote a pending event
        self._done = 0  # every ticket up to this one was covered by a finished round
        self._running = False
        self.rounds = 0  # finished rounds (tests and the benchmark look)

    def chained_after_commit(self) -> None:
        """Return once a round that started after the caller's commit has finished (or after
        `wait_s`): the caller's pending event is then in the chain."""
        deadline = time.monotonic() + self.wait_s
        with self._cond:
            self._requested += 1
            ticket = self._requested
            while self._done < ticket:
                if not self._running:
                    self._lead_round()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("audit: event not chained within %.1fs (it is committed; a later round links it)", self.wait_s)
                    return
                self._cond.wait(remaining)

    def _lead_round(self) -> None:
        # Called holding the condition; every ticket handed out so far was taken after its
        # commit, so the round below, which reads after taking the chain's lock, sees it.
        self._running = True
        covers = self._requested
        self._cond.release()
        try:
            self.chain_now()
        except Exception:
            log.exception("audit: chaining pending events failed; they stay committed and are linked by a later round")
        finally:
            self._cond.acquire()
            self._running = False
            self._done = max(self._done, covers)
            self.rounds += 1
            self._cond.notify_all()

    def has_pending(self) -> bool:
        with self.db.transaction() as session:
            return audit.has_pending(session)

    def chain_now(self) -> audit.ChainRound:
        """One round, whatever is pending (also the leftovers of a crash)."""
        with self.db.transaction() as session:
            return audit.chain_pending(session, self.key)


def attach(db: Database, key: bytes) -> AuditChainer:
    """Batch this database's audited writes from now on, and link what a crash left pending."""
    found = audit.sink_for(db.engine)
    if isinstance(found, AuditChainer):
        return found
    chainer = AuditChainer(db, key)
    audit.batch_appends(db.engine, chainer)
    try:
        chainer.chain_now()
    except Exception:
        log.exception("audit: linking events left pending at start failed; the worker's pass retries")
    return chainer


def detach(db: Database) -> None:
    """Link events inline again (the benchmark's legacy mode, tests)."""
    audit.batch_appends(db.engine, None)


def chainer_for(db: Database) -> AuditChainer | None:
    found = audit.sink_for(db.engine)
    return found if isinstance(found, AuditChainer) else None
