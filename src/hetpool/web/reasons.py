"""The API's reason texts: why a candidate was rejected or a task waits.

The scheduling core and the catalog name their reasons in English (REASON_* in
scheduling/filters.py, assign.py, cycle.py; R_* in catalog/compat.py) and know nothing of
languages; the API passes those words on unchanged. They are listed here, marked for
extraction, so that the dashboard's catalogs translate them like any other text
(`Translator.reason`). tests/web/test_i18n.py fails when the core gains a reason this list
lacks.

A task's explanation is a reason code plus facts (scheduling/explain.py); `explanation_text`
renders it in the reader's language with the core's own `render`, its sentences listed here
in SUMMARY_TEXTS."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hetpool.scheduling.explain import Explanation, render
from hetpool.web.i18n import N_, Translator
from hetpool.web.labels import label
from hetpool.web.task_views import parse_ts, short_ts

REASON_TEXTS = (
    # scheduling: filters and assignment
    N_("incompatible software stack"),
    N_("software compatibility unknown"),
    N_("missing required device features"),
    N_("device memory below min_memory_gb"),
    N_("pool reserved for other tenants"),
    N_("pool does not allow fractional devices"),
    N_("node unhealthy or not schedulable"),
    N_("not enough free devices"),
    N_("fewer devices per node than requested"),
    N_("not enough free CPU"),
    N_("not enough free host memory"),
    N_("node has fewer CPU cores than requested"),
    N_("node has less host memory than requested"),
    N_("not enough nodes for all workers at once (gang)"),
    N_("device class does not match"),
    N_("device class does not take this task type"),
    N_("slice larger than one device"),
    N_("node excluded by the task"),
    N_("node held for a blocked queue head"),
    N_("pool not available to the task's queue"),
    N_("no single node / network group / zone holds all workers"),
    N_("no NVLink/HCCS island with enough free devices"),
    N_("unknown device model or pool"),
    N_("no pool offers the requested devices"),
    N_("the gang fits only across device models (mix_models is off)"),
    # scheduling: the cycle
    N_("set aside"),
    N_("quota exceeded"),
    # catalog: software compatibility
    N_("unknown framework"),
    N_("framework not supported on device"),
    N_("software stack unknown"),
    N_("software stack does not match device runtime"),
    N_("no known framework release matches"),
    N_("driver too old for framework"),
    N_("runtime release does not support the device"),
    N_("no version table for this runtime"),
    N_("CANN version cannot run framework version"),
    N_("runtime version cannot run framework version"),
    N_("runtime version not in knowledge base"),
    N_("framework not installed"),
    N_("installed framework version does not match"),
    N_("installed framework build does not match device"),
    N_("extra not supported"),
    N_("extra not installed"),
    N_("installed extra version does not match"),
)

# The core's sentences for a task's explanation (scheduling/explain.py: SUMMARY_TEMPLATES,
# FITS_FALLBACK_TEMPLATE and the filter-count texts of counts_text). `render` formats them
# with the explanation's facts after translating them, so every translation keeps the same
# {fields} (tests/web/test_i18n.py checks both).
SUMMARY_TEXTS = (
    N_("fits now on {chosen}: {workers} worker(s), first on {node} ({model})"),
    N_("fits now with fallback to {chosen}: {workers} worker(s), first on {node} ({model})"),
    N_("waiting for capacity — {counts}"),
    N_("cannot run anywhere, even on idle capacity — {counts}"),
    N_("waiting for unhealthy nodes or devices to come back: only they could run it — {counts}"),
    N_("waiting for capacity, holding a reservation on {node_count} node(s) from {start_at} — {counts}"),
    N_("held back by the reservation of {blocking_task} (starts {start_at}): starting now would delay it"),
    N_("waiting behind the head of fifo queue {queue}"),
    N_("waiting behind {blocking_task}: backfill is off for {device_class} pools"),
    N_("preempting {victim_count} {victim_kind}; starts when they have released their devices"),
    N_("waiting for {releasing} preempted task(s) to release their devices"),
    N_("waiting for preferred {preferred_model} (free at {free_at}): finishes earlier than starting now on {substitute_model}"),
    N_("over quota: {quota_reason}"),
    N_("exceeds quota {quota} even with borrowing: {resource} {requested:g} > {nominal:g} nominal + {borrowable:g} borrowable"),
    N_("set aside: evaluating this task raised {error}; the others were scheduled without it"),
    N_("0/{nodes} nodes available: "),
    N_("no candidates"),
    N_("; no start within the forecast horizon ({horizon} queued tasks, running work with a known end)"),
    N_("; its start is estimated by the next forecast (due {next_estimate_at})"),
    N_("; the work holding it has overrun its estimate (it was due at {revised_from}), so its end was revised"),
    N_("; the work holding it has overrun its estimate (it was due at {revised_from}): its template's past runs say it ends later"),
    N_("; capacity it could use is held for {count} preempting task(s) until they start"),
    N_("; chosen because it meets the task's deadline"),
    N_("; it cannot meet its deadline {deadline}: expected to finish {late} late"),
)

# The words the cycle fills into {victim_kind} of "preempting …" (translated as facts).
VICTIM_KINDS = (
    N_("lower-priority task(s)"),
    N_("borrowing task(s) to reclaim its quota"),
    N_("task(s) that overran their estimates after starting ahead of it"),
)
UNKNOWN_TIME = N_("unknown")  # a reservation's start when no runtime estimate gives one
OTHER_TENANTS_TASK = N_("a task of another tenant")  # stands for a task id the reader may not see


def explanation_text(pending: Mapping[str, Any] | None, tr: Translator) -> str:
    """Why a task is where it is, in the reader's language: the stored explanation (a task's
    `pending`, a plan's `explanation`) rendered from its reason code and facts by the core's
    one renderer; an explanation stored before reason codes existed shows its English summary."""
    if not pending:
        return ""
    expl = Explanation.from_dict(dict(pending))
    if expl is None:
        return str(pending.get("summary") or "")
    facts = dict(expl.facts)
    # Facts that are words, not names or numbers, are translated like the sentence around them.
    if isinstance(facts.get("device_class"), str):
        facts["device_class"] = label(tr, "device_class", facts["device_class"])
    if isinstance(facts.get("victim_kind"), str):
        facts["victim_kind"] = tr.reason(facts["victim_kind"])
    if facts.get("blocking_task") == OTHER_TENANTS_TASK:
        facts["blocking_task"] = tr.reason(OTHER_TENANTS_TASK)
    # Times as on the rest of the dashboard (UTC, to the second), not the API's ISO form.
    # The core writes "unknown" for a reservation whose start no runtime estimate gives.
    for key in ("start_at", "free_at", "revised_from", "deadline", "next_estimate_at"):
        if isinstance(facts.get(key), str):
            facts[key] = short_ts(facts[key]) if parse_ts(facts[key]) else tr.reason(facts[key])
    # `reason` only translates (no %-formatting): the core fills the {fields} itself.
    return render(replace(expl, facts=facts), tr.reason)
