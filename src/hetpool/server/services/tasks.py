"""The two front doors for a task: `plan` (what would happen, committing nothing) and
`submit` (the task row, queued or held for approval); state changes after submit go
through task_lifecycle, reads through task_views.

`plan` runs the scheduler's own cycle with the task added. `submit` is admission, not
planning: it resolves the spec, checks that the task could ever fit and never exceeds its
quota (per-shape verdicts, cached until the inventory or node health changes), the budget
and the approval rules, and writes the row and its audit event. Where the task goes is
the scheduler's decision, on its next cycle."""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from hetpool.core.errors import BudgetExceededError, SpecError
from hetpool.core.specs import spec_to_document
from hetpool.core.states import TaskState
from hetpool.scheduling.assign import assign
from hetpool.scheduling.explain import ETA_NONE, Explanation, Reason, explanation, for_tenant
from hetpool.scheduling.quota_view import QuotaCeiling
from hetpool.scheduling.snapshot import Snapshot
from hetpool.server import tracing
from hetpool.server.db.models import TaskRow
from hetpool.server.services import approvals, audit, recommend
from hetpool.server.services import quota as quota_service
from hetpool.server.services.cluster_state import admission_verdict, idle_snapshot, inventory_at, read_inventory, recent_live_snapshot
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.cost import budget_hard_stop
from hetpool.server.services.cycle_inputs import CycleLoad, load_cycle, run_with_planned_task
from hetpool.server.services.inventory import Inventory
from hetpool.server.services.queue_cache import queue_cache
from hetpool.server.services.sched_state import with_runtime
from hetpool.server.services.task_planning import placement_options, plan_placement, plan_spec, resolve_task_spec


class UnschedulableError(SpecError):
    """The task could not run on any pool even if everything were idle."""

    code = "unschedulable"


class ExceedsQuotaError(SpecError):
    """The task asks for more than one of its quotas allows even with all the borrowing its
    cohort permits, wherever it could run: it would wait forever, so it is refused."""

    code = "exceeds_quota"


# What a plan says only of a task it would place (plan_spec): dropped for one that is refused.
PLACED_ONLY = ("estimated_runtime_s", "estimated_runtime", "cost_per_hour", "estimated_cost", "estimated_wait_s", "backend")


def _next_cycle_verdict(ctx: ServiceContext, load: CycleLoad, spec, now) -> dict:
    """What the scheduler's next cycle would decide for the task: placed now (where), or
    waiting with the cycle's own explanation, queue position and estimated start."""
    decision = run_with_planned_task(ctx, load, spec, now)
    tenant_of = {q.id: q.spec.tenant for q in load.queue} | {r.id: r.tenant for r in load.running}
    expl = for_tenant(decision.explanation, spec.tenant, tenant_of)
    if decision.admit:
        first = decision.assignment.placements[0]
        placed = plan_placement(ctx, load.inv, with_runtime(spec, load.learned), decision.assignment)
        return {**placed, "queue_position": 0, "estimated_start": now.isoformat(), "estimated_wait_s": 0, "estimated_pool": first.pool}
    facts = expl.facts
    return {
        "feasible": False,
        "placements": [],
        "chosen": None,
        "reasons": dict(expl.filter_counts),
        "explanation": expl.to_dict(),
        "queue_position": facts.get("position"),
        "estimated_start": facts.get("estimated_start"),
        "estimated_wait_s": facts.get("estimated_wait_s"),
        "estimated_pool": facts.get("estimated_pool"),
    }


def new_task_id() -> str:
    return "t-" + secrets.token_hex(5)


