"""bench/gavel_compare.py on the small Gavel samples in tests/sim/data."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

DATA = Path(__file__).parent / "data"
SCRIPT = Path(__file__).parents[2] / "bench" / "gavel_compare.py"


def load():
    spec = importlib.util.spec_from_file_location("gavel_compare", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gavel_compare_runs_a_trace_and_saves_json(tmp_path: Path, capsys) -> None:
    gc = load()
    trace = DATA / "cont_multi_n200_lam600_s0.head20.trace"
    argv = ["--trace", str(trace), "--throughputs", str(DATA / "gavel-throughputs.sample.json"), "--results", str(tmp_path), "-o", "json"]
    assert gc.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    saved = json.loads((tmp_path / "gavel_cont_multi_n200_lam600_s0.head20.json").read_text())
    assert out == saved
    assert out["jobs"] == out["jobs_completed"] == 20
    assert out["avg_jct_hours"] > 0 and out["makespan_hours"] >= out["p90_jct_hours"] > 0
    assert out["preemptions"] == 0 and out["policy"]["classes"]["gpu"]["preemption"] is False
    assert out["gavel"] is None  # a sample trace has no Gavel figures


def test_shaping_orders_by_speed_and_prunes_slow_devices() -> None:
    gc = load()
    throughputs = gc.load_throughputs(DATA / "gavel-throughputs.sample.json")
    tasks = gc.read_gavel_trace(DATA / "static_n100_s0.head20.trace", throughputs)
    args = gc.main.__globals__["argparse"].Namespace(
        shape="fallback", advantage=0.0, prune=0.3, tenants="per-job", sjf=[1.5, 3.0], sjf_by="hours", longest_first=False, checkpoint=False
    )
    for before, after in zip(tasks, gc.shape(tasks, args, gc.typical_speeds(throughputs)), strict=True):
        perf = before.spec.relative_performance
        assert after.spec.fallback and not after.spec.any_of
        assert [perf[m] for m in after.spec.fallback] == sorted((perf[m] for m in after.spec.fallback), reverse=True)
        assert all(perf[m] >= 0.3 * max(perf.values()) for m in after.spec.fallback)
        assert after.spec.tenant == f"gavel/jobs/{before.id}"
        hours = gc.best_hours(before)
        assert after.spec.priority == ("critical" if hours <= 1.5 else "high" if hours <= 3 else "normal")
        assert after.work_s == before.work_s and after.arrival_s == before.arrival_s
