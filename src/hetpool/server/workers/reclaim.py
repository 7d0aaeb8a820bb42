"""Reclaim worker: notice, then stop or requeue idle allocations and overrunning leases.

load (running tasks, their placements' latest utilisation, reclaim state) → process (the
pure `governance.reclaim.decide`) → apply (one transaction per task, guarded by its state
and attempt, so a restart between passes neither repeats nor loses a notice or action).
"""

from __future__ import annotations

import logging

from hetpool.governance.reclaim import decide
from hetpool.server.services import reclaim as reclaim_service
from hetpool.server.services.context import ServiceContext

log = logging.getLogger(__name__)


def reclaim_once(ctx: ServiceContext) -> int:
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        candidates = reclaim_service.gather(ctx, session, now)
        policies = reclaim_service.load_policies(session) if candidates else []
    changes = 0
    for candidate in candidates:
        try:
            decision = decide(policies, candidate.facts, now)
        except Exception:  # e.g. a lease stored before durations were bounded: this task alone is skipped
            log.exception("reclaim: task %s cannot be evaluated; the others were", candidate.facts.task_id)
            continue
        if decision.kind == "none" and decision.idle_since == candidate.facts.idle_since:
            continue  # nothing to record: most tasks on most passes
        with ctx.db.transaction() as session:
            changes += reclaim_service.apply(ctx, session, candidate, decision)
    return changes