def plan(ctx: ServiceContext, session: Session, raw: dict, loads: dict[int, CycleLoad] | None = None) -> dict:
    """`loads`: cycle inputs by priority rank, shared by the plans of one request (the
    options of a recommendation are planned against the same queue and estate)."""
    raw = recommend.pin_deadline(raw, ctx.clock.now())
    if recommend.sizes_itself(raw):
        raw = recommend.sized_document(ctx, session, raw, planner())  # what submit would queue
    inv = read_inventory(ctx, session)
    spec = resolve_task_spec(inv, raw, ctx.compat)
    now = ctx.clock.now()
    # The queued tasks it would join behind (its priority or higher), loaded as the
    # scheduler loads them: the plan runs the scheduler's own cycle with it added.
    load = loads.get(spec.priority.rank) if loads is not None else None
    if load is None:
        ahead = [t for t in queue_cache(ctx).refresh(session) if t.priority_rank >= spec.priority.rank]
        load = load_cycle(ctx, session, ahead, now)
        if loads is not None:
            loads[spec.priority.rank] = load
    snap = load.snap
    # Estimates use the template's learned runtime when the task gives none, as the
    # scheduler does; the returned task document stays what the user asked for.
    body = plan_spec(ctx, load.inv, snap, with_runtime(spec, load.learned))
    ceiling = quota_ceiling(ctx, inv, snap.emptied(), spec) if body["fits_when_idle"] else None
    if ceiling is not None:
        # Submit refuses it (see `submit`): no placement, no wait, no ETA to show.
        expl = Explanation(Reason.EXCEEDS_QUOTA, True, facts={**ceiling.to_dict(), "eta_basis": ETA_NONE, "refused_at_submit": True})
        body = {k: v for k, v in body.items() if k not in PLACED_ONLY}
        body.update(feasible=False, placements=[], chosen=None, reasons={}, explanation=expl.to_dict())
    elif body["fits_when_idle"]:
        body.update(_next_cycle_verdict(ctx, load, spec, now))
    body["approval"] = approvals.plan_summary(approvals.evaluate_task(ctx, session, inv, snap, spec))
    body["task"] = spec_to_document(spec)
    return body


def planner() -> recommend.Planner:
    """`plan` for the options of one recommendation: one cycle load shared by all."""
    return functools.partial(plan, loads={})


@dataclass
class AdmissionView:
    """What submit checks tasks against, read once per transaction: a batch of submits
    (services/submit_batch.py) shares one, so the inventory revision, node health and each
    tenant's budget are read once per batch, not once per task."""

    ctx: ServiceContext
    session: Session
    inv: Inventory
    idle: Snapshot
    idle_key: tuple
    budget_stops: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def read(cls, ctx: ServiceContext, session: Session) -> AdmissionView:
        inv, revision = inventory_at(ctx, session)
        idle, idle_key = idle_snapshot(ctx, session, inv, revision)
        return cls(ctx, session, inv, idle, idle_key)

    def budget_stop(self, tenant: str) -> str | None:
        if tenant not in self.budget_stops:
            self.budget_stops[tenant] = budget_hard_stop(self.ctx, self.session, self.inv, tenant)
        return self.budget_stops[tenant]


