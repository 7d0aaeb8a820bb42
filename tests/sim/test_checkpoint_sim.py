"""Checkpointed work in the simulator: a preempted task resumes with the rest of its work,
a queue's migration rule moves it to a faster idle device, and nothing but `truth` reads
the true durations (the honest comparison of bench/gavel_compare.py depends on it)."""

from __future__ import annotations

import math

import pytest

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec
from hetpool.core.policy import MigrationRule, QueueSpec
from hetpool.core.tasks import TaskSpec
from hetpool.sim.engine import SimConfig, Simulator
from hetpool.sim.trace import TraceTask
from tests.sim.test_gavel_compare import DATA, load

MODELS = {m.name: m for m in DeviceCatalog.builtin().all()}
CHECK = CompatibilityKB.builtin().check
FAST, SLOW = "nvidia-h100", "nvidia-a100-80g"


def _estate():
    nodes = [
        NodeSpec.model_validate({"name": "fast-1", "cluster": "c", "cpu_cores": 64, "memory_gb": 512, "devices": [{"model": FAST, "count": 1}]}),
        NodeSpec.model_validate({"name": "slow-1", "cluster": "c", "cpu_cores": 64, "memory_gb": 512, "devices": [{"model": SLOW, "count": 1}]}),
    ]
    pools = [PoolSpec(name="fast", cluster="c", model=FAST, nodes=["fast-1"]), PoolSpec(name="slow", cluster="c", model=SLOW, nodes=["slow-1"])]
    return [ClusterSpec(name="c")], nodes, pools


def _task(task_id: str, arrival: float, work: dict[str, float], *, checkpoint: bool = True, priority: str = "normal", **fields) -> TraceTask:
    reference = work.get(SLOW, max(work.values()))  # seconds on the slow device (relative performance 1)
    doc = {
        "name": task_id,
        "tenant": "org/t",
        "type": "training",
        "priority": priority,
        "per_worker": {"devices": {"class": "gpu", "count": 1}},
        "fallback": [m for m in (FAST, SLOW) if m in work],
        "relative_performance": {m: reference / s for m, s in work.items()},
        **fields,
    }
    if checkpoint:
        doc["checkpoint"] = {"signal": "SIGTERM", "grace": "60s"}
    return TraceTask(task_id, arrival, TaskSpec.model_validate(doc), reference_s=reference, work_s=work)


@pytest.mark.parametrize(
    ("checkpoint", "write_s", "urgent_start", "low_end"),
    [
        (True, None, 460, 560 + 600 + 60),  # signalled at 400, its 60 s grace spent writing: urgent starts at 460
        (True, 0.0, 400, 500 + 600 + 60),  # an instant checkpoint
        (False, None, 400, 500 + 1000),  # no checkpoint: stopped at once, started over
    ],
)
def test_a_preempted_checkpointed_task_runs_only_the_rest_of_its_work(checkpoint, write_s, urgent_start, low_end) -> None:
    trace = [_task("low", 0, {SLOW: 1000}, priority="low", checkpoint=checkpoint), _task("urgent", 400, {SLOW: 100}, priority="high")]
    outcomes = Simulator(*_estate(), MODELS, CHECK, SimConfig(resume_overhead_s=60, checkpoint_write_s=write_s)).run(trace).outcomes
    low = outcomes["low"]
    assert low.preemptions == 1
    assert outcomes["urgent"].start_s == pytest.approx(urgent_start)  # the preemptor waits for the checkpoint
    assert low.end_s == pytest.approx(low_end)  # 400 s kept (plus a 60 s reload), or started over


