"""Goal sizing: how much device memory a model needs per method and precision, how many
devices of a given model that means, the parallelism it implies, and how long the work
takes (performance-normalised, as the scheduler's own runtime estimates are).

The memory model (docs/concepts.md, "Sizing a goal", gives the formulas with a worked
example) in brief, for P parameters, b bytes per value of the precision:

- pretrain / full-finetune, mixed-precision Adam: 16 bytes per parameter (weights b, gradients
  b, optimizer the rest: fp32 master copy, first and second moments), sharded over all N
  devices (FSDP / ZeRO-3); LoRA: the frozen base at b bytes per parameter plus 16 bytes per
  adapter parameter; QLoRA: the base in 4-bit NF4 with double quantisation (4.127 bits).
- training activations with full activation checkpointing and flash attention (Korthikanti
  et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", with the
  attention-score term gone): each layer's input kept, 2·m·s·h·L bytes, one layer
  recomputed at a time, 34·m·s·h bytes, and fp32 logits with their gradient, 8·m·s·V
  bytes; tensor (and sequence) parallelism of degree t divides them by t.
- inference: the weights (P·b) plus the KV cache, c·s·L·(2·kv_heads·head_dim)·b_kv bytes
  for c concurrent sequences of s tokens, split over t tensor-parallel devices of one node
  (an NVLink / HCCS island) and, beyond a node, p pipeline stages.
- a device's usable memory is 90% of it (CUDA / CANN context, allocator fragmentation,
  communication buffers).

Time: training needs k·P_active·T FLOPs for T tokens (k = 8 for full training: forward 2,
backward 4, recomputation 2; k = 6 for LoRA / QLoRA, whose frozen weights get no weight
gradient); a reference device (nvidia-a100-80g, relative performance 1.0) sustains 40% of
its dense BF16 peak; a device model runs at the catalog's relative performance for the task
type; across nodes a further 0.9 for communication. Decoding is memory-bound: one step
reads the weights and the KV cache at 60% of the memory bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hetpool.catalog.models import ModelCard
from hetpool.core.goal import Goal, Method, Precision
from hetpool.core.inventory import DeviceModelSpec

GIB = 2**30
USABLE_FRACTION = 0.9
TRAIN_MFU = 0.40
DECODE_BANDWIDTH_EFFICIENCY = 0.6
CROSS_NODE_EFFICIENCY = 0.9
STATE_BYTES_PER_PARAM = 16.0  # mixed-precision Adam: b + b + (16 - 2b) for b = 2 or 4
ADAPTER_STATE_BYTES = 16.0
NF4_BYTES_PER_PARAM = 4.127 / 8  # QLoRA's NF4 with double quantisation (Dettmers et al. 2023)
FLOPS_PER_PARAM_TOKEN = {"full": 8.0, "adapter": 6.0}
DEFAULT_BATCH = {Method.INFERENCE: 16, Method.BATCH_INFERENCE: 64}
CNN_ACTIVATION_GIB_PER_SAMPLE = 0.1  # ResNet-50 class at 224x224, mixed precision (approximate)
ADAPTER_SHARE_PER_RANK = 1 / 3072  # LoRA params / base params per rank, all linear layers (Llama 3.1 8B: r=16 -> 41.9M)
OFFLOAD_SPEED = 0.75  # ZeRO-Offload's CPU optimizer step: an assumed slowdown, not a measurement
MAX_TENSOR_PARALLEL = 64
MAX_REPLICAS = 4096


@dataclass(frozen=True)
class Reference:
    """The reference device the catalog's relative performance is measured against."""

    name: str
    bf16_tflops: float
    bandwidth_gbps: float

    @classmethod
    def of(cls, model: DeviceModelSpec) -> Reference:
        return cls(model.name, float(model.bf16_tflops or model.fp16_tflops or 312), float(model.memory_bandwidth_gbps or 2039))


