"""Reclaim worker: notice, then stop or requeue idle allocations and overrunning leases.

load (running tasks, their placements' latest utilisation, reclaim state) → process (the
pure `governance.reclaim.decide`) → apply (one transaction per task, guarded by its state
and attempt, so a restart between passes neither repeats nor loses a notice or action).
"""

from __future__ import annotations

import logging

from hetpool.governance.reclaim import decide
from hetpool.server.db.claims import Rotation
from hetpool.server.services import reclaim as reclaim_service
from hetpool.server.services.context import ServiceContext

log = logging.getLogger(__name__)


def reclaim_once(ctx: ServiceContext) -> int:
    """One round: decide and apply for at most `batch_of("reclaim")` running tasks, the
    next ones (by task id) after the previous round's, so every task is visited in turn.
    The load still reads every running task's facts (one query each kind): cheap next to
    one transaction per applied decision, which is what the batch bounds."""
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        candidates = reclaim_service.gather(ctx, session, now)
        policies = reclaim_service.load_policies(session) if candidates else []
    candidates = _next_batch(ctx, candidates)
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


def _next_batch(ctx: ServiceContext, candidates: list) -> list:
    rotation = ctx.process_state("reclaim_rotation", Rotation)
    limit = ctx.settings.batch_of("reclaim")
    ordered = sorted(candidates, key=lambda c: c.facts.task_id)
    after = rotation.after
    batch = [c for c in ordered if after is None or c.facts.task_id > after][:limit]
    rotation.after = batch[-1].facts.task_id if len(batch) == limit else None
    return batch
