"""Scheduling configuration objects: named queues and the per-resource-class policy.

`Queue` routes tasks (by task type, template or an explicit `queue:` on the task) into a
line with its own ordering and the pools it may use. `SchedulingPolicy` (one object,
named `default`) carries the rules that may differ per device class — GPU, NPU and
DPU pools need not share one rulebook.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field

from hetpool.core.base import Name, ObjectSpec, SpecModel
from hetpool.core.inventory import DeviceClass, TaskType
from hetpool.core.limits import MAX_QUEUE_ORDER, bounded
from hetpool.core.units import Duration, parse_duration


class MigrationRule(SpecModel):
    """Moving checkpointable work to faster devices as they free up (scheduling/migration.py).

    Every `round`, a running task of the queue that declared `checkpoint` (with resume) may
    be stopped and resumed on a device model where it runs faster, when its expected
    remaining time shrinks by more than `min_gain` of itself after paying `overhead` (the
    restart: loading the checkpoint, warming up) plus its own checkpoint grace. Only devices
    that no queued task could take in that cycle are used."""

    round: Duration = Field(default="6m", description="how often moves are considered (Gavel's rounds are 6 minutes)")
    overhead: Duration = Field(default="60s", description="restart cost of one move, besides the task's checkpoint grace")
    min_gain: bounded(0, le=1) = Field(default=0.1, description="the share of its remaining time a move must save")
    max_moves: int = Field(default=100, ge=1, le=10_000, description="moves per round at most")

    @cached_property
    def round_s(self) -> float:
        return parse_duration(self.round)

    @cached_property
    def overhead_s(self) -> float:
        return parse_duration(self.overhead)


class QueueSpec(ObjectSpec):
    kind: Literal["Queue"] = "Queue"
    name: Name
    task_types: list[TaskType] = Field(default=[], description="task types routed here; empty: any")
    templates: list[Name] = Field(default=[], description="templates routed here; empty: any")
    pools: list[Name] = Field(default=[], description="pools or device models this queue may use; empty: all")
    ordering: Literal["priority-fairshare", "shortest-first", "fifo"] = Field(
        default="priority-fairshare",
        description=(
            "priority-fairshare: priority class, then tenant fair share, then age; shortest-first: the same, but each tenant's"
            " own tasks smallest estimated remaining work (runtime × devices) first (no estimate: last, by age); fifo: strict arrival order"
        ),
    )
    order: int = Field(default=100, ge=-MAX_QUEUE_ORDER, le=MAX_QUEUE_ORDER, description="routing precedence: lower is tried first")
    migration: MigrationRule | None = Field(default=None, description="move checkpointable tasks to faster devices as they free up")


class ClassRule(SpecModel):
    placement: Literal["auto", "pack", "spread"] = Field(default="auto", description="auto: training packs, inference spreads")
    preemption: bool = Field(default=True, description="higher-priority work may evict lower-priority work here")
    backfill: bool = True


class SchedulingPolicySpec(ObjectSpec):
    kind: Literal["SchedulingPolicy"] = "SchedulingPolicy"
    name: Literal["default"] = "default"
    classes: dict[DeviceClass, ClassRule] = Field(default={}, description="rules per device class; missing classes use defaults")
    aging_per_hour: bounded(0, le=100) = Field(default=0.5, description="priority-rank points gained per hour of waiting (no starvation)")
    wait_for_preferred: bool = Field(default=True, description="wait for busy preferred devices when that finishes earlier than a substitute")
    estimate_horizon: int = Field(default=200, ge=0, le=10000, description="pending tasks that get a start-time estimate each cycle")
    estimate_interval: Duration = Field(
        default="30s",
        description=(
            "how often the start-time forecast is recomputed (as Slurm's bf_interval); in between, waiting tasks keep the last"
            " forecast's estimates, dated by `estimated_at`; 0s: every cycle"
        ),
    )
    max_heads_per_cycle: int = Field(
        default=2000,
        ge=0,
        le=1_000_000,
        description="queued tasks decided per cycle (half from the front, half rotating through the rest); 0: all",
    )
    max_preemption_tries: int = Field(
        default=32,
        ge=0,
        le=10000,
        description="waiting heads per cycle that may plan a preemption (each costs placements); the rest try in later cycles",
    )
    park_waiting: bool = Field(
        default=True,
        description="pass over waiting heads until something they could use changes (see docs/scheduling.md, parking)",
    )
    evict_overrunning_backfill: bool = Field(
        default=True,
        description=(
            "work that started while a head waited and has overrun its own estimate by the allowance gives way to the head it"
            " delays (requeued, resumed from its checkpoint if it has one): the bound on how long backfill can delay a head"
        ),
    )
    backfill_overrun_allowance: Duration = Field(
        default="5m", description="how far past its estimate such work may run first (at least; or 10 % of its estimate if more)"
    )
    max_preemptions: int = Field(
        default=3, ge=0, le=1000, description="a task preempted this often is not evicted again (no starvation by preemption)"
    )
    preempt_exempt_time: Duration = Field(
        default="0s",
        description="work that has run less than this is not evicted by priority, reclaim or the backfill bound (Slurm's PreemptExemptTime)",
    )

    @cached_property
    def backfill_overrun_allowance_s(self) -> float:
        return parse_duration(self.backfill_overrun_allowance)

    @cached_property
    def estimate_interval_s(self) -> float:
        return parse_duration(self.estimate_interval)

    @cached_property
    def preempt_exempt_time_s(self) -> float:
        return parse_duration(self.preempt_exempt_time)

    def rule(self, device_class: DeviceClass | None) -> ClassRule:
        # The shared default, not a new model per call: asked once per task per cycle.
        return self.classes.get(DeviceClass.CPU if device_class is None else device_class, _DEFAULT_RULE)


_DEFAULT_RULE = ClassRule()
