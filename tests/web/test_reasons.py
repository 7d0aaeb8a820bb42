"""Why a task waits, in the reader's language: web/reasons.explanation_text renders the
stored explanation (reason code + facts) with the core's `render` and the zh-CN catalog;
an explanation stored before reason codes existed still shows its English summary."""

from __future__ import annotations

from hetpool.scheduling.explain import Explanation, Reason
from hetpool.web.i18n import translator
from hetpool.web.reasons import explanation_text

EN, ZH = translator("en"), translator("zh-CN")


def stored(reason: Reason, counts: dict[str, int] | None = None, **facts) -> dict:
    """The dict the API stores and serves (a task's `pending`, a plan's `explanation`)."""
    return {**Explanation(reason, True, counts or {}, [], facts).to_dict(), "position": 1, "queue": "default"}


def test_waiting_for_capacity_with_its_filter_counts() -> None:
    pending = stored(Reason.WAITING_FOR_CAPACITY, {"not enough free devices": 10, "incompatible software stack": 2}, nodes=12)
    assert explanation_text(pending, EN) == pending["summary"]
    assert explanation_text(pending, EN) == "waiting for capacity — 0/12 nodes available: 10 not enough free devices, 2 incompatible software stack"
    assert explanation_text(pending, ZH) == "等待资源——12 个节点均不可用：10 空闲设备不足, 2 软件栈不兼容"


def test_quota_and_reservation_reasons_keep_their_facts() -> None:
    exceeds = stored(Reason.EXCEEDS_QUOTA, quota="ai-lab/nlp", resource="gpu", requested=16, nominal=8, borrowable=4, borrowing_limit=4)
    assert explanation_text(exceeds, ZH) == "即使借用也超出配额 ai-lab/nlp：gpu 申请 16 > 额定 8 + 可借 4"
    blocked = stored(Reason.BLOCKED_BY_RESERVATION, blocking_task="t-0123456789", start_at="2026-01-01T10:00:00Z")
    assert (
        explanation_text(blocked, ZH) == "受 t-0123456789 的预留所限（开始时间 2026-01-01 10:00:00）：现在启动会推迟该任务"
    )  # the dashboard's time format


def test_a_reservation_without_a_known_start() -> None:
    held = stored(Reason.HOLDS_RESERVATION, {"not enough free devices": 2}, nodes=2, node_count=1, start_at="unknown")
    assert explanation_text(held, EN) == held["summary"]
    assert explanation_text(held, ZH) == "等待资源，已预留 1 个节点（开始时间 未知）——2 个节点均不可用：2 空闲设备不足"


def test_a_filter_reason_with_its_detail_is_translated_part_by_part() -> None:
    counts = {"incompatible software stack: framework not installed": 3, "not enough free devices": 1}
    pending = stored(Reason.NEVER_FITS, counts, nodes=4)
    assert explanation_text(pending, ZH) == "即使资源全部空闲也无处可运行——4 个节点均不可用：3 软件栈不兼容：框架未安装, 1 空闲设备不足"
    assert explanation_text(pending, EN) == pending["summary"]
    assert ZH.reason("incompatible software stack: a node's own words") == "软件栈不兼容：a node's own words"


def test_words_among_the_facts_are_translated_too() -> None:
    backfill = stored(Reason.BACKFILL_OFF, blocking_task="t-1", device_class="npu")
    assert explanation_text(backfill, EN) == "waiting behind t-1: backfill is off for NPU pools"  # the class's label, as elsewhere
    assert explanation_text(backfill, ZH) == "在 t-1 之后等待：NPU 资源池未开启回填"
    preempting = stored(Reason.PREEMPTING, victim_count=2, victim_kind="lower-priority task(s)")
    assert explanation_text(preempting, ZH) == "正在抢占 2 个低优先级任务；待其释放设备后启动"


def test_beyond_the_forecast_horizon_is_said() -> None:
    pending = stored(Reason.WAITING_FOR_CAPACITY, {"not enough free devices": 3}, nodes=3, eta_basis="beyond_horizon", horizon=50)
    assert explanation_text(pending, EN).endswith("; no start within the forecast horizon (50 queued tasks, running work with a known end)")
    assert "在预测范围内（50 个排队任务" in explanation_text(pending, ZH)


def test_old_rows_missing_facts_and_nothing() -> None:
    old = {"summary": "waiting for capacity — 0/3 nodes available: 3 not enough free devices", "reasons": {"not enough free devices": 3}}
    assert explanation_text(old, ZH) == old["summary"]  # no reason code: as stored
    assert explanation_text({"reason": "a-code-from-the-future", "summary": "later"}, ZH) == "later"
    assert explanation_text({"reason": "exceeds_quota", "summary": "x"}, ZH) == "即使借用也超出配额"  # facts lost: the bare reason
    assert explanation_text(None, ZH) == "" and explanation_text({}, EN) == ""
