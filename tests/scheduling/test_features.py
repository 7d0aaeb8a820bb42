"""Features a task requires: the chip's, as enabled by the pool's software stack, plus
node-level features from `hetpool.io/feature.<name>` labels."""

from __future__ import annotations

from hetpool.catalog.devices import DeviceCatalog
from hetpool.catalog.features import effective_features
from hetpool.core.inventory import SoftwareStack
from hetpool.scheduling.assign import assign
from hetpool.scheduling.filters import REASON_FEATURES
from tests.scheduling.factories import compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
CATALOG = DeviceCatalog.builtin()
OLD_TORCH = {"driver": "535.104.05", "runtime": {"name": "cuda", "version": "12.2"}, "frameworks": {"pytorch": "2.1.2"}}
NEW_TORCH = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}, "frameworks": {"pytorch": "2.4.1", "vllm": "0.6.3"}}


def _stack(doc: dict) -> SoftwareStack:
    return SoftwareStack.model_validate(doc)


def test_the_stack_decides_whether_a_chip_feature_is_usable() -> None:
    a100 = CATALOG.get("nvidia-a100-80g")
    old = effective_features(a100, _stack(OLD_TORCH))
    assert "flash-attention" not in old.features and "needs >=2.2" in old.missing["flash-attention"]
    assert "fused-moe" not in old.features and "vllm is not installed" in old.missing["fused-moe"]
    new = effective_features(a100, _stack(NEW_TORCH))
    assert {"flash-attention", "fused-moe", "bf16"} <= new.features and not new.missing
    # The chip has no FP8: no stack gives it.
    assert "fp8" not in new.features
    # A V100 has no flash-attention whatever is installed.
    assert "flash-attention" not in effective_features(CATALOG.get("nvidia-v100-32g"), _stack(NEW_TORCH)).features
    # Ascend: the CANN version gates fused attention.
    old_cann = _stack({"runtime": {"name": "cann", "version": "6.3.RC2"}, "frameworks": {"torch_npu": "1.11.0"}})
    assert "flash-attention" not in effective_features(CATALOG.get("ascend-910b3"), old_cann).features
    # No declared stack: the chip's feature is kept, with a note saying it was not judged.
    unjudged = effective_features(a100, None)
    assert "flash-attention" in unjudged.features and "not judged" not in unjudged.notes["flash-attention"]
    assert "declares no software stack" in unjudged.notes["flash-attention"]


def test_task_needing_flash_attention_avoids_the_pool_whose_stack_lacks_it() -> None:
    nodes = [node("old0", "nvidia-a100-80g", stack=OLD_TORCH), node("new0", "nvidia-a100-80g", stack=NEW_TORCH)]
    pools = [pool("a100-old", "nvidia-a100-80g", ["old0"]), pool("a100-new", "nvidia-a100-80g", ["new0"])]
    spec = task(devices={"class": "gpu", "count": 1}, features=["flash-attention"], image="img")
    result = assign(make_snapshot(nodes, pools), spec, CHECK)
    assert result.feasible and result.placements[0].node == "new0"
    only_old = assign(make_snapshot(nodes[:1], pools[:1]), spec, CHECK)
    assert not only_old.feasible and only_old.reasons[REASON_FEATURES] == 1
    assert "flash-attention (pytorch 2.1.2 installed; needs >=2.2)" in only_old.attempts[0].details[0]


def test_node_label_features_are_checked_per_node() -> None:
    ib = {"hetpool.io/feature.infiniband": "true"}
    nodes = [node("g0", "nvidia-h100"), node("g1", "nvidia-h100", labels=ib)]
    snap = make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0", "g1"])])
    result = assign(snap, task(devices={"class": "gpu", "count": 1}, features=["infiniband"]), CHECK)
    assert result.feasible and result.placements[0].node == "g1" and result.reasons[REASON_FEATURES] == 1
    # Two workers need two InfiniBand nodes' worth of devices: g1 alone has 8, so 2 × 8 fail.
    two = assign(snap, task(devices={"class": "gpu", "count": 8}, features=["infiniband"], workers=2), CHECK)
    assert not two.feasible
    none = make_snapshot(nodes[:1], [pool("h100", "nvidia-h100", ["g0"])])
    assert assign(none, task(devices={"class": "gpu", "count": 1}, features=["infiniband"]), CHECK).reasons[REASON_FEATURES] == 1