def test_a_migration_rule_moves_a_checkpointed_task_to_the_faster_device_once_it_is_idle() -> None:
    rule = MigrationRule(round="360s", overhead="60s", min_gain=0.1)
    queues = [QueueSpec(name="train", migration=rule)]
    # `busy` holds the fast device until 300 s; `long` starts on the slow one (2000 s there, 1000 s on the fast).
    trace = [_task("busy", 0, {FAST: 300}, checkpoint=False), _task("long", 0, {FAST: 1000, SLOW: 2000})]
    moved = Simulator(*_estate(), MODELS, CHECK, SimConfig(queues=queues, resume_overhead_s=60)).run(trace).outcomes["long"]
    stayed = Simulator(*_estate(), MODELS, CHECK, SimConfig(resume_overhead_s=60)).run(trace).outcomes["long"]
    assert stayed.migrations == 0 and stayed.end_s == pytest.approx(2000)
    # The round after the fast device freed (360 s): 18 % done, a 60 s grace writing the
    # checkpoint, then the rest on the fast one plus the reload.
    assert moved.migrations == 1 and moved.preemptions == 0 and moved.model == FAST
    assert moved.end_s == pytest.approx(360 + 60 + 1000 * (1 - 360 / 2000) + 60)


def test_no_move_without_a_checkpoint_or_without_enough_gain() -> None:
    queues = [QueueSpec(name="train", migration=MigrationRule(round="360s", min_gain=0.1))]
    plain = [_task("busy", 0, {FAST: 300}, checkpoint=False), _task("long", 0, {FAST: 1000, SLOW: 2000}, checkpoint=False)]
    assert Simulator(*_estate(), MODELS, CHECK, SimConfig(queues=queues)).run(plain).outcomes["long"].migrations == 0
    # Almost done when the fast device frees: the restart would cost more than it saves.
    nearly = [_task("busy", 0, {FAST: 300}, checkpoint=False), _task("long", 0, {FAST: 380, SLOW: 400})]
    assert Simulator(*_estate(), MODELS, CHECK, SimConfig(queues=queues)).run(nearly).outcomes["long"].migrations == 0


@pytest.mark.parametrize("mode", ["noisy", "none"])
def test_the_scheduler_never_reads_the_true_durations(mode: str) -> None:
    """gavel_compare hands the simulator tasks whose true durations are NaN; they reach it
    through `truth` only. Every job still ends at a finite time (a NaN read anywhere would
    poison the clock), and the run equals one on tasks that carry the real values."""
    gc = load()
    throughputs = gc.load_throughputs(DATA / "gavel-throughputs.sample.json")
    imported = gc.read_gavel_trace(DATA / "cont_multi_n200_lam600_s0.head20.trace", throughputs)
    real = {t.id: t for t in imported}
    sealed = gc.with_estimates(imported, mode, seed=3)
    assert all(math.isnan(t.reference_s) and all(math.isnan(v) for v in t.work_s.values()) for t in sealed)
    if mode == "none":
        assert all(t.spec.runtime_estimate is None for t in sealed)
    else:
        assert any(abs(t.spec.runtime_estimate_s - real[t.id].reference_s) > 60 for t in sealed)
    unsealed = [TraceTask(t.id, t.arrival_s, t.spec, real[t.id].reference_s, real[t.id].work_s) for t in sealed]
    args = gc.main.__globals__["argparse"].Namespace(
        shape="fallback",
        advantage=0.0,
        prune=0.0,
        tenants="shared",
        sjf=[1.5, 3.0],
        sjf_by="hours",
        longest_first=False,
        checkpoint=True,
        checkpoint_grace=60,
    )
    v100, p100, k80 = 4, 4, 4
    documents = gc.gavel_inventory(v100, p100, k80)
    specs = gc.parse_documents([(f"g[{i}]", d) for i, d in enumerate(documents)])
    catalog = DeviceCatalog.builtin().with_models(gc.gavel_device_models())
    models = {m.name: m for m in catalog}
    queues = [QueueSpec(name="gavel", migration=MigrationRule())]

    def run(trace):
        sim = Simulator(
            [s for s in specs if isinstance(s, ClusterSpec)],
            [s for s in specs if isinstance(s, NodeSpec)],
            [s for s in specs if isinstance(s, PoolSpec)],
            models,
            CHECK,
            SimConfig(queues=queues),
        )
        result = sim.run(gc.shape(trace, args, gc.typical_speeds(throughputs)), truth=lambda task, model: real[task.id].actual_seconds(model))
        return {i: (o.start_s, o.end_s, o.model, o.preemptions, o.migrations) for i, o in result.outcomes.items()}

    blind = run(sealed)
    assert all(end is not None and math.isfinite(end) for _, end, *_ in blind.values())
    assert blind == run(unsealed)
