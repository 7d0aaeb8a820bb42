"""bench/scheduler_throughput.py at a small size, so that the benchmark cannot rot: the
honest mix really has running work, quotas, queues, topology and slices, and reports the
figures docs/scheduling.md quotes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import scheduler_throughput  # noqa: E402


def test_the_honest_mix_runs_with_every_feature_and_reports_its_figures(tmp_path: Path, capsys) -> None:
    out = tmp_path / "st.json"
    small = ["--nodes", "60", "--tasks", "400", "--steady-cycles", "3", "--arrivals", "20", "--max-cycles", "8"]
    small += ["--busy-cycles", "4", "--busy-arrivals", "2"]
    report = scheduler_throughput.main([*small, "-o", "json", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["gc"] == "server"  # the collector as the server sets it
    assert report["mix"] == "honest" and report["running_share_at_start"] >= 0.2 and report["running_at_start"] > 0
    assert report["quotas"] == 33 and report["queues"] == 4 and report["distinct_shapes"] > 100
    assert report["placed_tasks"] > 0 and report["placements_per_s"] > 0
    for key in ("p50_cycle_ms", "p99_cycle_ms", "peak_rss_mib"):
        assert report[key] > 0
    steady = report["steady"]
    assert steady["cycles"] == 3 and steady["arrived"] == 60 and steady["p99_cycle_ms"] > 0
    busy = report["steady_busy"]  # then as back-to-back passes see it, from where the steady state ended
    assert busy["cycles"] == 4 and busy["arrived"] == 8 and busy["step_s"] == 5.0 and busy["p99_cycle_ms"] > 0
    assert busy["end"] > steady["end"]


def test_the_flat_mix_is_the_easy_comparison(tmp_path: Path) -> None:
    small = ["--flat", "--nodes", "40", "--tasks", "200", "--steady-cycles", "0", "--max-cycles", "8"]
    report = scheduler_throughput.main([*small, "--out", str(tmp_path / "f.json")])
    assert report["mix"] == "flat" and report["running_at_start"] == 0 and report["quotas"] == 0 and report["steady"] is None
    assert report["placed_tasks"] > 0