@dataclass
class Sizing:
    """One way to run the goal on one device model: how many devices, split how, with how
    much memory each, for how long. `fits` is False (with `why`) when no split fits."""

    device_model: str
    devices: int = 0
    workers: int = 0
    devices_per_worker: int = 0
    parallelism: dict[str, int] = field(default_factory=dict)
    memory_gib: dict[str, float] = field(default_factory=dict)
    per_device_gib: float = 0.0
    usable_gib: float = 0.0
    fits: bool = True
    why: str = ""
    why_note: dict = field(default_factory=dict)  # `why` as {"code", "params"} (scheduling/recommend.EXCLUDED)
    variant: str = "smallest"  # smallest that fits, or sized for the deadline / throughput
    flops: float | None = None
    runtime_s: float | None = None  # on this device model, this many devices
    reference_runtime_s: float | None = None  # the same work on the reference device model
    tokens_per_s: float | None = None
    latency_ms: float | None = None
    needs_island: bool = False
    host_memory_gib: float | None = None  # per worker, beyond the default (optimizer offload)
    notes: list[dict] = field(default_factory=list)  # {"code", "params"}: scheduling/recommend.NOTES says them

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if v is not None}
        out["memory_gib"] = {k: round(v, 2) for k, v in self.memory_gib.items()}
        out["per_device_gib"] = round(self.per_device_gib, 2)
        out["usable_gib"] = round(self.usable_gib, 2)
        return out


@dataclass(frozen=True)
class Workload:
    """The goal resolved against a model card: what the arithmetic reads."""

    card: ModelCard  # the named model, or for `params` the table's nearest dense shape
    params: float
    active_params: float
    goal: Goal
    shape_from: str | None = None  # the card whose shape stands in for a params-only goal

    @property
    def method(self) -> Method:
        assert self.goal.method is not None
        return self.goal.method

    @property
    def batch(self) -> int:
        return self.goal.batch_size or DEFAULT_BATCH.get(self.method, 1)


def workload(goal: Goal, card: ModelCard | None, stand_in: ModelCard | None = None) -> Workload:
    """The numbers to size: a named model's own, or `params` with the shape of `stand_in`
    (the table's dense model of nearest size) scaled to it."""
    if card is not None:
        return Workload(card, card.params, card.active_params, goal)
    assert goal.params is not None and stand_in is not None
    return Workload(stand_in, goal.params, goal.params, goal, shape_from=stand_in.name)


def nearest_dense(cards: list[ModelCard], params: float) -> ModelCard:
    dense = [c for c in cards if c.transformer and c.architecture == "decoder" and not c.experts] or cards
    return min(dense, key=lambda c: abs(math.log(c.params / params)))


def usable_gib(device: DeviceModelSpec) -> float:
    return device.memory_gb * USABLE_FRACTION


# ------------------------------------------------------------------------- memory


def adapter_params(w: Workload) -> float:
    """LoRA parameters at rank r on every linear layer: r·(in + out) per projection."""
    c, r = w.card, w.goal.lora_rank
    if not c.transformer or c.intermediate_size is None or w.shape_from:
        return w.params * r * ADAPTER_SHARE_PER_RANK
    h, q, kv = c.hidden_size, c.heads * c.head_size, (c.kv_heads or c.heads) * c.head_size
    attention = (h + q) + 2 * (h + kv) + (q + h)
    mlp = 3 * (h + c.intermediate_size) * (c.experts or 1)
    return float(r * c.layers * (attention + mlp))


def training_state_bytes(w: Workload) -> dict[str, float]:
    """Weights, gradients, optimizer and adapter states of the whole model, in bytes."""
    b = w.goal.precision.bytes_per_value
    if w.method in (Method.PRETRAIN, Method.FULL_FINETUNE):
        weights = b * w.params
        return {"weights": weights, "gradients": weights, "optimizer": (STATE_BYTES_PER_PARAM - 2 * b) * w.params}
    base = NF4_BYTES_PER_PARAM if w.method is Method.QLORA else b
    return {"weights": base * w.params, "adapters": ADAPTER_STATE_BYTES * adapter_params(w)}


def activation_bytes(w: Workload, tensor_parallel: int) -> float:
    """One device's activations for one micro-batch (see the module docstring)."""
    c, m, s = w.card, w.batch, w.goal.seq_len
    if not c.transformer:
        return m * CNN_ACTIVATION_GIB_PER_SAMPLE * GIB
    h, layers = c.hidden_size * _width_scale(w), c.layers
    total = 2 * m * s * h * layers + 34 * m * s * h + 8 * m * s * (c.vocab_size or 0)
    return total / tensor_parallel


def _width_scale(w: Workload) -> float:
    """A params-only goal scales the stand-in's hidden size with sqrt(params ratio)
    (parameters grow with layers·h², and both grow together in these families)."""
    return math.sqrt(w.params / w.card.params) if w.shape_from else 1.0


