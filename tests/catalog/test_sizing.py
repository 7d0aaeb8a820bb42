"""Goal sizing arithmetic against figures computed by hand (the formulas are in
docs/concepts.md, "Sizing a goal"; the model shapes come from catalog/data/models.yaml).

GiB = 2**30 bytes. A100 80GB: 80 GiB, 90% usable = 72 GiB; dense BF16 312 TFLOPS,
2039 GB/s; the reference device (relative performance 1.0)."""

from __future__ import annotations

import math

import pytest

from hetpool.catalog.devices import REFERENCE_MODEL, DeviceCatalog
from hetpool.catalog.models import builtin_models
from hetpool.catalog.sizing import GIB, Reference, adapter_params, nearest_dense, round_devices, size, workload
from hetpool.core.goal import Goal

CATALOG = DeviceCatalog.builtin()
A100 = CATALOG.get("nvidia-a100-80g")
REF = Reference.of(CATALOG.get(REFERENCE_MODEL))
TABLE = builtin_models()


def sized(goal: dict, device=A100, per_node=8, deadline_s=None, max_devices=None):
    g = Goal.model_validate(goal)
    card = TABLE.get(g.model) if g.model else None
    stand_in = None if card else nearest_dense(list(TABLE.cards.values()), g.params)
    return size(workload(g, card, stand_in), device, per_node, REF, deadline_s, max_devices)


def test_llama31_8b_lora_on_one_a100_by_hand():
    (one,) = sized({"model": "llama3.1-8b", "method": "lora", "tokens": 2e9, "seq_len": 4096})
    # LoRA r=16 on q,k,v,o,gate,up,down: 16·32·(7·4096 + 2·4096 + 2·1024 + 3·14336) = 41,943,040
    assert adapter_params(workload(Goal.model_validate({"model": "llama3.1-8b", "method": "lora"}), TABLE.get("llama3.1-8b"))) == 41_943_040
    assert one.memory_gib["weights"] == pytest.approx(2 * 8.03e9 / GIB)  # 14.96 GiB of frozen bf16 weights
    assert one.memory_gib["adapters"] == pytest.approx(16 * 41_943_040 / GIB)  # 0.625 GiB
    # activations: 2·s·h·L + 34·s·h + 8·s·V = 1,073,741,824 + 570,425,344 + 4,202,692,608 bytes
    assert one.memory_gib["activations"] == pytest.approx(5_846_859_776 / GIB)
    assert (one.devices, one.workers, one.devices_per_worker) == (1, 1, 1)
    assert one.per_device_gib == pytest.approx((16.06e9 + 671_088_640 + 5_846_859_776) / GIB)
    # 6·P·T = 6 · 8.03e9 · 2e9 = 9.636e19 FLOPs at 40% of 312 TFLOPS: 772,115 s = 214.5 h
    assert one.flops == pytest.approx(9.636e19)
    assert one.runtime_s == pytest.approx(9.636e19 / (312e12 * 0.4))
    assert one.runtime_s / 3600 == pytest.approx(214.48, abs=0.01)


def test_a_deadline_adds_the_split_that_meets_it():
    smallest, fast = sized({"model": "llama3.1-8b", "method": "lora", "tokens": 2e9}, deadline_s=48 * 3600)
    assert smallest.variant == "smallest" and fast.variant == "deadline"
    # 772,115 s / 172,800 s -> 5 devices -> an even split within the node: 8
    assert fast.devices == 8 and fast.workers == 1
    assert fast.runtime_s == pytest.approx(smallest.runtime_s / 8)
    assert fast.runtime_s < 48 * 3600


