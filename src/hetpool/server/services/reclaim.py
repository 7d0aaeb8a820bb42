"""Reclaim: the facts of running tasks for `governance.reclaim`, and its decisions applied.

Utilisation comes from the agents' heartbeats (NodeStatusRow.devices): a placement's
device indices count within the node's devices of the placement's model, as an agent
numbers its reports, so they are matched on (model, index). Idleness needs history, kept
per task attempt in `reclaim_state`.

Acting reuses the existing flows so the backend work is stopped before anything else
happens and nothing is dispatched twice: requeue sets `preempt_reason` (the reconciler
stops the job, then puts the task back in its queue, as for a preemption); stop sets
`cancel_requested` (the reconciler stops the job and records the cancellation with the
reclaim reason, see RECLAIMED).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.clock import iso_utc
from hetpool.core.governance import ReclaimPolicySpec
from hetpool.core.states import TaskState
from hetpool.core.tasks import TaskTemplateSpec
from hetpool.governance.reclaim import Decision, DeviceUse, Notice, TaskFacts, UsageSample
from hetpool.server.db.models import InventoryObjectRow, NodeStatusRow, PlacementRow, TaskRow
from hetpool.server.db.models_reclaim import ReclaimStateRow
from hetpool.server.services import audit
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.task_lifecycle import get_row

ACTOR = "reclaimer"
# Message prefix of a task whose devices are being taken back; the reconciler keeps such a
# message when it records the stop, so the task ends with the reason it was reclaimed.
RECLAIMED = "reclaimed: "
READY = "ready"


@dataclass(frozen=True)
class Candidate:
    facts: TaskFacts
    attempt: int


def load_policies(session: Session) -> list[ReclaimPolicySpec]:
    """The applied reclaim policies; one stored before a limit existed (or by hand) that no
    longer validates is left out, as load_inventory does, rather than stopping reclaim."""
    rows = session.execute(select(InventoryObjectRow.spec).where(InventoryObjectRow.kind == "ReclaimPolicy")).scalars()
    policies = []
    for spec in rows:
        try:
            policies.append(ReclaimPolicySpec.model_validate(spec))
        except ValidationError:
            continue  # logged by load_inventory, which reads the same rows
    return policies


def _template_leases(session: Session, names: set[str]) -> dict[str, str | None]:
    if not names:
        return {}
    rows = session.execute(
        select(InventoryObjectRow.name, InventoryObjectRow.spec).where(InventoryObjectRow.kind == "TaskTemplate", InventoryObjectRow.name.in_(names))
    ).all()
    leases = {}
    for name, spec in rows:
        try:
            leases[name] = TaskTemplateSpec.model_validate(spec).defaults.max_runtime
        except ValidationError:  # stored before a limit existed: no lease from it
            leases[name] = None
    return leases


def usage_sample(placements: list[PlacementRow], statuses: dict[str, NodeStatusRow], stale_before: datetime) -> UsageSample | None:
    """The latest utilisation of every device the placements hold; None when a node has
    no fresh report (offline, silent, or no agent) — no evidence, no reclaim."""
    devices, times = [], []
    for p in placements:
        status = statuses.get(p.node)
        if status is None or status.state != READY or status.last_heartbeat_at < stale_before:
            return None
        reported = {(d.get("model") or "", int(d.get("index", -1))): d for d in status.devices or []}
        for index in p.device_indices:
            found = reported.get((p.model, int(index))) or reported.get(("", int(index)))
            devices.append(DeviceUse(p.node, int(index), None if found is None else found.get("utilisation_pct")))
        times.append(status.last_heartbeat_at)
    return UsageSample(min(times), tuple(devices)) if devices else None


def _notice_of(state: ReclaimStateRow | None) -> Notice | None:
    if state is None or state.notice_cause is None:
        return None
    return Notice(
        cause=state.notice_cause,
        reason=state.notice_reason or "",
        given_at=state.notice_at,
        act_at=state.act_at,
        action=state.action,
        policy=state.policy,
    )


def gather(ctx: ServiceContext, session: Session, now: datetime) -> list[Candidate]:
    """Facts of every running task reclaim may act on, and state rows of attempts that no
    longer run removed. A task already stopping (cancel or preemption asked) is left alone."""
    rows = session.execute(select(TaskRow).where(TaskRow.state == TaskState.RUNNING.value)).scalars().all()
    rows = [r for r in rows if not r.cancel_requested and r.preempt_reason is None]
    live = {(r.id, r.attempt) for r in rows}
    states = {(s.task_id, s.attempt): s for s in session.execute(select(ReclaimStateRow)).scalars()}
    for key, state in states.items():
        if key not in live:  # ended, requeued or being stopped: its idleness and notice are over
            session.delete(state)
    if not rows:
        return []
    placements: dict[tuple[str, int], list[PlacementRow]] = {}
    for p in session.execute(select(PlacementRow).where(PlacementRow.task_id.in_([r.id for r in rows])).order_by(PlacementRow.rank)).scalars():
        placements.setdefault((p.task_id, p.attempt), []).append(p)
    nodes = {p.node for key in live for p in placements.get(key, [])}
    statuses = {s.node: s for s in session.execute(select(NodeStatusRow).where(NodeStatusRow.node.in_(nodes))).scalars()} if nodes else {}
    leases = _template_leases(session, {r.template for r in rows if r.template and not r.spec.get("max_runtime")})
    stale_before = now - timedelta(seconds=ctx.settings.heartbeat_timeout_s)
    out = []
    for r in rows:
        held = placements.get((r.id, r.attempt), [])
        state = states.get((r.id, r.attempt))
        facts = TaskFacts(
            task_id=r.id,
            tenant=r.tenant,
            task_type=r.task_type,
            started_at=r.started_at,
            max_runtime=r.spec.get("max_runtime") or leases.get(r.template or ""),
            devices_held=sum(len(p.device_indices) for p in held),
            sample=usage_sample(held, statuses, stale_before) if held else None,
            idle_since=state.idle_since if state else None,
            notice=_notice_of(state),
        )
        out.append(Candidate(facts, r.attempt))
    return out


def apply(ctx: ServiceContext, session: Session, candidate: Candidate, decision: Decision) -> int:
    """Record one decision, guarded by the task still running the same attempt unstopped."""
    facts = candidate.facts
    row = get_row(session, facts.task_id, for_update=True)
    if row.state != TaskState.RUNNING.value or row.attempt != candidate.attempt or row.cancel_requested or row.preempt_reason:
        return 0
    state = session.get(ReclaimStateRow, (row.id, row.attempt))
    if state is None:
        state = ReclaimStateRow(task_id=row.id, attempt=row.attempt)
        session.add(state)
    if state.acted_at is not None:
        return 0
    now = ctx.clock.now()
    state.idle_since = decision.idle_since
    notice = decision.notice
    record = {"session": session, "actor": ACTOR, "object_kind": "Task", "object_id": row.id, "ts": now}
    if decision.kind == "notice":
        state.notice_cause, state.notice_reason, state.action, state.policy = notice.cause, notice.reason, notice.action, notice.policy
        state.notice_at, state.act_at = notice.given_at, notice.act_at
        unless = " unless it is busy again" if notice.cause == "idle" else ""
        row.message = f"reclaim notice: {notice.reason}; will {notice.action} at {iso_utc(notice.act_at)}{unless}"
        after = {"reason": notice.reason, "cause": notice.cause, "action": notice.action, "act_at": iso_utc(notice.act_at), "policy": notice.policy}
        audit.record(action="task.reclaim_notice", before={"state": row.state, "attempt": row.attempt}, after=after, **record)
        return 1
    if decision.kind == "cancel_notice":
        state.notice_cause = state.notice_reason = state.notice_at = state.act_at = state.action = state.policy = None
        row.message = f"reclaim notice withdrawn: {decision.reason}"
        before = {"reason": notice.reason, "action": notice.action, "act_at": iso_utc(notice.act_at)}
        audit.record(action="task.reclaim_cancelled", before=before, after={"reason": decision.reason}, **record)
        return 1
    if decision.kind == "act":
        state.acted_at = now
        reason = RECLAIMED + notice.reason
        if notice.action == "requeue":
            row.preempt_reason = reason  # the reconciler stops the job, then requeues (see module doc)
            row.message = reason + "; stopping to requeue"
            target = TaskState.QUEUED.value
        else:
            row.cancel_requested = True
            row.message = reason
            target = TaskState.CANCELLED.value
        before = {"state": row.state, "attempt": row.attempt, "notice_at": iso_utc(notice.given_at)}
        after = {"action": notice.action, "state": target, "reason": notice.reason, "cause": notice.cause, "policy": notice.policy}
        audit.record(action="task.reclaim", before=before, after=after, **record)
        return 1
    return 0