def kv_cache_bytes(w: Workload, sequences: int) -> float:
    c = w.card
    if not c.transformer:
        return 0.0
    kv_bytes = 1.0 if w.goal.precision is Precision.FP8 else 2.0
    return sequences * w.goal.seq_len * c.layers * c.kv_values_per_token * _width_scale(w) * kv_bytes


# ---------------------------------------------------------------------- device counts


def round_devices(n: int, per_node: int) -> int:
    """A count that makes an even split: a power of two within a node, whole nodes beyond."""
    if n <= per_node:
        power = 1 << max(0, math.ceil(math.log2(max(n, 1))))
        return power if power <= per_node else per_node
    return math.ceil(n / per_node) * per_node


def split(devices: int, per_node: int) -> tuple[int, int]:
    """(workers, devices per worker): one worker per node."""
    if devices <= per_node:
        return 1, devices
    return devices // per_node, per_node


def size_training(
    w: Workload, device: DeviceModelSpec, per_node: int, ref: Reference, deadline_s: float | None, max_devices: int | None
) -> list[Sizing]:
    """The smallest split that fits, (when it misses the deadline) the one sized for it,
    and (when the smallest is more than `max_devices`) the optimizer offloaded to host memory."""
    usable = usable_gib(device) * GIB
    states = training_state_bytes(w)
    total_states = sum(states.values())
    tensor = 1
    while activation_bytes(w, tensor) >= usable and tensor < min(per_node, MAX_TENSOR_PARALLEL):
        tensor *= 2
    activations = activation_bytes(w, tensor)
    if activations >= usable:
        return [
            _no_fit(device, f"one micro-batch's activations ({activations / GIB:.1f} GiB) exceed {usable / GIB:.1f} GiB even split {tensor} ways")
        ]
    smallest = round_devices(max(tensor, math.ceil(total_states / (usable - activations))), per_node)
    smallest = max(smallest, tensor)
    out = [_training(w, device, per_node, ref, smallest, tensor, states, activations, "smallest")]
    first = out[0]
    if deadline_s and first.runtime_s and first.runtime_s > deadline_s:
        needed = math.ceil(first.runtime_s * first.devices / deadline_s)
        if needed > per_node:  # across nodes the split runs at CROSS_NODE_EFFICIENCY
            needed = math.ceil(needed / (CROSS_NODE_EFFICIENCY / _efficiency(first.devices, per_node)))
        bigger = round_devices(needed, per_node)
        if bigger > smallest:
            out.append(_training(w, device, per_node, ref, bigger, tensor, states, activations, "deadline"))
    if max_devices and smallest > max_devices and "optimizer" in states:
        on_device = {k: v for k, v in states.items() if k != "optimizer"}
        fewer = max(tensor, round_devices(math.ceil(sum(on_device.values()) / (usable - activations)), per_node))
        if fewer < smallest:
            offload = _training(w, device, per_node, ref, fewer, tensor, on_device, activations, "offload")
            offload.memory_gib["optimizer_on_host"] = states["optimizer"] / GIB
            offload.host_memory_gib = states["optimizer"] / GIB / offload.workers
            if offload.runtime_s is not None:
                offload.runtime_s /= OFFLOAD_SPEED
                offload.reference_runtime_s /= OFFLOAD_SPEED
            offload.notes.append({"code": "offload", "params": {"host_gib": f"{offload.host_memory_gib:.0f}", "speed": f"{OFFLOAD_SPEED:.0%}"}})
            out.append(offload)
    return out


def _efficiency(devices: int, per_node: int) -> float:
    return 1.0 if devices <= per_node else CROSS_NODE_EFFICIENCY


