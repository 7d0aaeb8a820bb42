"""Migration worker: at each round of a queue's `migration` rule, move checkpointed running
tasks to faster idle devices (scheduling/migration.py decides which).

It runs in the schedule pipeline right after the scheduler's pass, so the devices it sees
idle are those the cycle left idle, and the nodes the cycle reserved for waiting heads
(kept here from that pass) are left alone. A move is a graceful stop like a preemption's
(`preempt_reason` set; the reconciler signals, waits the grace, requeues as a resume:
services/checkpoints.py); the next cycle places the task — its candidates ranked by speed,
the faster devices it was moved for are free. A move does not count against the task's
`max_preemptions`.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from hetpool.core.specs import parse_spec
from hetpool.core.states import TaskState
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.migration import Move, plan_moves
from hetpool.scheduling.queueing import route
from hetpool.server.db.models import TaskRow
from hetpool.server.services import audit, task_lifecycle
from hetpool.server.services.checkpoints import capped_grace, rounds
from hetpool.server.services.cluster_state import read_inventory
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.cycle_inputs import load_cycle
from hetpool.server.services.queue_cache import queue_cache
from hetpool.server.services.wakeups import wake

log = logging.getLogger(__name__)
ACTOR = "scheduler"


def migrate_once(ctx: ServiceContext) -> int:
    """Request the moves of this round; the number requested (0 between rounds)."""
    now = ctx.clock.now()
    state = rounds(ctx)
    with ctx.db.transaction() as session:
        # The rules first (the inventory is cached): between rounds, nothing else is read.
        rules = {q.name: q.migration for q in read_inventory(ctx, session).queues.values() if q.migration is not None}
        if not rules:
            return 0
        round_s = min(rule.round_s for rule in rules.values())
        if state.last_round is not None and (now - state.last_round).total_seconds() < round_s:
            return 0
        state.last_round = now
        load = load_cycle(ctx, session, queue_cache(ctx).refresh(session), now)
        if not load.running:
            return 0
        specs = _running_specs(session, [t.id for t in load.running], ctx.settings.max_checkpoint_grace_s)
        awaited = frozenset(q.preferred_wait.model for q in load.queue if q.preferred_wait is not None)
        queues = list(load.inv.queues.values())
        by_queue: dict[str, list] = {}
        for task in load.running:
            spec = specs.get(task.id)
            if spec is not None and (queue := route(spec, queues)).name in rules:
                by_queue.setdefault(queue.name, []).append((task, spec))
        moves: list[Move] = []
        for name, running in sorted(by_queue.items()):
            moves += plan_moves(load.snap, running, rules[name], now, reserved_nodes=state.reserved_nodes, awaited_models=awaited)
        requested = sum(_request_move(ctx, session, move) for move in moves)
    if requested:
        wake(ctx, "reconcile")  # the stops are carried out there
    return requested


def _running_specs(session, task_ids: list[str], max_grace_s: float) -> dict:
    """The running tasks' specs (those that still parse: others are not moved), each
    checkpoint's grace cut to the server's `max_checkpoint_grace_s`: a move costs the grace
    the reconciler will apply, not the hour a member may declare (which would make the
    move look worse than it is)."""
    from_rows = session.execute(select(TaskRow.id, TaskRow.spec).where(TaskRow.id.in_(task_ids))).all() if task_ids else []
    out = {}
    for task_id, raw in from_rows:
        try:
            spec = parse_spec(raw)
        except Exception:  # stored before a limit existed, or written by hand: not moved
            continue
        if isinstance(spec, TaskSpec):
            out[task_id] = capped_grace(spec, max_grace_s)
    return out


def _request_move(ctx: ServiceContext, session, move: Move) -> bool:
    row = task_lifecycle.get_row(session, move.task_id, for_update=True)
    if row.state != TaskState.RUNNING.value or row.preempt_reason or row.cancel_requested:
        return False
    row.preempt_reason = move.reason()
    after = {"reason": row.preempt_reason, "from_model": move.from_model, "to_model": move.to_model, "gain_s": round(move.gain_s)}
    audit.record(session, actor=ACTOR, action="task.migration_requested", object_kind="Task", object_id=row.id, after=after, ts=ctx.clock.now())
    return True