def test_llama31_70b_full_finetune_needs_three_nodes_of_a100_or_an_offload():
    smallest, offload = sized({"model": "llama3.1-70b", "method": "full-finetune", "tokens": 1e9}, max_devices=16)
    # 16 bytes/param · 70.6e9 = 1.1296e12 bytes = 1052.0 GiB of states
    states = smallest.memory_gib["weights"] + smallest.memory_gib["gradients"] + smallest.memory_gib["optimizer"]
    assert states == pytest.approx(16 * 70.6e9 / GIB)
    assert smallest.memory_gib["optimizer"] == pytest.approx(12 * 70.6e9 / GIB)
    # activations: 2·4096·8192·80 + 34·4096·8192 + 8·4096·128256 = 10,712,252,416 bytes = 9.98 GiB
    assert smallest.memory_gib["activations"] == pytest.approx(10_712_252_416 / GIB)
    # ceil(1052.0 / (72 - 9.98)) = 17 devices -> whole nodes: 3 × 8
    assert math.ceil(16 * 70.6e9 / (72 * GIB - 10_712_252_416)) == 17
    assert (smallest.devices, smallest.workers, smallest.devices_per_worker) == (24, 3, 8)
    assert smallest.parallelism["fsdp_shards"] == 24
    # 8·P·T on 24 devices across nodes (×0.9)
    assert smallest.runtime_s == pytest.approx(8 * 70.6e9 * 1e9 / (24 * 312e12 * 0.4 * 0.9))
    # the pool has 16: with Adam's 12 bytes/param in host memory, 4 bytes/param stay on the devices
    assert offload.variant == "offload"
    assert offload.devices == round_devices(math.ceil(4 * 70.6e9 / (72 * GIB - 10_712_252_416)), 8) == 8
    assert offload.host_memory_gib == pytest.approx(12 * 70.6e9 / GIB)
    assert offload.runtime_s == pytest.approx(8 * 70.6e9 * 1e9 / (8 * 312e12 * 0.4) / 0.75)


def test_qwen25_72b_inference_tensor_parallel_for_memory_and_latency():
    (serve,) = sized({"model": "qwen2.5-72b", "method": "inference", "latency_ms": 50, "seq_len": 4096})
    weights = 2 * 72.7e9  # 135.4 GiB
    kv = 16 * 4096 * 80 * (2 * 8 * 128) * 2  # 16 sequences · s · L · 2·kv_heads·head_dim · 2 bytes = 20.0 GiB
    assert serve.memory_gib["weights"] == pytest.approx(weights / GIB)
    assert serve.memory_gib["kv_cache"] == pytest.approx(kv / GIB)
    # 155.4 GiB: 2 ways = 77.7 GiB > 72, 4 ways = 38.9 GiB fits
    assert serve.parallelism == {"data": 1, "tensor": 4, "pipeline": 1, "replicas": 1}
    assert serve.needs_island
    # a decode step reads weights + KV once over 4 devices at 60% of 2039 GB/s: 34.1 ms
    assert serve.latency_ms == pytest.approx((weights + kv) / (4 * 2039e9 * 0.6) * 1000)
    assert serve.latency_ms < 50
    (strict,) = sized({"model": "qwen2.5-72b", "method": "inference", "latency_ms": 20})
    assert strict.parallelism["tensor"] == 8  # the latency target doubles tensor parallelism within the node
    assert strict.latency_ms == pytest.approx((weights + kv) / (8 * 2039e9 * 0.6) * 1000)


def test_batch_inference_replicas_for_a_deadline():
    (batch,) = sized({"model": "qwen2.5-7b", "method": "batch-inference", "tokens": 5e8}, deadline_s=12 * 3600)
    weights, kv = 2 * 7.61e9, 64 * 4096 * 28 * (2 * 4 * 128) * 2  # 64 concurrent sequences by default
    step = (weights + kv) / (2039e9 * 0.6)  # 24.7 ms on one A100
    per_replica = 64 / step  # ≈ 2,588 tokens/s
    assert batch.parallelism["replicas"] == math.ceil(5e8 / (12 * 3600 * per_replica)) == 5
    assert batch.devices == 5 and batch.workers == 5
    assert batch.runtime_s == pytest.approx(5e8 / (5 * per_replica))


def test_precision_needs_the_device_feature():
    (no,) = sized({"model": "llama3.1-8b", "method": "inference"}, device=CATALOG.get("ascend-310p"))
    assert not no.fits and "bf16" in no.why


def test_params_only_goal_takes_the_nearest_dense_shape():
    g = Goal.model_validate({"params": "13B", "method": "lora"})
    stand_in = nearest_dense(list(TABLE.cards.values()), g.params)
    assert stand_in.name == "qwen2.5-14b"  # |log(14.7/13)| is the smallest
    w = workload(g, None, stand_in)
    assert w.params == 13e9 and w.shape_from == "qwen2.5-14b"
    assert adapter_params(w) == pytest.approx(13e9 * 16 / 3072)


def test_qlora_keeps_the_base_in_four_bits():
    (q,) = sized({"model": "llama3.1-70b", "method": "qlora", "tokens": 1e8})
    assert q.memory_gib["weights"] == pytest.approx(70.6e9 * 4.127 / 8 / GIB)  # 33.9 GiB
    assert q.devices == 1  # 33.9 + adapters + 10 GiB activations < 72 GiB
