"""Labels of the audit page (/audit)."""

MESSAGES: dict[str, dict[str, str]] = {
    "audit.title": {"en": "Audit trail", "zh-CN": "审计记录"},
    "audit.intro": {
        "en": "Every change and sign-in, hash-chained: editing, deleting or inserting an event breaks the chain from there on.",
        "zh-CN": "所有变更与登录都记录在哈希链中：任何事件被修改、删除或插入，链条都会从该处断开。",
    },
    # Filters
    "audit.actor": {"en": "Actor", "zh-CN": "操作者"},
    "audit.action": {"en": "Action", "zh-CN": "操作"},
    "audit.action_hint": {"en": "exact, or a prefix ending in * (task.*)", "zh-CN": "精确匹配，或以 * 结尾的前缀（如 task.*）"},
    "audit.object_kind": {"en": "Object kind", "zh-CN": "对象类型"},
    "audit.object_id": {"en": "Object id", "zh-CN": "对象 ID"},
    "audit.object": {"en": "Object", "zh-CN": "对象"},
    "audit.since": {"en": "From", "zh-CN": "起始时间"},
    "audit.until": {"en": "Until", "zh-CN": "截止时间"},
    "audit.time_hint": {"en": "ISO time (UTC) or a duration back, e.g. 2h", "zh-CN": "ISO 时间（UTC）或距今时长，如 2h"},
    "audit.q": {"en": "Free text", "zh-CN": "全文搜索"},
    "audit.q_hint": {
        "en": "Free text is matched by the dashboard in the events it reads (up to {n} per page); the other filters are applied by the API.",
        "zh-CN": "全文搜索由看板在读取到的事件中匹配（每页最多检索 {n} 条）；其余筛选条件由 API 执行。",
    },
    "audit.order": {"en": "Order", "zh-CN": "排序"},
    "audit.order.desc": {"en": "Newest first", "zh-CN": "最新在前"},
    "audit.order.asc": {"en": "Oldest first", "zh-CN": "最早在前"},
    "audit.limit": {"en": "Per page", "zh-CN": "每页条数"},
    "audit.bad_filter": {"en": "Filter not accepted: {message}", "zh-CN": "筛选条件无效：{message}"},
    # Chain status
    "audit.chain_ok": {
        "en": "Chain verified ✓ — {n} events, head #{head} ({hash}…)",
        "zh-CN": "哈希链校验通过 ✓ — 共 {n} 条事件，链头 #{head}（{hash}…）",
    },
    "audit.chain_empty": {"en": "Chain verified ✓ — no events yet", "zh-CN": "哈希链校验通过 ✓ — 暂无事件"},
    "audit.chain_broken": {
        "en": "Chain broken at event #{id} ({n} events): {problem}",
        "zh-CN": "哈希链在事件 #{id} 处断裂（共 {n} 条事件）：{problem}",
    },
    "audit.chain_around": {"en": "Show the events around it", "zh-CN": "查看附近的事件"},
    # Table
    "audit.time": {"en": "Time (UTC)", "zh-CN": "时间（UTC）"},
    "audit.changes": {"en": "Changes", "zh-CN": "变更摘要"},
    "audit.details": {"en": "Before / after", "zh-CN": "变更前后"},
    "audit.show": {"en": "show", "zh-CN": "展开"},
    "audit.before": {"en": "Before", "zh-CN": "变更前"},
    "audit.after": {"en": "After", "zh-CN": "变更后"},
    "audit.more_changes": {"en": "+{n} more", "zh-CN": "另有 {n} 项"},
    "audit.no_change": {"en": "no field changed", "zh-CN": "无字段变化"},
    "audit.only_this_actor": {"en": "Only events by this actor", "zh-CN": "只看此操作者的事件"},
    "audit.only_this_object": {"en": "Only events of this object", "zh-CN": "只看此对象的事件"},
    "audit.none": {"en": "No events match.", "zh-CN": "没有匹配的事件。"},
    "audit.shown": {"en": "{n} events shown", "zh-CN": "显示 {n} 条事件"},
    # Paging
    "audit.older": {"en": "Older events →", "zh-CN": "更早的事件 →"},
    "audit.later": {"en": "Later events →", "zh-CN": "更晚的事件 →"},
    "audit.to_newest": {"en": "← Newest", "zh-CN": "← 最新"},
    "audit.to_oldest": {"en": "← Oldest", "zh-CN": "← 最早"},
    "audit.scan_stopped": {
        "en": "Read {n} events without filling the page; continue to search further.",
        "zh-CN": "已读取 {n} 条事件仍未填满本页；可继续检索。",
    },
    # Export
    "audit.export_csv": {"en": "Export CSV", "zh-CN": "导出 CSV"},
    "audit.export_jsonl": {"en": "Export JSON lines", "zh-CN": "导出 JSON Lines"},
    "audit.export_note": {
        "en": "Exports hold every event matching the filters (not only this page), without the free text.",
        "zh-CN": "导出内容为符合筛选条件的全部事件（不限于本页），不含全文搜索条件。",
    },
    # Not allowed
    "audit.denied_title": {"en": "Not allowed", "zh-CN": "无权访问"},
    "audit.denied": {"en": "You may not read the audit trail: {message}", "zh-CN": "你无权查看审计记录：{message}"},
    "audit.denied_help": {
        "en": "The audit trail is for platform administrators and auditors; ask an administrator for the auditor role.",
        "zh-CN": "审计记录仅对平台管理员和审计员开放；如需查看，请联系管理员授予审计员（auditor）角色。",
    },
}