@tracing.traced_submit  # root span of the task's trace (no-op unless HETPOOL_TRACING is on)
def submit(ctx: ServiceContext, session: Session, raw: dict, actor: str, view: AdmissionView | None = None) -> TaskRow:
    """Admit one task: checked, its row and audit event added to `session` (flushed by the
    caller's commit, or at once when an approval request must refer to it). A failed check
    raises before anything is added."""
    view = view or AdmissionView.read(ctx, session)
    inv, idle = view.inv, view.idle
    raw = recommend.pin_deadline(raw, ctx.clock.now())
    if recommend.sizes_itself(raw):
        # A goal and no devices: the top-ranked recommendation becomes the task.
        raw = recommend.sized_document(ctx, session, raw, planner())
    spec = resolve_task_spec(inv, raw, ctx.compat)
    never_fits = admission_verdict(ctx, view.idle_key, "fit", spec, lambda: _never_fits(ctx, inv, idle, spec))
    if never_fits is not None:
        summary, details = never_fits
        raise UnschedulableError(f"task {spec.name!r} cannot run on any pool, even when idle: {summary}", details=details)
    ceiling = admission_verdict(ctx, view.idle_key, "quota", spec, lambda: quota_ceiling(ctx, inv, idle, spec))
    if ceiling is not None:
        text = ceiling_text(ceiling)
        raise ExceedsQuotaError(f"task {spec.name!r} refused: {text}", details=[{"loc": "quota", "msg": text, **ceiling.to_dict()}])
    stop = view.budget_stop(spec.tenant)
    if stop:
        raise BudgetExceededError(f"task {spec.name!r} refused: {stop}", details=[{"loc": "tenant", "msg": stop}])
    approvals.check_task_labels(spec)
    # Only a reserved-pool rule needs the live snapshot: the cached one, as of the last load.
    verdict = approvals.evaluate_task(ctx, session, inv, lambda: recent_live_snapshot(ctx, session), spec)
    state = TaskState.PENDING_APPROVAL if verdict.needed else TaskState.QUEUED
    now = ctx.clock.now()
    row = TaskRow(
        id=new_task_id(),
        name=spec.name,
        tenant=spec.tenant,
        env=spec.env.value,
        task_type=spec.task_type.value,
        template=spec.template,
        priority=spec.priority.value,
        priority_rank=spec.priority.rank,
        state=state.value,
        spec=spec_to_document(spec),
        created_by=actor,
        created_at=now,
        updated_at=now,
        queued_at=now if state == TaskState.QUEUED else None,  # an approved task queues from its approval
        attempt=0,
        message="",
        trace_parent=tracing.current_traceparent(),  # admit, dispatch and the engine call join this trace
    )
    session.add(row)
    audit.record(
        session, actor=actor, action="task.submit", object_kind="Task", object_id=row.id, after={"state": row.state, "spec": row.spec}, ts=now
    )
    if verdict.needed:
        session.flush()  # the approval request refers to the task row
        approvals.open_task_request(ctx, session, row, spec, verdict, actor)
    return row


def _never_fits(ctx: ServiceContext, inv, idle: Snapshot, spec) -> tuple[str, list[dict]] | None:
    """Why `spec` fits no pool of the idle estate (the explanation's summary, and the
    filters that ruled the nodes out), or None when it fits somewhere."""
    result = assign(idle, spec, ctx.compat.check, **placement_options(inv, spec))
    if result.feasible:
        return None
    details = [{"loc": reason, "msg": f"{count} node(s)"} for reason, count in result.reasons.most_common()]
    return explanation(result, False)["summary"], details


def quota_ceiling(ctx: ServiceContext, inv, idle: Snapshot, spec) -> QuotaCeiling | None:
    """The quota `spec` could never run under (wherever it lands, borrowing all it may),
    unless an approval policy lets it run over quota: then it goes to approval instead of
    being refused (docs/governance.md)."""
    if approvals.may_approve_over_quota(inv, spec.tenant):
        return None
    return quota_service.never_within(ctx, inv, idle, spec)


def ceiling_text(c: QuotaCeiling) -> str:
    """'exceeds quota nlp even with borrowing: gpu 8 requested > 4 nominal + at most 2 borrowed (borrowing limit 2)'."""
    if c.borrowing_limit is None:
        limit = f"no borrowing limit; sibling quotas can lend at most {c.borrowable:g}"
    elif c.borrowable < c.borrowing_limit:
        limit = f"borrowing limit {c.borrowing_limit:g}, but sibling quotas can lend at most {c.borrowable:g}"
    else:
        limit = f"borrowing limit {c.borrowing_limit:g}"
    return (
        f"exceeds quota {c.quota} even with borrowing: {c.resource} {c.requested:g} requested > "
        f"{c.nominal:g} nominal + at most {c.borrowable:g} borrowed ({limit})"
    )
