"""Worker step: checkpoint the audit chain head every `audit_checkpoint_interval_s`.

Runs in the workers' pass, so only the leader writes (server/leader.py); also once at a
clean shutdown of the leader (server/app.py), so the last events before a stop are not
left unanchored. Most passes only compare the clock with the next due time: the file and
the database are touched once per interval.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from hetpool.server.services.audit_anchor import ChainBrokenError, CheckpointResult
from hetpool.server.services.context import ServiceContext

log = logging.getLogger(__name__)


def checkpoint_audit(ctx: ServiceContext) -> CheckpointResult | None:
    """A checkpoint when one is due (None when not, or when the trail is broken: logged)."""
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


def _checkpoint(ctx: ServiceContext, now: datetime) -> CheckpointResult | None:
    try:
        return ctx.audit_anchor.checkpoint(ctx.db, now)
    except ChainBrokenError:
        return None  # logged as an error by the anchor; verify names the break
