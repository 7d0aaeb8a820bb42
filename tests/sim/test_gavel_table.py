"""bench/gavel_table.py's target: the issue's comparison (every Gavel policy without space
sharing) and, beside it, the one against the policies that read no remaining steps."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
_spec = importlib.util.spec_from_file_location("gavel_table", BENCH / "gavel_table.py")
gavel_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gavel_table)


def _row(jct: float, makespan: float) -> dict:
    return {"avg_jct_hours": jct, "makespan_hours": makespan, "jobs_completed": 100}


def test_the_policies_that_read_remaining_steps_are_the_oracle_ones() -> None:
    for policy in ("allox", "finish_time_fairness", "finish_time_fairness_perf", "min_total_duration_perf", "min_total_duration_packed"):
        assert gavel_table.reads_remaining_steps(policy), policy
    for policy in ("max_min_fairness_perf", "max_sum_throughput_perf", "gandiva", "fifo", "isolated", "max_min_fairness_water_filling"):
        assert not gavel_table.reads_remaining_steps(policy), policy


def test_the_target_names_the_best_policy_with_and_without_the_oracle() -> None:
    gavel = {
        "allox": _row(4.32, 10.26),
        "max_min_fairness_packed": _row(4.0, 7.0),  # space sharing: not compared
        "max_sum_throughput_perf": _row(5.15, 11.16),
        "max_min_fairness_perf": _row(5.68, 9.05),
    }
    target = gavel_table.target_of(gavel, {"avg_jct_hours": 4.54, "makespan_hours": 10.15})
    assert target["best_unpacked_policy"] == "allox" and target["best_unpacked_reads_remaining_steps"]
    assert not target["avg_jct_met"] and not target["makespan_met"]  # 4.54 > 4.32; 10.15 > 1.05 × 9.05
    assert target["best_without_remaining_steps_policy"] == "max_sum_throughput_perf"
    assert target["avg_jct_met_without_remaining_steps"]
    assert target["makespan_bound_hours"] == round(1.05 * 9.05, 3)
