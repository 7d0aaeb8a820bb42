"""Leader election for the background loops: a lease row per loop group, with fencing.

Every replica runs the loops; a pass runs only on the replica holding its group's lease.
The lease is taken and renewed by one conditional UPDATE

    UPDATE leader_lease SET holder = me, expires_at = now + lease, token = token (+1 on a change of holder)
    WHERE "group" = g AND (holder = me OR expires_at < now)

which both SQLite (writers are serialised) and PostgreSQL (the row lock makes a second
UPDATE re-check the WHERE against the committed row) let exactly one replica win.

Time: the lease uses the ServiceContext clock, not the database's. The rest of the server
(heartbeat timeouts, queue ages, reclaim notices) already trusts that clock, tests drive it
with a FixedClock instead of sleeping, and SQLite has no portable sub-second server time to
compare DateTime columns with. The price: replicas need synchronised clocks (NTP); a skew
of δ lets a standby take over δ early. That is harmless for correctness because writes that
matter are fenced: the scheduler's apply and the dispatcher's apply re-read the lease token
in the transaction they write in (`check_fence`) and refuse to commit when it changed.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from sqlalchemy import case, literal, or_, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from hetpool.server.db.models_leader import LeaderLeaseRow
from hetpool.server.db.session import Database, alembic_config
from hetpool.server.services.context import ServiceContext

log = logging.getLogger(__name__)

WORKERS = "workers"  # scheduler, dispatcher, reconciler, reclaimer, cost, approvals, node liveness
CONNECTORS = "connectors"  # the periodic Slurm / Kubernetes / Ray sync: its own lease, so a slow engine read never delays scheduling
_RELEASED = datetime(1970, 1, 1, tzinfo=UTC)
_LEASE = LeaderLeaseRow.__table__


class LeadershipLost(Exception):
    """This replica's lease was taken over: the write it was about to commit must not apply."""


@dataclass(frozen=True)
class Fence:
    group: str
    holder: str
    token: int


_local = threading.local()


def current_fence() -> Fence | None:
    return getattr(_local, "fence", None)


@contextmanager
def fenced(fence: Fence | None) -> Iterator[None]:
    """Writes by workers in this thread check `fence` (see check_fence) while inside."""
    previous = current_fence()
    _local.fence = fence
    try:
        yield
    finally:
        _local.fence = previous


def check_fence(session: Session) -> None:
    """Raise LeadershipLost unless the lease still carries the token this pass loaded with.

    Call it first in an apply transaction. On PostgreSQL the row is read FOR SHARE, so a
    takeover (an UPDATE of the row) waits until this transaction commits and the new leader
    loads after it. On SQLite the read starts the transaction's snapshot; a takeover
    committed after it makes this transaction's first write fail (SQLITE_BUSY_SNAPSHOT).
    Without a fence (tests calling run_pass, a single process without election) it passes."""
    fence = current_fence()
    if fence is None:
        return
    row = session.execute(select(_LEASE.c.holder, _LEASE.c.token).where(_LEASE.c.group == fence.group).with_for_update(read=True)).first()
    if row is None or row.holder != fence.holder or row.token != fence.token:
        held = f"{row.holder or 'nobody'} with token {row.token}" if row else "nobody"
        raise LeadershipLost(f"lease '{fence.group}' is now held by {held}, not {fence.holder} with token {fence.token}")


