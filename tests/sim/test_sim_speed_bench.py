"""bench/sim_speed.py at a small size, so that the benchmark cannot rot: every task of its
trace completes, and the trace asks no pool for more than --load of what it can run (the
overloaded trace of before 2026-12-07 stays available as --whole-estate-load)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import sim_speed  # noqa: E402

from hetpool.catalog.compat import CompatibilityKB  # noqa: E402
from hetpool.catalog.devices import DeviceCatalog  # noqa: E402
from hetpool.sim.engine import SimConfig, Simulator  # noqa: E402


def _snapshot(nodes: int):
    models = {m.name: m for m in DeviceCatalog.builtin().all()}
    clusters, node_specs, pools = sim_speed.inventory(nodes)
    return Simulator(clusters, node_specs, pools, models, CompatibilityKB.builtin().check, SimConfig()).snapshot


def _worst_demand(snap, rates: list[float]) -> float:
    """The most any set of shapes asks of the pools it may use (work arriving ÷ their
    capacity, Hall's condition): above 1, no schedule keeps up and the queue grows."""
    check = CompatibilityKB.builtin().check
    capacity, work = [], []
    for spec, rate, (_, doc, hours) in zip(sim_speed.shape_specs(), rates, sim_speed.SHAPES, strict=True):
        capacity.append(
            {
                pool.name: float(snap.row_total[snap.row_pool == i].sum()) * pool.model.perf_for(spec.task_type)
                for i, pool in enumerate(snap.pools)
                if sim_speed.assign(snap, spec, check, allowed_pools={pool.name}, explain=False).feasible
            }
        )
        work.append(rate * doc.get("workers", 1) * doc["per_worker"]["devices"]["count"] * hours * 3600)
    worst = 0.0
    for size in range(1, len(work) + 1):
        for subset in itertools.combinations(range(len(work)), size):
            pools = {name: max(capacity[i].get(name, 0.0) for i in subset) for i in subset for name in capacity[i]}
            worst = max(worst, sum(work[i] for i in subset) / sum(pools.values()))
    return worst


def test_every_pool_is_asked_for_load_of_its_capacity_and_none_for_more() -> None:
    snap = _snapshot(200)
    rates = sim_speed.arrival_rates(snap, CompatibilityKB.builtin().check, 0.8)
    assert all(r > 0 for r in rates)  # every shape of the mix arrives
    assert _worst_demand(snap, rates) <= 0.8 + 1e-9
    # The old rate (every accelerator, fixed shares) asks the one pool the MindSpore gangs
    # can run on for far more than it has: the queue then grows without bound.
    accelerators = float(snap.row_total.sum())
    mean = sum(share * doc.get("workers", 1) * doc["per_worker"]["devices"]["count"] * hours for share, doc, hours in sim_speed.SHAPES)
    old = [share * 0.8 * accelerators / (mean * 3600) for share, _, _ in sim_speed.SHAPES]
    assert _worst_demand(snap, old) > 2.0


def test_a_small_run_completes_every_task_and_reports_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "ss.json"
    report = sim_speed.main(["--nodes", "100", "--tasks", "300", "-o", "json", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["completed"] == 300 and report["load_basis"] == "each pool"
    assert report["wall_seconds"] > 0 and report["peak_rss_mib"] > 0 and report["cycles"] > 0
    assert abs(sum(report["mix"]) - 1.0) < 0.01
