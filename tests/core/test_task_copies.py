"""A changed copy of a task never answers with the original's cached derived values: the
scheduler keys memos by `placement_shape`, and a task waiting for its preferred model is
forecast as a copy restricted to that model (backfill.preferred_only)."""

from __future__ import annotations

from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.backfill import preferred_only


def _task(**extra) -> TaskSpec:
    doc = {"name": "t", "tenant": "org/a", "type": "training", "per_worker": {"devices": {"class": "gpu", "count": 1}}}
    return TaskSpec.model_validate(doc | extra)


def test_the_preferred_only_copy_has_its_own_shape_after_the_original_was_asked() -> None:
    spec = _task(fallback=["nvidia-h100", "nvidia-a100-80g"], runtime_estimate="2h")
    original = spec.placement_shape  # cached on the original, as a cycle does before preferred_only
    preferred = preferred_only(spec)
    assert preferred.fallback == ["nvidia-h100"]
    assert preferred.placement_shape != original
    assert preferred.placement_shape == _task(fallback=["nvidia-h100"], runtime_estimate="2h").placement_shape


def test_a_copy_with_another_estimate_reads_the_new_one() -> None:
    spec = _task(runtime_estimate="2h")
    assert spec.runtime_estimate_s == 7200
    assert spec.with_runtime_estimate("30m").runtime_estimate_s == 1800
    assert spec.with_runtime_estimate(None).runtime_estimate_s is None
    assert spec.copy_with(fallback=["nvidia-h100"]).runtime_estimate_s == 7200
