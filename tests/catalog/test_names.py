"""Unknown device models, pools and frameworks are named with their close matches."""

from __future__ import annotations

from hetpool.catalog.devices import DeviceCatalog
from hetpool.catalog.names import candidate_problems, close_matches, package_key
from tests.scheduling.factories import task

MODELS = [m.name for m in DeviceCatalog.builtin()]
POOLS = ["a100", "h800", "ascend"]


def test_a_mistyped_fallback_entry_is_named_with_close_matches() -> None:
    spec = task(devices={"class": "gpu", "count": 1}, fallback=["h800", "nvidia-a100-80gb"])
    [problem] = candidate_problems(spec, MODELS, POOLS)
    assert problem["loc"] == "fallback[1]" and problem["close_matches"][0] == "nvidia-a100-80g"
    assert "did you mean nvidia-a100-80g" in problem["msg"]


def test_any_of_and_devices_models_are_checked_pools_only_where_allowed() -> None:
    spec = task(devices={"class": "gpu", "models": ["a100"], "count": 1}, any_of=["h800", "nvidia-h80"])
    problems = {p["loc"]: p for p in candidate_problems(spec, MODELS, POOLS)}
    # devices.models names device models (not pools); any_of may name either.
    assert set(problems) == {"per_worker.devices.models[0]", "any_of[1]"}
    assert "nvidia-h800" in problems["any_of[1]"]["close_matches"]
    assert candidate_problems(task(devices={"class": "gpu", "count": 1}, any_of=["h800", "nvidia-a100-80g"]), MODELS, POOLS) == []


def test_names_compare_as_package_names() -> None:
    assert package_key(" Torch_NPU ") == package_key("torch-npu") == package_key("torch.npu")
    assert close_matches("pytorh", ["pytorch", "paddle", "jax"]) == ["pytorch"]
    assert close_matches("cobol", ["pytorch", "paddle", "jax"]) == []
