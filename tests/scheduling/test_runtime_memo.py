"""The slowest runtime per shape (the backfill test's question, asked of thousands of parked
heads a cycle) is kept with the snapshot across cycles while the device models read the
same — the server hands each cycle new model objects — and starts over when a model's
relative performance changes (measured performance written over the catalog's)."""

from __future__ import annotations

from hetpool.catalog.devices import DeviceCatalog
from hetpool.scheduling.cycle_state import slowest_memo
from tests.scheduling.factories import CUDA_STACK, make_snapshot, node, pool


def _models() -> dict:
    return {m.name: m for m in DeviceCatalog.builtin().all()}


def test_kept_for_equal_models_and_dropped_when_performance_changes() -> None:
    snap = make_snapshot([node("g0", "nvidia-h100", 8, stack=CUDA_STACK)], [pool("h100", "nvidia-h100", ["g0"])])
    memo = slowest_memo(snap, _models())
    memo[("shape", "1h")] = 3600.0
    assert slowest_memo(snap, _models()) is memo  # new objects, same content: kept
    changed = _models()
    h100 = changed["nvidia-h100"]
    changed["nvidia-h100"] = h100.model_copy(update={"relative_performance": {k: v * 2 for k, v in h100.relative_performance.items()}})
    fresh = slowest_memo(snap, changed)
    assert fresh is not memo and fresh == {}
