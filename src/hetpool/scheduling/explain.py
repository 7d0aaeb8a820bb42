"""Why a task is where it is: a typed explanation, rendered to text in one place.

Every pending (or just admitted) task leaves a cycle with an `Explanation`: a reason code
(`Reason`), the filter counts of its last placement attempt, the attempts themselves, and
structured facts (the blocking task or reservation, the quota named, the preferred model
and when it frees, the estimated start and how it was computed). `render` turns one into
a sentence; it is the only place that does, and it takes a `gettext` so that the
dashboard renders the same facts in its reader's language (the templates are marked for
extraction in web/reasons.py).

The summary for filter failures reads like kube-scheduler's: "0/412 nodes available:
300 incompatible software stack, 80 not enough free devices, 32 pool reserved for other
tenants".

The API keeps the stored form flat — `to_dict()` gives `reason`, `summary`,
`fits_when_idle`, `reasons` (filter counts), `attempts` and each fact as a top-level key
— so that readers of `summary`, `preempting`, `reservation` or `estimated_start` keep
working; `Explanation.from_dict` reads it back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from hetpool.core.units import format_duration
from hetpool.scheduling.assign import Assignment


class Reason(StrEnum):
    """Why a task is admitted or still pending (the `reason` of its explanation)."""

    FITS = "fits"  # admitted (or, in a plan: would be admitted now)
    WAITING_FOR_CAPACITY = "waiting_for_capacity"  # fits the idle estate, not the free capacity
    NEVER_FITS = "never_fits"  # fits no pool even when everything is idle
    WAITING_FOR_RECOVERY = "waiting_for_recovery"  # fits only once nodes or devices unhealthy now are back
    HOLDS_RESERVATION = "holds_reservation"  # a blocked head: nodes held for it, backfill may not delay it
    BLOCKED_BY_RESERVATION = "blocked_by_reservation"  # would fit but for another task's reservation
    BEHIND_FIFO_HEAD = "behind_fifo_head"  # a fifo queue's head is blocked
    BACKFILL_OFF = "backfill_off"  # backfill is off for its device class and a head of that class waits
    PREEMPTING = "preempting"  # lower-priority (or borrowing) work is being evicted for it
    WAITING_FOR_RELEASE = "waiting_for_release"  # devices already being freed by earlier preemptions
    WAITING_FOR_PREFERRED = "waiting_for_preferred"  # a substitute fits now, the preferred model finishes earlier
    OVER_QUOTA = "over_quota"  # fits, but its quota (with borrowing) has no room now
    EXCEEDS_QUOTA = "exceeds_quota"  # asks for more than its quota's nominal + borrowing limit: never admitted as is
    SET_ASIDE = "set_aside"  # evaluating it raised an error; the cycle went on without it


# One sentence per reason, with {fact} fields. Marked for translation in web/reasons.py
# (tests/web/test_i18n.py checks the two lists agree). `{counts}` is the filter summary.
SUMMARY_TEMPLATES: dict[Reason, str] = {
    Reason.FITS: "fits now on {chosen}: {workers} worker(s), first on {node} ({model})",
    Reason.WAITING_FOR_CAPACITY: "waiting for capacity — {counts}",
    Reason.NEVER_FITS: "cannot run anywhere, even on idle capacity — {counts}",
    Reason.WAITING_FOR_RECOVERY: "waiting for unhealthy nodes or devices to come back: only they could run it — {counts}",
    Reason.HOLDS_RESERVATION: "waiting for capacity, holding a reservation on {node_count} node(s) from {start_at} — {counts}",
    Reason.BLOCKED_BY_RESERVATION: "held back by the reservation of {blocking_task} (starts {start_at}): starting now would delay it",
    Reason.BEHIND_FIFO_HEAD: "waiting behind the head of fifo queue {queue}",
    Reason.BACKFILL_OFF: "waiting behind {blocking_task}: backfill is off for {device_class} pools",
    Reason.PREEMPTING: "preempting {victim_count} {victim_kind}; starts when they have released their devices",
    Reason.WAITING_FOR_RELEASE: "waiting for {releasing} preempted task(s) to release their devices",
    Reason.WAITING_FOR_PREFERRED: (
        "waiting for preferred {preferred_model} (free at {free_at}): finishes earlier than starting now on {substitute_model}"
    ),
    Reason.OVER_QUOTA: "over quota: {quota_reason}",
    Reason.EXCEEDS_QUOTA: "exceeds quota {quota} even with borrowing: {resource} {requested:g} > {nominal:g} nominal + {borrowable:g} borrowable",
    Reason.SET_ASIDE: "set aside: evaluating this task raised {error}; the others were scheduled without it",
}

# FITS when the placement is on a substitute (a fallback or a later any_of entry).
FITS_FALLBACK_TEMPLATE = "fits now with fallback to {chosen}: {workers} worker(s), first on {node} ({model})"

# The words filled into {victim_kind} of PREEMPTING, and into a start nobody can estimate
# (marked for translation like the templates: the dashboard translates these facts too).
VICTIMS_LOWER_PRIORITY_TEXT = "lower-priority task(s)"
VICTIMS_BORROWING_TEXT = "borrowing task(s) to reclaim its quota"
VICTIMS_OVERRUN_TEXT = "task(s) that overran their estimates after starting ahead of it"
UNKNOWN_START_TEXT = "unknown"
# Stands for another tenant's task in an explanation its readers may not see.
OTHER_TENANTS_TASK_TEXT = "a task of another tenant"

# Appended when the wait counts on running work that has overrun its estimate (the
# `estimate_basis` fact, see running.revise_overruns): users see why "free at" moved.
REVISED_OVERRUN_TEMPLATE = "; the work holding it has overrun its estimate (it was due at {revised_from}), so its end was revised"
REVISED_HISTORY_TEMPLATE = "; the work holding it has overrun its estimate (it was due at {revised_from}): its template's past runs say it ends later"
REVISED_TEMPLATES = {"overrun": REVISED_OVERRUN_TEMPLATE, "history": REVISED_HISTORY_TEMPLATE}

# How an estimated start was computed (the `eta_basis` fact).
ETA_FORECAST = "forecast"  # the queue forecast walked running ends and the tasks ahead
ETA_RESERVATION = "reservation"  # the start of the nodes held for it
ETA_BEYOND_HORIZON = "beyond_horizon"  # not within the forecast horizon: no start is promised
ETA_NONE = "none"  # no estimate applies (never fits, exceeds its quota, no runtime estimates)
ETA_PENDING = "pending"  # queued since the last forecast (policy.estimate_interval): estimated by the next one

# Appended to the summary of a waiting task the forecast found no start for (eta_basis
# beyond_horizon), so that "no estimate" is said rather than shown as a bare null.
BEYOND_HORIZON_TEMPLATE = "; no start within the forecast horizon ({horizon} queued tasks, running work with a known end)"

# Appended to a wait when capacity it could use now is held for preempting tasks (the fact
# `held_for_preemptors`, see claims.py): the devices look free, and this says why it waits.
HELD_FOR_PREEMPTORS_TEMPLATE = "; capacity it could use is held for {count} preempting task(s) until they start"

# Appended to the summary of a task queued since the last forecast (eta_basis pending).
ETA_PENDING_TEMPLATE = "; its start is estimated by the next forecast (due {next_estimate_at})"

# Appended when a waiting task is expected to finish after its deadline (the facts
# `deadline_at_risk`, `deadline` and `deadline_late_s`, see deadlines.mark_at_risk), and to
# a placement the deadline step chose over the usual order (`chosen_for_deadline`).
DEADLINE_AT_RISK_TEMPLATE = "; it cannot meet its deadline {deadline}: expected to finish {late} late"
CHOSEN_FOR_DEADLINE_TEXT = "; chosen because it meets the task's deadline"

_BASE_KEYS = ("reason", "summary", "fits_when_idle", "reasons", "attempts")


def _identity(text: str) -> str:
    return text


@dataclass
class Explanation:
    reason: Reason
    fits_when_idle: bool = True
    filter_counts: dict[str, int] = field(default_factory=dict)  # per filter reason: nodes it rejected
    attempts: list[dict] = field(default_factory=list)  # Attempt.to_dict() per candidate group
    facts: dict[str, Any] = field(default_factory=dict)  # JSON-ready, named as in SUMMARY_TEMPLATES and below

    @property
    def summary(self) -> str:
        return render(self)

    def to_dict(self) -> dict:
        return {
            "reason": self.reason.value,
            "summary": render(self),
            "fits_when_idle": self.fits_when_idle,
            "reasons": dict(self.filter_counts),
            "attempts": list(self.attempts),
            **self.facts,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Explanation | None:
        """The stored form read back; None when it has no known reason code (written by an older version)."""
        try:
            reason = Reason(data.get("reason"))
        except ValueError:
            return None
        facts = {k: v for k, v in data.items() if k not in _BASE_KEYS}
        return cls(reason, bool(data.get("fits_when_idle", True)), dict(data.get("reasons") or {}), list(data.get("attempts") or []), facts)

    def matches(self, stored: dict | None, **extra: Any) -> bool:
        """Whether `stored` is this explanation's to_dict() plus `extra`, without rendering
        the sentence: it is a function of the rest (a scheduler compares thousands per cycle)."""
        if not stored or len(stored) != len(_BASE_KEYS) + len(self.facts) + len(extra):
            return False
        if stored.get("reason") != self.reason.value or stored.get("fits_when_idle") != self.fits_when_idle:
            return False
        if stored.get("reasons") != self.filter_counts or stored.get("attempts") != self.attempts:
            return False
        return all(k in stored and stored[k] == v for k, v in self.facts.items()) and all(stored.get(k) == v for k, v in extra.items())

    def with_facts(self, **facts: Any) -> Explanation:
        self.facts.update(facts)
        return self


def for_tenant(expl: Explanation, tenant: str, tenant_of: Mapping[str, str]) -> Explanation:
    """The explanation as the waiting task's own readers may see it: the ids of tasks of
    other tenants (the reservation that blocks it, the work it would evict) are left out —
    a member learns that another tenant's task is in the way, not which one. `tenant_of`
    maps task ids to their tenants; an id it does not know is treated as foreign."""
    if "blocking_task" not in expl.facts and "preempting" not in expl.facts:
        return expl  # nothing that names another task
    facts = dict(expl.facts)
    blocking = facts.get("blocking_task")
    if isinstance(blocking, str) and tenant_of.get(blocking) != tenant:
        facts["blocking_task"] = OTHER_TENANTS_TASK_TEXT
    if isinstance(facts.get("preempting"), list):
        facts["preempting"] = [v for v in facts["preempting"] if tenant_of.get(v) == tenant]
    return replace(expl, facts=facts)


def counts_text(filter_counts: dict[str, int], nodes: int | None, gettext: Callable[[str], str] = _identity) -> str:
    """'0/412 nodes available: 300 incompatible software stack, …' (the four largest)."""
    top = sorted(filter_counts.items(), key=lambda kv: -kv[1])[:4]
    counts = ", ".join(f"{count} {gettext(reason)}" for reason, count in top) or gettext("no candidates")
    return (gettext("0/{nodes} nodes available: ").format(nodes=nodes) if nodes is not None else "") + counts


def render(expl: Explanation, gettext: Callable[[str], str] = _identity) -> str:
    """The explanation as one sentence, in the language of `gettext`."""
    facts = dict(expl.facts)
    facts.setdefault("counts", counts_text(expl.filter_counts, facts.get("nodes"), gettext))
    fallback = expl.reason == Reason.FITS and facts.get("fallback_used")
    template = gettext(FITS_FALLBACK_TEMPLATE if fallback else SUMMARY_TEMPLATES[expl.reason])
    try:
        text = template.format(**facts)
    except (KeyError, ValueError, IndexError):
        # A fact is missing (a stored explanation from an older version): say the reason at least.
        # (Chinese templates use the full-width colon ：.)
        text = gettext(SUMMARY_TEMPLATES[expl.reason]).split(":")[0].split("：")[0].split("{")[0].strip(" —") or expl.reason.value
    if facts.get("eta_basis") == ETA_BEYOND_HORIZON:
        text += gettext(BEYOND_HORIZON_TEMPLATE).format(horizon=facts.get("horizon", "?"))
    if facts.get("eta_basis") == ETA_PENDING:
        text += gettext(ETA_PENDING_TEMPLATE).format(next_estimate_at=facts.get("next_estimate_at") or "?")
    if facts.get("estimate_basis") in REVISED_TEMPLATES and facts.get("revised_from"):
        text += gettext(REVISED_TEMPLATES[facts["estimate_basis"]]).format(revised_from=facts["revised_from"])
    if facts.get("held_for_preemptors"):
        text += gettext(HELD_FOR_PREEMPTORS_TEMPLATE).format(count=facts["held_for_preemptors"])
    if facts.get("chosen_for_deadline"):
        text += gettext(CHOSEN_FOR_DEADLINE_TEXT)
    if facts.get("deadline_at_risk") and facts.get("deadline"):
        late = facts.get("deadline_late_s")
        text += gettext(DEADLINE_AT_RISK_TEMPLATE).format(
            deadline=facts["deadline"], late=format_duration(late) if isinstance(late, (int, float)) else "?"
        )
    return text


def from_assignment(assignment: Assignment, fits_when_idle: bool, nodes: int | None = None) -> Explanation:
    """The explanation of a placement attempt on its own: fits now, waits for capacity, or never fits."""
    counts = dict(assignment.reasons)
    attempts = [a.to_dict() for a in assignment.attempts]
    if assignment.feasible:
        first = assignment.placements[0]
        facts = {
            "chosen": assignment.chosen,
            "fallback_used": assignment.fallback_used,
            "workers": len(assignment.placements),
            "node": first.node,
            "model": first.model,
        }
        if assignment.for_deadline:
            facts["chosen_for_deadline"] = True
        return Explanation(Reason.FITS, True, counts, attempts, facts)
    facts = {"nodes": nodes} if nodes is not None else {}
    reason = Reason.WAITING_FOR_CAPACITY if fits_when_idle else Reason.NEVER_FITS
    return Explanation(reason, fits_when_idle, counts, attempts, facts)


def explanation(assignment: Assignment, fits_when_idle: bool, nodes: int | None = None) -> dict:
    """The stored (dict) form of `from_assignment`."""
    return from_assignment(assignment, fits_when_idle, nodes).to_dict()


def summarize(assignment: Assignment, fits_when_idle: bool, nodes: int | None = None) -> str:
    return render(from_assignment(assignment, fits_when_idle, nodes))
