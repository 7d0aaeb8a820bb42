"""The reasons of a goal's options in the reader's language.

The core (scheduling/recommend.py) gives each reason as a code with its values, and the
same sentence in English; the templates are repeated here, marked for extraction, so that
the catalogs translate them (tests/web/test_goal_form_pages.py fails when the two lists
differ). Values are already formatted numbers and names; the few that are words (a layout,
a task type, a refusal from the plan) are translated too."""

from __future__ import annotations

from typing import Any

from hetpool.web.i18n import N_, Translator
from hetpool.web.labels import label

NOTES = {
    "split": N_("{count} × {model} on {where}, {per_device} GiB of {usable} GiB usable per device"),
    "offload": N_("optimizer states in host memory (ZeRO-Offload): {host_gib} GiB per worker, assumed {speed} speed"),
    "no_tokens": N_("no goal.tokens: the runtime is not estimated"),
    "no_start": N_("no start estimate: the pool is busy with work of unknown length"),
    "starts_now": N_("can start now"),
    "starts_in": N_("estimated start in {wait}"),
    "deadline_unknown": N_("deadline: unknown whether it is met (no runtime or start estimate; give goal.tokens)"),
    "deadline_met": N_("deadline: finishes {margin} before it, after a runtime of {runtime}"),
    "deadline_missed": N_("deadline: misses it by {late}, after a runtime of {runtime}"),
    "cost_unknown": N_("max_cost: unknown total (no runtime estimate); {hourly} per hour"),
    "cost_within": N_("max_cost: {cost} ≤ {limit}"),
    "cost_over": N_("max_cost: {cost} > {limit}"),
    "latency_met": N_("latency: {latency} ms per token ≤ {target} ms"),
    "latency_missed": N_("latency: {latency} ms per token > {target} ms"),
    "throughput_met": N_("throughput: {rate} tokens/s ≥ {target}"),
    "throughput_missed": N_("throughput: {rate} tokens/s < {target}"),
}
EXCLUDED = {
    "task_type": N_("does not take {task_type} work: {why}"),
    "too_big": N_("{variant} split needs {devices} × {model}; the pool has {capacity}"),
    "precision": N_("{model} has no {precision} support (features: {features})"),
    "activations": N_("one micro-batch's activations ({activations} GiB) exceed {usable} GiB even split {ways} ways"),
    "plan": "{why}",
}
WHERE = {
    "one_node": N_("one node"),
    "nodes": N_("{nodes} nodes"),
    "replicas": N_("{replicas} replicas of {size}"),
}
VARIANTS = (N_("smallest"), N_("deadline"), N_("offload"), N_("throughput"))
# task_types.task_type_verdict's words (the rest of a verdict is a name or a number)
VERDICT_TEXTS = (N_("relative performance {perf} is below {minimum}"),)


def note_text(note: dict[str, Any], tr: Translator, fallback: str = "") -> str:
    """One option's reason, translated; `fallback` (the English sentence) for a code this
    dashboard does not know (a newer server)."""
    template = NOTES.get(note.get("code", ""))
    if template is None:
        return fallback
    params = {k: str(v) for k, v in (note.get("params") or {}).items()}
    if note["code"] == "split":
        layout = {k: params.get(k, "") for k in ("nodes", "replicas", "size")}
        where = tr.reason(WHERE.get(params.get("where_code", ""), "")).format(**layout)
        params["where"] = f"{where} ({params['parallel']})" if params.get("parallel") else where
    try:
        return tr.reason(template).format(**params)
    except (KeyError, IndexError):
        return fallback


def excluded_text(entry: dict[str, Any], tr: Translator) -> str:
    """Why a pool was left out, translated."""
    code, fallback = entry.get("code"), str(entry.get("reason", ""))
    template = EXCLUDED.get(code or "")
    if template is None:
        return tr.reason(fallback)
    params = {k: str(v) for k, v in (entry.get("params") or {}).items()}
    if code == "plan":
        return "; ".join(tr.reason(part) for part in params.get("why", fallback).split("; "))
    if code == "task_type":
        params["task_type"] = label(tr, "task_type", params.get("task_type", ""))
        params["why"] = _verdict(params.get("why", ""), tr)
    if code == "too_big":
        params["variant"] = tr.reason(params.get("variant", ""))
    try:
        return tr.reason(template).format(**params)
    except (KeyError, IndexError):
        return tr.reason(fallback)


def _verdict(why: str, tr: Translator) -> str:
    words = why.split()
    if len(words) == 7 and words[:2] == ["relative", "performance"]:  # "relative performance 0.05 is below 0.1"
        return tr.reason(VERDICT_TEXTS[0]).format(perf=words[2], minimum=words[6])
    return tr.reason(why)
