"""Labels of the tenants & quotas page (/tenants)."""

MESSAGES: dict[str, dict[str, str]] = {
    "tenants.title": {"en": "Tenants & quotas", "zh-CN": "租户与配额"},
    "tenants.intro": {
        "en": "The tenant tree with each quota's nominal amount, what is in use, borrowed from siblings, lent to them, and the headroom left.",
        "zh-CN": "租户树及各配额的额定量、已用量、向同级借入量、借出量与剩余可用量。",
    },
    "tenants.subtree": {"en": "Subtree", "zh-CN": "子树"},
    "tenants.all": {"en": "all visible tenants", "zh-CN": "全部可见租户"},
    "tenants.scope_note": {
        "en": "You see the tenants you work in, and the quotas above them that also count their usage.",
        "zh-CN": "这里显示您所在的租户，以及同样计入其用量的上级配额。",
    },
    "tenants.no_inventory": {
        "en": "The tenant list is not available to you; only tenants that have quotas are shown.",
        "zh-CN": "您无权读取租户列表，仅显示设有配额的租户。",
    },
    # Summary cards
    "tenants.card.tenants": {"en": "Tenants", "zh-CN": "租户"},
    "tenants.card.quotas": {"en": "Quotas", "zh-CN": "配额"},
    "tenants.card.borrowing": {"en": "Borrowing", "zh-CN": "正在借入"},
    "tenants.card.lending": {"en": "Lending", "zh-CN": "正在借出"},
    "tenants.card.full": {"en": "No headroom", "zh-CN": "已无余量"},
    # Table
    "tenants.quota": {"en": "Quota", "zh-CN": "配额"},
    "tenants.applies_to": {"en": "Applies to", "zh-CN": "适用范围"},
    "tenants.resource": {"en": "Resource", "zh-CN": "资源"},
    "tenants.nominal": {"en": "Nominal", "zh-CN": "额定"},
    "tenants.used": {"en": "Used", "zh-CN": "已用"},
    "tenants.usage": {"en": "Usage", "zh-CN": "使用率"},
    "tenants.borrowed": {"en": "Borrowed", "zh-CN": "借入"},
    "tenants.lent": {"en": "Lent", "zh-CN": "借出"},
    "tenants.headroom": {"en": "Headroom", "zh-CN": "余量"},
    "tenants.borrowing_limit": {"en": "Borrowing limit", "zh-CN": "借入上限"},
    "tenants.lending_limit": {"en": "Lending limit", "zh-CN": "借出上限"},
    "tenants.unlimited": {"en": "no limit", "zh-CN": "不限"},
    "tenants.every_env": {"en": "every environment", "zh-CN": "所有环境"},
    "tenants.every_type": {"en": "every task type", "zh-CN": "所有任务类型"},
    "tenants.no_quota": {"en": "No quota of its own.", "zh-CN": "没有自己的配额。"},
    "tenants.within": {"en": "Quotas above it: {names}.", "zh-CN": "上级配额：{names}。"},
    "tenants.unbounded": {"en": "No quota applies: limited only by free capacity.", "zh-CN": "不受配额限制，仅受空闲容量约束。"},
    "tenants.weight": {"en": "fair-share weight {w}", "zh-CN": "公平份额权重 {w}"},
    "tenants.none": {"en": "No tenant to show.", "zh-CN": "没有可显示的租户。"},
    "tenants.usage_title": {"en": "{used} of {nominal} ({pct}%)", "zh-CN": "已用 {used} / 额定 {nominal}（{pct}%）"},
    "tenants.legend": {
        "en": "Bar: blue is use within nominal, orange is borrowed beyond it.",
        "zh-CN": "进度条：蓝色为额定范围内的用量，橙色为超出额定的借入量。",
    },
    # Resources that are not device models, pools or classes
    "tenants.resource.a100-equivalent": {"en": "A100-equivalents", "zh-CN": "A100 等效算力"},
    "tenants.resource.cpu-cores": {"en": "CPU cores", "zh-CN": "CPU 核"},
    "tenants.resource.memory-gb": {"en": "memory (GB)", "zh-CN": "内存（GB）"},
}
