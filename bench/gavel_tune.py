"""Choose gavel_compare's operator settings on a trace the comparison does not use.

The four traces of the comparison (gavel_compare.TRACES) must not pick the settings they
are judged with. This script grids the few settings an operator would set — the queue's
ordering (priority-fairshare or shortest-first), SJF priority buckets from the runtime
estimate, aging, preemption, the migration rule's minimum gain — on Gavel's `minimize_makespan` trace (the fifth trace shipped with Gavel, absent from
GAVEL_RESULTS.tsv), with `--estimates noisy` over three seeds, and picks the setting with
the lowest mean average JCT among those whose mean makespan is within 5 % of the grid's
best makespan. It prints the grid and saves it to bench/results/gavel_tuning.json.

    python bench/gavel_tune.py
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
TUNING_TRACE = "minimize_makespan"
GRID = {
    "ordering": ["priority-fairshare", "shortest-first"],
    "sjf": ["", "1.5,3", "3,6", "1,2,4"],
    "aging": [0.5, 2.0],
    "preemption": [False, True],
    "min_gain": [0.05, 0.2],
}


def _compare():
    spec = importlib.util.spec_from_file_location("gavel_compare", HERE / "gavel_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate(gc, settings: dict, seeds: list[int], estimates: str) -> dict:
    """Mean average JCT and makespan of one setting over the seeds, on the tuning trace."""
    runs = []
    for seed in seeds:
        flags = ["--trace", TUNING_TRACE, "--estimates", estimates, "--seed", str(seed), "--results", "/tmp/hetpool-gavel-tune"]
        flags += ["--ordering", settings["ordering"], "--sjf", settings["sjf"], "--aging", str(settings["aging"])]
        flags += ["--preemption" if settings["preemption"] else "--no-preemption", "--min-gain", str(settings["min_gain"])]
        flags += ["--advantage", str(settings.get("advantage", 0.0))]
        runs.append(gc.run_trace(gc.resolve(TUNING_TRACE), gc.parse_args(flags)))
    row = dict(settings)
    row["avg_jct_hours"] = round(statistics.mean(r["avg_jct_hours"] for r in runs), 3)
    row["makespan_hours"] = round(statistics.mean(r["makespan_hours"] for r in runs), 3)
    print(json.dumps(row), flush=True)
    return row


def choose(rows: list[dict]) -> dict:
    """The lowest mean average JCT among rows whose makespan is within 5 % of the best."""
    best_makespan = min(r["makespan_hours"] for r in rows)
    eligible = [r for r in rows if r["makespan_hours"] <= 1.05 * best_makespan]
    return min(eligible, key=lambda r: (r["avg_jct_hours"], r["makespan_hours"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--estimates", default="noisy", choices=["exact", "noisy", "none"])
    ap.add_argument("--results", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    gc = _compare()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = [evaluate(gc, dict(zip(GRID, values, strict=True)) | {"advantage": 0.0}, seeds, args.estimates) for values in itertools.product(*GRID.values())]
    chosen = choose(rows)
    args.results.mkdir(parents=True, exist_ok=True)
    out = {"trace": TUNING_TRACE, "estimates": args.estimates, "seeds": seeds, "grid": rows, "chosen": chosen}
    (args.results / "gavel_tuning.json").write_text(json.dumps(out, indent=2) + "\n")
    print("chosen:", json.dumps(chosen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
