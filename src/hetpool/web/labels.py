"""Labels for values that come from data (a task state, a device class, an approval rule …):
a template shows `label("task_state", task.state)`, which looks the value up here and translates
it; a value with no label is shown as it is. N_/C_ only mark the English text for extraction
(`make i18n`); the catalogs under web/locale translate it."""

from __future__ import annotations

from typing import Any

from hetpool.web.i18n import C_, N_, Message, Translator

LABELS: dict[str, dict[str, Message]] = {
    "approval_state": {
        "pending": N_("pending"),
        "approved": N_("approved"),
        "rejected": N_("rejected"),
        "expired": N_("expired"),
        "withdrawn": N_("withdrawn"),
    },
    "approval_kind": {
        "task": N_("task"),
        "quota": N_("quota change"),
        "budget": N_("budget change"),
        "approvalpolicy": N_("approval policy change"),
    },
    "task_type": {
        "training": N_("training"),
        "inference": N_("inference"),
        "batch-inference": N_("batch inference"),
        "preprocessing": N_("preprocessing"),
        "offload": N_("offload"),
        "general": N_("general"),
    },
    "approval_rule": {
        "over_quota": N_("over quota"),
        "reserved_pool": N_("reserved pool"),
        "max_devices": N_("many devices"),
        "max_runtime": N_("long runtime"),
        "environment": N_("environment"),
        "budget_exceeded": N_("budget exceeded"),
        "quota_change": N_("quota change"),
        "governance_change": N_("loosens governance"),
    },
    "device_class": {
        "gpu": N_("GPU"),
        "npu": N_("NPU"),
        "dpu": N_("DPU"),
        "cpu": N_("CPU"),
    },
    "environment": {
        "dev": N_("dev"),
        "test": N_("test"),
        "prod": N_("prod"),
    },
    "priority": {
        "low": N_("low"),
        "normal": N_("normal"),
        "high": N_("high"),
        "critical": N_("critical"),
    },
    "node_state": {
        "ready": N_("ready"),
        "draining": N_("draining"),
        "drained": N_("drained"),
        "down": N_("down"),
        "offline": N_("offline"),
        "unknown": N_("unknown"),
    },
    "pool_priority": {
        "low": N_("low"),
        "normal": N_("normal"),
        "high": N_("high"),
        "critical": N_("critical"),
    },
    "task_state": {
        "pending_approval": N_("pending approval"),
        "queued": N_("queued"),
        "admitted": N_("admitted"),
        "dispatched": N_("dispatched"),
        "running": N_("running"),
        "succeeded": N_("succeeded"),
        "failed": N_("failed"),
        "cancelled": N_("cancelled"),
        "preempted": N_("preempted"),
        "unknown": N_("unknown"),
    },
    "attempt_outcome": {
        "fit": N_("fits"),
        "no-fit": N_("does not fit"),
        "skipped": N_("not tried"),
    },
    "capacity_metric": {
        "wait_avg_hours": N_("Average wait (h)"),
        "wait_p50_hours": N_("p50 wait (h)"),
        "wait_p90_hours": N_("p90 wait (h)"),
        "jct_avg_hours": N_("Average JCT (h)"),
        "jct_p90_hours": N_("p90 JCT (h)"),
        "makespan_hours": N_("Makespan (h)"),
        "never_started": N_("Never started"),
        "preemptions": N_("Preemptions"),
        "cost": N_("Total cost"),
    },
    "quota_card": {
        "tenants": N_("Tenants"),
        "quotas": N_("Quotas"),
        "borrowing": N_("Borrowing"),
        "lending": N_("Lending"),
        "full": N_("No headroom"),
    },
    "candidate_role": {
        "preferred": N_("preferred"),
        "fallback": N_("fallback"),
    },
    "audit_order": {
        "desc": N_("Newest first"),
        "asc": N_("Oldest first"),
    },
    "cost_dimension": {
        "tenant": N_("tenant"),
        "org": N_("organisation"),
        "team": N_("team"),
        "project": N_("project"),
        "env": N_("environment"),
        "type": N_("task type"),
        "pool": N_("pool"),
        "cluster": N_("cluster"),
        "backend": N_("backend"),
        "model": N_("device model"),
    },
    "task_event": {
        "submit": N_("submitted"),
        "cancel_requested": N_("cancel requested"),
        "preempt_requested": N_("preemption requested"),
        "reclaim_notice": N_("reclaim notice"),
        "reclaim": N_("reclaimed"),
        "reclaim_cancelled": N_("reclaim called off"),
    },
    "quota_resource": {
        "a100-equivalent": N_("A100-equivalents"),
        "cpu-cores": N_("CPU cores"),
        "memory-gb": N_("memory (GB)"),
    },
    "cost_card": {
        "total": N_("Total cost"),
        "device_hours": N_("Device-hours"),
        "cpu_core_hours": N_("CPU core-hours"),
        "memory_gib_hours": N_("GiB-hours"),
        "tasks": C_("cost.card.tasks", "Tasks"),
    },
    "time_window": {
        "24h": N_("the last 24 hours"),
        "7d": N_("the last 7 days"),
        "apply": N_("Show"),
        "invalid": N_("Unknown time window “%(value)s”: choose 24h or 7d. Showing the last 24 hours."),
    },
    "plan_outcome": {
        "fits_now": N_("Fits now"),
        "waits": N_("Waits for capacity"),
        "impossible": N_("Cannot run on any pool, even when idle"),
    },
    "capacity_run": {
        "baseline": N_("Baseline (today)"),
        "changed": N_("Changed"),
    },
    "device_status": {
        "total": N_("Total"),
        "idle": N_("Idle"),
        "busy": N_("Busy"),
        "abnormal": N_("Abnormal"),
        "offline": N_("Offline"),
    },
    "approval_outcome": {
        "approved": N_("Approved %(id)s."),
        "rejected": N_("Rejected %(id)s."),
        "refused": N_("%(id)s was not decided: %(message)s"),
    },
    "queue_kind": {
        "pool": N_("Pool"),
        "task_type": N_("Task type"),
        "overview.queue": N_("Queue"),
    },
}


def has_label(table: str, value: str) -> bool:
    return value in LABELS.get(table, {})


def label(tr: Translator, table: str, value: str, /, **values: Any) -> str:
    """The translated label of `value` in `table` (task_state, running → 运行中), or the
    value itself when it has none (a new enum member still shows)."""
    message = LABELS.get(table, {}).get(value)
    return value if message is None else tr.text(message, **values)
