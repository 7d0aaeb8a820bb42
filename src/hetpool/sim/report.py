"""Turning a simulation into numbers (JSON) and pictures (PNG).

JCT is completion − arrival, wait is start − arrival, makespan is the last completion
counted from t = 0 (as Gavel reports it). Utilisation per pool is time-weighted over the
samples: busy devices / devices. The pictures need matplotlib, an optional extra
(`pip install 'hetpool[plot]'`): the server and the numbers never do.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from hetpool.core.errors import HetpoolError
from hetpool.sim.engine import SimResult, TaskOutcome

PLOT_INSTALL_HINT = "pip install 'hetpool[plot]'"


class PlottingUnavailableError(HetpoolError):
    """Plots were asked for, but matplotlib (the `plot` extra) is not installed."""

    code = "plotting_unavailable"


def pyplot():
    """matplotlib.pyplot drawing to files, or PlottingUnavailableError naming the extra.
    Callers that will plot call it before a long simulation, so a missing extra fails fast."""
    try:  # optional third-party package: the `plot` extra
        import matplotlib
    except ImportError:
        raise PlottingUnavailableError(f"plots need matplotlib, which is not installed: {PLOT_INSTALL_HINT}") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _stats(values: list[float], scale: float = 1.0) -> dict:
    if not values:
        return {"count": 0, "avg": None, "p50": None, "p90": None, "p99": None}
    arr = np.asarray(values, dtype=np.float64) / scale
    return {
        "count": len(values),
        "avg": round(float(arr.mean()), 4),
        "p50": round(float(np.percentile(arr, 50)), 4),
        "p90": round(float(np.percentile(arr, 90)), 4),
        "p99": round(float(np.percentile(arr, 99)), 4),
    }


def utilisation(result: SimResult) -> dict[str, float]:
    """Time-weighted share of each pool's devices in use, from t=0 to the end."""
    totals = defaultdict(float)
    samples = result.samples
    for a, b in zip(samples, samples[1:], strict=False):
        dt = b.t - a.t
        for pool, used in a.busy.items():
            totals[pool] += used * dt
    span = max(result.end_s, 1e-9)
    return {pool: round(totals[pool] / (span * max(n, 1)), 4) for pool, n in result.pool_devices.items()}


def _group(outcomes: list[TaskOutcome], key) -> dict[str, dict]:
    groups: dict[str, list[TaskOutcome]] = defaultdict(list)
    for o in outcomes:
        groups[key(o)].append(o)
    out = {}
    for name, items in sorted(groups.items()):
        waits = [o.wait_s for o in items if o.wait_s is not None]
        jcts = [o.jct_s for o in items if o.jct_s is not None]
        out[name] = {
            "tasks": len(items),
            "completed": len(jcts),
            "wait_hours": _stats(waits, 3600),
            "jct_hours": _stats(jcts, 3600),
            "cost": round(sum(o.cost for o in items), 2),
        }
    return out


def summarize(result: SimResult) -> dict:
    outcomes = list(result.outcomes.values())
    done = [o for o in outcomes if o.end_s is not None]
    started = [o for o in outcomes if o.start_s is not None]
    return {
        "tasks": len(outcomes),
        "completed": len(done),
        "never_started": len(outcomes) - len(started),
        "avg_jct_hours": round(sum(o.jct_s for o in done) / len(done) / 3600, 4) if done else None,
        "jct_hours": _stats([o.jct_s for o in done], 3600),
        "wait_hours": _stats([o.wait_s for o in started], 3600),
        "makespan_hours": round(max(o.end_s for o in done) / 3600, 4) if done else None,
        "fallbacks": sum(o.fallback_used for o in started),
        "preemptions": sum(o.preemptions for o in outcomes),
        # Quotas (SimConfig.quotas): admissions on a sibling's idle quota, and tasks that
        # waited at least one cycle because their quota was spent.
        "borrowed_admissions": sum(o.borrowed for o in outcomes),
        "waited_over_quota": sum(1 for o in outcomes if o.over_quota_cycles),
        "cost": round(sum(o.cost for o in outcomes), 2),
        "utilisation": utilisation(result),
        "per_tenant": _group(outcomes, lambda o: o.tenant),
        "per_task_type": _group(outcomes, lambda o: o.task_type),
        "per_pool": _group([o for o in outcomes if o.pool], lambda o: o.pool),
        "cycles": result.cycles,
        "scheduler_seconds": round(result.core_seconds, 3),
        "simulated_hours": round(result.end_s / 3600, 4),
    }


def plot(result: SimResult, out_dir: Path, title: str = "") -> list[Path]:
    """utilisation.png (per pool over time) and queue.png (queued and running tasks)."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    t = np.array([s.t / 3600 for s in result.samples])
    paths = []
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for pool, devices in sorted(result.pool_devices.items()):
        if devices:
            ax.step(t, [100 * s.busy.get(pool, 0) / devices for s in result.samples], where="post", label=pool)
    ax.set(xlabel="hours", ylabel="devices in use (%)", title=f"{title} utilisation per pool".strip(), ylim=(0, 105))
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    paths.append(out_dir / "utilisation.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 3.5))
    ax.step(t, [s.queued for s in result.samples], where="post", label="queued")
    ax.step(t, [s.running for s in result.samples], where="post", label="running")
    ax.set(xlabel="hours", ylabel="tasks", title=f"{title} queue length".strip())
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "queue.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