def _training(w, device, per_node, ref, devices, tensor, states, activations, variant) -> Sizing:
    workers, per_worker = split(devices, per_node)
    memory = {k: v / GIB for k, v in states.items()} | {"activations": activations / GIB}
    per_device = sum(states.values()) / devices + activations
    sizing = Sizing(
        device.name,
        devices=devices,
        workers=workers,
        devices_per_worker=per_worker,
        parallelism={"data": devices // tensor, "tensor": tensor, "pipeline": 1, "fsdp_shards": devices},
        memory_gib=memory,
        per_device_gib=per_device / GIB,
        usable_gib=usable_gib(device),
        variant=variant,
        needs_island=tensor > 1,
    )
    tokens = w.goal.tokens
    if tokens is not None and (w.card.transformer or w.shape_from):
        k = FLOPS_PER_PARAM_TOKEN["full" if w.method in (Method.PRETRAIN, Method.FULL_FINETUNE) else "adapter"]
        sizing.flops = k * w.active_params * tokens
        reference = sizing.flops / (devices * ref.bf16_tflops * 1e12 * TRAIN_MFU * _efficiency(devices, per_node))
        sizing.reference_runtime_s = reference
        sizing.runtime_s = reference / device.perf_for("training")
    elif tokens is None:
        sizing.notes.append({"code": "no_tokens", "params": {}})
    return sizing


def size_inference(w: Workload, device: DeviceModelSpec, per_node: int, ref: Reference, deadline_s: float | None) -> list[Sizing]:
    """Tensor-parallel degree for memory (then latency), pipeline stages beyond a node,
    replicas for the throughput target or, for batch inference, the deadline."""
    usable = usable_gib(device) * GIB
    weights = w.goal.precision.bytes_per_value * w.params
    kv = kv_cache_bytes(w, w.batch)
    replica = weights + kv
    max_tp = min(per_node, MAX_TENSOR_PARALLEL)
    tensor, stages = 1, 1
    while replica / tensor > usable and tensor < max_tp:
        tensor *= 2
    if replica / tensor > usable:
        stages = math.ceil(replica / (tensor * usable))
    perf = device.perf_for(w.method.task_type)
    step = _decode_step_s(replica, tensor, ref, perf)
    target = w.goal.latency_ms
    while target and step * 1000 > target and tensor < max_tp and stages == 1:
        tensor *= 2
        step = _decode_step_s(replica, tensor, ref, perf)
    per_replica = w.batch / step
    replicas = 1
    if w.goal.throughput_tokens_per_s:
        replicas = math.ceil(w.goal.throughput_tokens_per_s / per_replica)
    if w.method is Method.BATCH_INFERENCE and deadline_s and w.goal.tokens:
        replicas = max(replicas, math.ceil(w.goal.tokens / (deadline_s * per_replica)))
    replicas = min(replicas, MAX_REPLICAS)
    per_stage = replica / (tensor * stages)
    sizing = Sizing(
        device.name,
        devices=replicas * tensor * stages,
        workers=replicas * stages,
        devices_per_worker=tensor,
        parallelism={"data": replicas, "tensor": tensor, "pipeline": stages, "replicas": replicas},
        memory_gib={"weights": weights / GIB, "kv_cache": kv / GIB},
        per_device_gib=per_stage / GIB,
        usable_gib=usable / GIB,
        variant="smallest" if replicas == 1 else "throughput",
        tokens_per_s=per_replica * replicas,
        latency_ms=step * 1000,
        needs_island=tensor > 1,
    )
    if w.method is Method.BATCH_INFERENCE and w.goal.tokens:
        sizing.runtime_s = w.goal.tokens / sizing.tokens_per_s
        sizing.reference_runtime_s = sizing.runtime_s * perf
    return [sizing]


def _decode_step_s(replica_bytes: float, tensor: int, ref: Reference, perf: float) -> float:
    """One decode step: every byte of weights and KV cache read once, split over the
    tensor-parallel devices, at the reference's effective bandwidth scaled by `perf`."""
    return replica_bytes / (tensor * ref.bandwidth_gbps * 1e9 * DECODE_BANDWIDTH_EFFICIENCY * perf)


def _no_fit(device: DeviceModelSpec, why: str, why_note: dict) -> Sizing:
    return Sizing(device.name, fits=False, why=why, why_note=why_note, usable_gib=usable_gib(device))


def size(
    w: Workload, device: DeviceModelSpec, per_node: int, ref: Reference, deadline_s: float | None = None, max_devices: int | None = None
) -> list[Sizing]:
    """Ways to run the workload on `device` with `per_node` devices per node (first: the
    smallest that fits)."""
    if w.goal.precision.feature and w.goal.precision.feature not in device.features:
        params = {"model": device.name, "precision": w.goal.precision.value, "features": ", ".join(device.features)}
        why = f"{device.name} has no {params['precision']} support (features: {params['features']})"
        return [_no_fit(device, why, {"code": "precision", "params": params})]
    if w.method.trains:
        return size_training(w, device, per_node, ref, deadline_s, max_devices)
    return size_inference(w, device, per_node, ref, deadline_s)