def holder_id() -> str:
    """hostname:pid:random — unique per process start, readable by an operator."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class LeaderElector:
    """Holds (or waits for) the lease of one loop group for one replica."""

    def __init__(self, ctx: ServiceContext, group: str, holder: str | None = None) -> None:
        lease_s, renew_s = ctx.settings.leader_lease_s, ctx.settings.leader_renew_s
        if renew_s >= lease_s:
            raise ValueError(
                f"leader_renew_s ({renew_s}) must be less than leader_lease_s ({lease_s}): a leader would lose its lease between renewals"
            )
        self.ctx = ctx
        self.group = group
        self.holder = holder or holder_id()
        self.lease = timedelta(seconds=lease_s)
        self.renew = timedelta(seconds=renew_s)
        self._fence: Fence | None = None
        self._expires: datetime | None = None
        self._last_try: datetime | None = None

    @property
    def fence(self) -> Fence | None:
        return self._fence if self.is_leader() else None

    def is_leader(self) -> bool:
        """Held and, by this replica's clock, not yet expired (checked before every step)."""
        return self._fence is not None and self._expires is not None and self.ctx.clock.now() < self._expires

    def ensure(self) -> bool:
        """Renew (leader) or try to take (standby) the lease when `leader_renew_s` has passed
        since the last try; returns whether this replica leads now."""
        now = self.ctx.clock.now()
        if self._last_try is None or now - self._last_try >= self.renew:
            self.try_acquire()
        return self.is_leader()

    def try_acquire(self) -> bool:
        now = self.ctx.clock.now()
        self._last_try = now
        expires = now + self.lease
        mine = _LEASE.c.holder == self.holder
        stmt = (
            update(_LEASE)
            .where(_LEASE.c.group == self.group, or_(mine, _LEASE.c.expires_at < now))
            .values(
                holder=self.holder,
                expires_at=expires,
                renewed_at=now,
                token=case((mine, _LEASE.c.token), else_=_LEASE.c.token + 1),
                acquired_at=case((mine, _LEASE.c.acquired_at), else_=literal(now, _LEASE.c.acquired_at.type)),
            )
        )
        try:
            with self.ctx.db.transaction() as session:
                if session.execute(stmt).rowcount == 1:
                    token = session.execute(select(_LEASE.c.token).where(_LEASE.c.group == self.group)).scalar_one()
                    return self._won(token, expires)
                exists = session.execute(select(_LEASE.c.group).where(_LEASE.c.group == self.group)).first() is not None
            if not exists:  # first start on this database: whoever inserts the row leads
                with self.ctx.db.transaction() as session:
                    session.add(LeaderLeaseRow(group=self.group, holder=self.holder, token=1, acquired_at=now, renewed_at=now, expires_at=expires))
                return self._won(1, expires)
        except IntegrityError:
            pass  # another replica inserted the row first
        except DBAPIError as exc:
            # A busy or unreachable database: keep what we had until it expires by our clock
            # (the fence guards the writes), try again next time.
            log.warning("lease '%s': could not renew or acquire: %s", self.group, exc.__class__.__name__)
            return self.is_leader()
        if self._fence is not None:
            log.warning("lease '%s': lost by %s (token %s)", self.group, self.holder, self._fence.token)
        self._fence = None
        return False

    def _won(self, token: int, expires: datetime) -> bool:
        if self._fence is None or self._fence.token != token:
            log.info("lease '%s': %s leads with token %s", self.group, self.holder, token)
        self._fence = Fence(self.group, self.holder, token)
        self._expires = expires
        return True

    def lost(self) -> None:
        """A fenced write found another leader: stop at once, until the lease is won again."""
        self._fence = None

    def release(self) -> None:
        """On clean shutdown: expire the lease now so a standby takes over at its next try."""
        fence, self._fence = self._fence, None
        if fence is None:
            return
        stmt = (
            update(_LEASE)
            .where(_LEASE.c.group == self.group, _LEASE.c.holder == self.holder, _LEASE.c.token == fence.token)
            .values(holder="", expires_at=_RELEASED)
        )
        try:
            with self.ctx.db.transaction() as session:
                session.execute(stmt)
        except DBAPIError as exc:  # the lease then simply expires
            log.warning("lease '%s': release failed: %s", self.group, exc.__class__.__name__)


def leases(ctx: ServiceContext) -> list[dict]:
    """Who leads each loop group, since when, with which token (the API's view)."""
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        rows = session.execute(select(LeaderLeaseRow).order_by(LeaderLeaseRow.group)).scalars().all()
        out = []
        for r in rows:
            expires = r.expires_at
            held = bool(r.holder) and expires > now
            out.append(
                {
                    "group": r.group,
                    "holder": r.holder if held else None,
                    "since": r.acquired_at.isoformat() if held and r.acquired_at else None,
                    "token": r.token,
                    "renewed_at": r.renewed_at.isoformat() if r.renewed_at else None,
                    "expires_at": expires.isoformat() if held else None,
                    "last_holder": r.holder or None,
                }
            )
        return out


@lru_cache(maxsize=1)
def migration_heads() -> frozenset[str]:
    from alembic.script import ScriptDirectory

    return frozenset(ScriptDirectory.from_config(alembic_config()).get_heads())


def database_readiness(db: Database) -> tuple[bool, str, list[str]]:
    """(ready, reason, current revisions): reachable and migrated to every head."""
    from alembic.runtime.migration import MigrationContext

    try:
        with db.engine.connect() as conn:
            current = set(MigrationContext.configure(conn).get_current_heads())
    except Exception as exc:  # any failure to reach or read the database means not ready
        return False, f"database unreachable: {exc.__class__.__name__}: {str(exc).splitlines()[0][:200]}", []
    missing = migration_heads() - current
    if missing:
        return (
            False,
            f"migrations not at head: missing {', '.join(sorted(missing))} (start a server of this version, which migrates)",
            sorted(current),
        )
    return True, "", sorted(current)
