"""Reclaim decisions (pure): idleness from utilisation samples, max runtime, notice then act."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hetpool.core.governance import ReclaimPolicySpec
from hetpool.governance.reclaim import DeviceUse, Notice, TaskFacts, UsageSample, decide, policy_for

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def policy(**fields) -> ReclaimPolicySpec:
    return ReclaimPolicySpec(**{"name": "idle", "idle_for": "30m", "notice": "5m", **fields})


def sample(minutes: float, *utils: float | None, node: str = "gpu-a01") -> UsageSample:
    return UsageSample(at(minutes), tuple(DeviceUse(node, i, u) for i, u in enumerate(utils)))


def facts(**fields) -> TaskFacts:
    base = {"task_id": "t-1", "tenant": "ai-lab/nlp", "task_type": "training", "started_at": at(0), "devices_held": 2}
    return TaskFacts(**{**base, **fields})


def run(policies, samples, start: TaskFacts | None = None):
    """Feed samples pass by pass (each pass at its sample's time), carrying the state as the
    service would; the decisions in order."""
    current = start or facts()
    out = []
    for s in samples:
        d = decide(policies, replace(current, sample=s), s.at)
        out.append(d)
        notice = current.notice
        if d.kind == "notice":
            notice = d.notice
        elif d.kind in ("cancel_notice", "act"):
            notice = None
        current = replace(current, idle_since=d.idle_since, notice=notice)
    return out


def test_idle_for_the_whole_period_gives_notice_then_acts() -> None:
    decisions = run([policy()], [sample(m, 0.0, 2.0) for m in (1, 16, 31, 33, 36)])
    assert [d.kind for d in decisions] == ["none", "none", "notice", "none", "act"]
    assert decisions[0].idle_since == at(1)
    notice = decisions[2].notice
    assert notice.reason == "idle below 5% for 30m on gpu-a01 devices [0,1]"
    assert notice.cause == "idle" and notice.action == "requeue" and notice.act_at == at(36)
    assert decisions[4].reason == notice.reason and decisions[4].notice.action == "requeue"


def test_one_busy_device_resets_idleness() -> None:
    decisions = run([policy()], [sample(1, 0.0, 0.0), sample(20, 0.0, 60.0), sample(25, 0.0, 0.0), sample(50, 1.0, 1.0)])
    assert [d.kind for d in decisions] == ["none", "none", "none", "none"]
    assert decisions[1].idle_since is None and decisions[3].idle_since == at(25)


def test_busy_again_during_the_notice_cancels_it() -> None:
    decisions = run([policy()], [sample(1, 0.0, 0.0), sample(31, 0.0, 0.0), sample(33, 0.0, 91.5), sample(40, 0.0, 0.0)])
    assert [d.kind for d in decisions] == ["none", "notice", "cancel_notice", "none"]
    assert decisions[2].reason == "busy again: 91.5% on gpu-a01 device 1"
    assert decisions[3].idle_since == at(40)  # idleness starts over


def test_idle_notice_waits_for_fresh_evidence_before_acting() -> None:
    decisions = run([policy()], [sample(1, 0.0, 0.0), sample(31, 0.0, 0.0), sample(37, 0.0, None), sample(38, 0.0, 0.0)])
    assert [d.kind for d in decisions] == ["none", "notice", "none", "act"]


def test_missing_or_early_reports_are_no_evidence() -> None:
    # Unreported device, fewer devices than held, a report from before the task started.
    unknown = [sample(5, 0.0, None), sample(10, 0.0), UsageSample(at(-5), sample(0, 0.0, 0.0).devices), None]
    for s in unknown:
        d = decide([policy()], facts(sample=s), at(60))
        assert d.kind == "none" and d.idle_since is None, s
    # A gap neither starts nor ends idleness already observed.
    d = decide([policy()], facts(sample=None, idle_since=at(1)), at(60))
    assert d.kind == "none" and d.idle_since == at(1)
    # No policy watching idleness: never an idle reclaim.
    assert decide([policy(idle_for=None)], facts(sample=sample(60, 0, 0), idle_since=at(1)), at(60)).kind == "none"
    assert decide([], facts(sample=sample(60, 0, 0), idle_since=at(1)), at(60)).kind == "none"


def test_max_runtime_task_then_template_then_policy() -> None:
    lease = policy(idle_for=None, max_runtime="2h", action="stop", notice="10m")
    own = decide([lease], facts(max_runtime="1h"), at(61))
    assert own.kind == "notice" and own.notice.reason == "past max_runtime 1h (ran 1h01m)" and own.notice.action == "stop"
    assert own.notice.act_at == at(71)
    assert decide([lease], facts(), at(119)).kind == "none"
    by_policy = decide([lease], facts(), at(121))
    assert by_policy.notice.reason.startswith("past max_runtime 2h") and by_policy.notice.cause == "max_runtime"
    # Without any policy the task's own lease still holds: stop after the default notice.
    alone = decide([], facts(max_runtime="1h"), at(60))
    assert alone.kind == "notice" and alone.notice.action == "stop" and alone.notice.act_at == at(65)
    # Busy or not, a lease ends.
    notice = alone.notice
    acted = decide([], facts(max_runtime="1h", notice=notice, sample=sample(66, 99.0, 99.0)), at(66))
    assert acted.kind == "act" and acted.reason == notice.reason


def test_lease_notice_withdrawn_when_the_lease_no_longer_applies() -> None:
    notice = Notice("max_runtime", "past max_runtime 1h (ran 1h)", at(60), at(65), "stop", None)
    d = decide([], facts(notice=notice), at(62))
    assert d.kind == "cancel_notice" and "no longer past" in d.reason


def test_most_specific_policy_applies() -> None:
    org = policy(name="org", tenant="ai-lab", idle_for="1h")
    team = policy(name="team", tenant="ai-lab/nlp", idle_for="10m", action="stop")
    other = policy(name="other", tenant="infra")
    typed = policy(name="typed", tenant="ai-lab/nlp", task_types=["inference"])
    everyone = policy(name="all")
    policies = [everyone, org, team, other, typed]
    assert policy_for(policies, "ai-lab/nlp/llm-sft", "training").name == "team"
    assert policy_for(policies, "ai-lab/nlp/llm-sft", "inference").name == "typed"
    assert policy_for(policies, "ai-lab/cv", "training").name == "org"
    assert policy_for(policies, "ai-labx", "training").name == "all"  # a prefix is not a parent
    assert policy_for([other], "ai-lab", "training") is None
    decisions = run(policies, [sample(0, 1.0, 1.0), sample(11, 1.0, 1.0)])
    assert decisions[1].kind == "notice" and decisions[1].notice.action == "stop" and decisions[1].notice.policy == "team"


def test_threshold_is_the_policys() -> None:
    lax = policy(idle_utilisation_pct=50)
    decisions = run([lax], [sample(0, 30.0, 49.9), sample(30, 10.0, 20.0)])
    assert decisions[1].kind == "notice" and "idle below 50%" in decisions[1].notice.reason
    assert run([lax], [sample(0, 30.0, 50.0), sample(30, 10.0, 20.0)])[1].kind == "none"


def test_devices_on_several_nodes_are_named() -> None:
    two_nodes = UsageSample(at(40), (DeviceUse("gpu-a01", 0, 0.0), DeviceUse("gpu-a01", 3, 0.0), DeviceUse("gpu-a02", 1, 0.0)))
    d = decide([policy()], facts(devices_held=3, sample=two_nodes, idle_since=at(5)), at(40))
    assert d.notice.reason == "idle below 5% for 35m on gpu-a01 devices [0,3], gpu-a02 devices [1]"
