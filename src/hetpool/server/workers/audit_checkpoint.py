"""Worker step: link audit events left pending, and checkpoint the chain head every
`audit_checkpoint_interval_s`.

Pending events are normally linked by the request that wrote them (services/audit_chain.py);
what a crash or a failed round left behind is linked here, on every pass (one indexed read
when there is nothing), and before every checkpoint so that it covers them.

Runs in the workers' pass, so only the leader writes (server/leader.py); also once at a
clean shutdown of the leader (server/app.py), so the last events before a stop are not
left unanchored. Most passes only compare the clock with the next due time: the file and
the database are touched once per interval.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from hetpool.server.services import audit_chain
from hetpool.server.services.audit_anchor import ChainBrokenError, CheckpointResult
from hetpool.server.services.context import ServiceContext

log = logging.getLogger(__name__)


def checkpoint_audit(ctx: ServiceContext) -> CheckpointResult | None:
    """A checkpoint when one is due (None when not, or when the trail is broken: logged)."""
    chain_leftovers(ctx)
    anchor = ctx.audit_anchor
    now = ctx.clock.now()
    if anchor.next_due is not None and now < anchor.next_due:
        return None
    # Due again one interval from now whatever happens: a broken trail is reported once per
    # interval, not on every pass.
    anchor.next_due = now + timedelta(seconds=anchor.interval_s)
    return _checkpoint(ctx, now)


def final_checkpoint(ctx: ServiceContext) -> CheckpointResult | None:
    """At a clean stop: anchor whatever was written since the last checkpoint."""
    return _checkpoint(ctx, ctx.clock.now())


def chain_leftovers(ctx: ServiceContext) -> int:
    """Link what waits in audit_pending (nothing to do where appends are not batched)."""
    chainer = audit_chain.chainer_for(ctx.db)
    if chainer is None or not chainer.has_pending():
        return 0
    try:
        return chainer.chain_now().chained
    except Exception:
        log.exception("audit: linking pending events failed; the next pass retries")
        return 0


def _checkpoint(ctx: ServiceContext, now: datetime) -> CheckpointResult | None:
    chain_leftovers(ctx)
    try:
        return ctx.audit_anchor.checkpoint(ctx.db, now)
    except ChainBrokenError:
        return None  # logged as an error by the anchor; verify names the break
