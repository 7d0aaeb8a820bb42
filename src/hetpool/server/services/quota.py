"""Quota accounting on the server side: usage from the database, the rules in
hetpool.governance.quota.

  quota_book(inv, running)                 -> a QuotaBook charged with the work holding capacity
  over_quota(ctx, session, inv, spec)      -> why `spec` would exceed its quota even with
                                              borrowing, or None (used by approvals)
  usage(ctx, session, inv)                 -> nominal / used / borrowed / lent / headroom rows
  never_within(ctx, inv, idle, spec)       -> the quota `spec` exceeds even with borrowing
                                              wherever it lands (refused at submit)
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from hetpool.core.tasks import TaskSpec
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling.assign import assign
from hetpool.scheduling.cycle import held_by
from hetpool.scheduling.quota_fit import never_within_quota
from hetpool.scheduling.quota_view import QuotaCeiling
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Snapshot
from hetpool.server.services.active_work import active_work
from hetpool.server.services.cluster_state import live_snapshot
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory
from hetpool.server.services.sched_state import learned_runtimes, running_tasks
from hetpool.server.services.task_planning import placement_options


def quota_book(inv: Inventory, running: list[RunningTask]) -> QuotaBook:
    """A book charged with the running work in start order: whoever went past a nominal
    amount first is the one borrowing (and the first reclaimed)."""
    book = QuotaBook(inv.quotas.values(), {m.name: m for m in inv.catalog.all()}, {p.name: p.model for p in inv.pools.values()})
    if book:
        book.charge_running(running)
    return book


def _book_now(ctx: ServiceContext, session: Session, inv: Inventory) -> QuotaBook:
    now = ctx.clock.now()
    return quota_book(inv, running_tasks(session, inv, learned_runtimes(session, inv), now, active_work(ctx).read(session)))


def over_quota(ctx: ServiceContext, session: Session, inv: Inventory, spec: TaskSpec) -> str | None:
    """Why `spec` could not be admitted within its quota (borrowing included) right now, or
    None. Its charge is that of the placement the scheduler would pick on an idle estate."""
    if not inv.quotas:
        return None
    book = _book_now(ctx, session, inv)
    if not book.applicable(spec.tenant, spec.env.value, spec.task_type.value):
        return None
    snap = live_snapshot(ctx, session)
    result = assign(snap, spec, ctx.compat.check)
    if not result.feasible:
        result = assign(snap.emptied(), spec, ctx.compat.check)
    if not result.feasible:
        return None  # cannot run at all: submission says so on its own
    verdict = book.check(spec, held_by(result))
    return None if verdict.ok else verdict.reason


def never_within(ctx: ServiceContext, inv: Inventory, idle: Snapshot, spec: TaskSpec) -> QuotaCeiling | None:
    """The quota `spec` can never be admitted under, even with all the borrowing its cohort
    allows, on any placement it could have on the `idle` estate; None if some placement
    fits. What runs now does not matter (the ceiling is nominal + the most it may borrow),
    so the book is an empty one."""
    if not inv.quotas:
        return None
    book = quota_book(inv, [])
    if not book.applicable(spec.tenant, spec.env.value, spec.task_type.value):
        return None
    return never_within_quota(book, idle, spec, ctx.compat.check, **placement_options(inv, spec))


def usage(ctx: ServiceContext, session: Session, inv: Inventory, tenants: list[str] | None = None) -> list[dict]:
    """Usage per quota and resource; `tenants` limits it to quotas in or above those subtrees."""
    rows = _book_now(ctx, session, inv).usage()
    if tenants is None:
        return rows
    return [r for r in rows if any(t == r["tenant"] or t.startswith(r["tenant"] + "/") or r["tenant"].startswith(t + "/") for t in tenants)]
