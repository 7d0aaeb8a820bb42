"""Translations for the dashboard. Every label has an English and a Simplified Chinese text."""

from __future__ import annotations

LANGUAGES = ("en", "zh-CN")

MESSAGES: dict[str, dict[str, str]] = {
    "title": {"en": "hetpool — heterogeneous compute control plane", "zh-CN": "hetpool — 异构算力统一调度平台"},
    "tagline": {
        "en": "One catalog, one queue, one audit trail across GPUs, NPUs, DPUs and CPUs.",
        "zh-CN": "统一的资源目录、任务入口、审计记录，覆盖 GPU、NPU、DPU 与 CPU。",
    },
    "clusters": {"en": "Clusters", "zh-CN": "集群"},
    "nodes": {"en": "Nodes", "zh-CN": "节点"},
    "pools": {"en": "Pools", "zh-CN": "资源池"},
    "devices": {"en": "Devices", "zh-CN": "设备"},
    "tasks_by_state": {"en": "Tasks by state", "zh-CN": "各状态任务数"},
    "pool": {"en": "Pool", "zh-CN": "资源池"},
    "model": {"en": "Model", "zh-CN": "型号"},
    "class": {"en": "Class", "zh-CN": "类别"},
    "busy": {"en": "Busy", "zh-CN": "占用"},
    "total": {"en": "Total", "zh-CN": "总数"},
    "api_docs": {"en": "API documentation", "zh-CN": "API 文档"},
    "node_health": {"en": "Nodes needing attention", "zh-CN": "需关注的节点"},
    "all_nodes_ready": {"en": "All reported nodes are ready and their devices healthy.", "zh-CN": "所有上报的节点均就绪，设备健康。"},
    "node": {"en": "Node", "zh-CN": "节点"},
    "cluster": {"en": "Cluster", "zh-CN": "集群"},
    "status": {"en": "Status", "zh-CN": "状态"},
    "reason": {"en": "Reason", "zh-CN": "原因"},
    "source": {"en": "Reported by", "zh-CN": "上报来源"},
    "abnormal_devices": {"en": "Abnormal devices", "zh-CN": "异常设备"},
    "state.ready": {"en": "ready", "zh-CN": "就绪"},
    "state.draining": {"en": "draining", "zh-CN": "排空中"},
    "state.drained": {"en": "drained", "zh-CN": "已排空"},
    "state.down": {"en": "down", "zh-CN": "宕机"},
    "state.offline": {"en": "offline", "zh-CN": "离线"},
    "state.unknown": {"en": "unknown", "zh-CN": "未知"},
    "language": {"en": "中文", "zh-CN": "English"},
    "placeholder": {
        "en": "This is a placeholder home page; the full operations dashboard is on the roadmap.",
        "zh-CN": "这是临时首页，完整的运营看板正在开发中。",
    },
}


def pick_language(query_lang: str | None, cookie_lang: str | None, accept_language: str | None) -> str:
    for candidate in (query_lang, cookie_lang):
        if candidate in LANGUAGES:
            return candidate
    if accept_language and accept_language.lower().startswith("zh"):
        return "zh-CN"
    return "en"


def translator(lang: str):
    return lambda key: MESSAGES[key][lang]
