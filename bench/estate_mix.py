"""The synthetic estate and the two task mixes of bench/scheduler_throughput.py.

`inventory` builds 9 accelerator models across GPU / NPU (8 devices per node, network
groups of 32 nodes, 4 clusters in 4 zones), some pools shareable so slices can run.

`flat_workload` is the easy mix the first benchmark ran: ~165 distinct shapes, no
topology, no slices, no queues of its own.

`honest_workload` is the default: ≥ 2,000 distinct shapes (CPU, memory, device memory,
framework ranges, priorities and gang sizes vary), ≥ 10 % asking for topology (same node /
network group / zone), ≥ 5 % fractional, routed to several queues (one of them FIFO),
every tenant under a quota that may borrow from its siblings (`team_quotas`).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec
from hetpool.core.policy import QueueSpec
from hetpool.core.quota import QuotaSpec
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.cycle import QueuedTask

CUDA_12_4 = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}, "frameworks": {"pytorch": "2.5.1"}}
CUDA_12_2 = {"driver": "535.154.05", "runtime": {"name": "cuda", "version": "12.2"}, "frameworks": {"pytorch": "2.4.1"}}
CANN_800 = {"driver": "24.1.0", "runtime": {"name": "cann", "version": "8.0.0"}, "frameworks": {"pytorch": "2.4.0"}}
CANN_RC2 = {"driver": "24.1.rc2", "runtime": {"name": "cann", "version": "8.0.RC2"}, "frameworks": {"mindspore": "2.3.1", "pytorch": "2.3.1"}}
# model, share of accelerator nodes, stack, shareable (slices allowed)
ACCELERATORS = [
    ("nvidia-h800", 0.12, CUDA_12_4, False),
    ("nvidia-h100", 0.08, CUDA_12_4, False),
    ("nvidia-a100-80g", 0.18, CUDA_12_2, False),
    ("nvidia-a100-40g", 0.08, CUDA_12_2, True),
    ("nvidia-l40s", 0.10, CUDA_12_4, True),
    ("ascend-910b2", 0.18, CANN_800, False),
    ("ascend-910b3", 0.10, CANN_RC2, False),
    ("ascend-310p", 0.08, CANN_RC2, True),
    ("nvidia-h20", 0.08, CUDA_12_4, True),
]
GPU_FALLBACKS = [
    ["nvidia-h800", "nvidia-h100", "nvidia-a100-80g"],
    ["nvidia-a100-80g", "nvidia-a100-40g", "ascend-910b2"],
    ["nvidia-h20", "nvidia-l40s"],
]
INFERENCE_MODELS = ["nvidia-l40s", "nvidia-h20", "nvidia-a100-40g"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
ORGS, TEAMS = 3, 11


def tenant_of(i: int) -> str:
    return f"org{i % ORGS}/team{i % TEAMS}"


def inventory(n_nodes: int, cpu_share: float = 0.0):
    n_accel = int(n_nodes * (1 - cpu_share))
    clusters = [ClusterSpec(name=f"c{i}", zone=f"z{i}") for i in range(4)]
    nodes, pools = [], []
    total_share = sum(s for _, s, _, _ in ACCELERATORS)
    for k, (model, share, stack, shareable) in enumerate(ACCELERATORS):
        count = int(round(n_accel * share / total_share))
        names = [f"{model}-{i}" for i in range(count)]
        for i, name in enumerate(names):
            doc = {
                "name": name,
                "cluster": f"c{k % 4}",
                "network_group": f"{model}-g{i // 32}",
                "cpu_cores": 128,
                "memory_gb": 2048,
                "devices": [{"model": model, "count": 8}],
                "stack": stack,
            }
            nodes.append(NodeSpec.model_validate(doc))
        price = float(5 + 3 * k)
        pools.append(PoolSpec(name=f"pool-{model}", cluster=f"c{k % 4}", model=model, nodes=names, price_per_hour=price, shareable=shareable))
    cpu_names = [f"cpu-{i}" for i in range(n_nodes - len(nodes))]
    for name in cpu_names:
        doc = {"name": name, "cluster": "c0", "cpu_cores": 96, "memory_gb": 512, "devices": [{"model": "cpu-x86-64", "count": 2}]}
        nodes.append(NodeSpec.model_validate(doc))
    if cpu_names:
        pools.append(PoolSpec(name="pool-cpu", cluster="c0", model="cpu-x86-64", nodes=cpu_names, price_per_hour=0.5))
    return clusters, nodes, pools


def flat_workload(n_tasks: int, rng: random.Random, start: int = 0) -> list[QueuedTask]:
    """The first benchmark's mix (kept for comparison: `--flat`)."""
    tasks = []
    for i in range(start, start + n_tasks):
        r = rng.random()
        if r < 0.45:
            doc = {
                "type": "training",
                "framework": {"name": "pytorch", "version": ">=2.3"},
                "workers": rng.choice([1, 1, 2, 2, 4, 8]),
                "per_worker": {"devices": {"class": "gpu", "count": rng.choice([1, 2, 4, 8])}, "cpu": 8, "memory_gb": 64},
                "fallback": rng.choice(GPU_FALLBACKS),
                "runtime_estimate": f"{rng.randint(1, 12)}h",
            }
        elif r < 0.70:
            doc = {
                "type": "inference",
                "framework": {"name": "pytorch", "version": ">=2.3"},
                "workers": rng.choice([1, 2]),
                "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 4, "memory_gb": 32},
                "any_of": INFERENCE_MODELS,
            }
        elif r < 0.85:
            doc = {
                "type": "batch-inference",
                "framework": {"name": "pytorch", "version": ">=2.3"},
                "per_worker": {"devices": {"class": "npu", "count": rng.choice([1, 2, 4])}, "cpu": 4, "memory_gb": 32},
            }
        elif r < 0.93:
            doc = {
                "type": "training",
                "framework": {"name": "mindspore", "version": "2.3"},
                "per_worker": {"devices": {"class": "npu", "count": 8}, "cpu": 16, "memory_gb": 128},
            }
        else:
            doc = {"type": "preprocessing", "per_worker": {"cpu": 16, "memory_gb": 64}}
        doc.update(name=f"t{i}", tenant=tenant_of(i), priority=rng.choice(["low", "normal", "normal", "normal", "high"]))
        tasks.append(QueuedTask(f"t{i}", TaskSpec.model_validate(doc), T0 + timedelta(milliseconds=i)))
    return tasks


PRIORITIES = ["low", "normal", "normal", "normal", "high"]
# Requests come from templates and pipelines, so they repeat: a handful of CPU / memory
# sizes and framework ranges, combined with the device choices below.
CPUS = [4, 8, 16, 32]
TORCH = [">=2.1", ">=2.3", "==2.4.1"]
TOPOLOGY = ["node", "network_group", "zone"]


def _sized(rng: random.Random, cpus: list[int]) -> dict:
    """CPU and memory per worker as a template sizes them: memory follows the CPU count."""
    cpu = rng.choice(cpus)
    return {"cpu": cpu, "memory_gb": cpu * rng.choice([4, 8])}


def _training(rng: random.Random) -> dict:
    workers = rng.choice([1, 1, 2, 2, 4, 8])
    doc = {
        "type": "training",
        "framework": {"name": "pytorch", "version": rng.choice(TORCH)},
        "workers": workers,
        "per_worker": {"devices": {"class": "gpu", "count": rng.choice([1, 2, 4, 8])}, **_sized(rng, CPUS)},
        "fallback": rng.choice(GPU_FALLBACKS),
        "runtime_estimate": f"{rng.randint(1, 12)}h",
    }
    if workers > 1 and rng.random() < 0.3:
        doc["topology"] = {"same": rng.choice(TOPOLOGY[1:])}
    return doc


def _inference(rng: random.Random) -> dict:
    doc = {
        "type": "inference",
        "framework": {"name": "pytorch", "version": rng.choice(TORCH)},
        "workers": rng.choice([1, 2, 3]),
        "per_worker": {"devices": {"class": "gpu", "count": 1, "min_memory_gb": rng.choice([0, 24, 40])}, **_sized(rng, CPUS[:3])},
        "any_of": INFERENCE_MODELS,
        "runtime_estimate": f"{rng.randint(2, 48)}h",
    }
    if rng.random() < 0.2:
        doc["topology"] = {"same": "zone"}
    return doc


def _fractional(rng: random.Random) -> dict:
    if rng.random() < 0.5:
        devices = {"class": "gpu", "count": rng.choice([0.25, 0.5])}
    else:
        devices = {"class": "gpu", "count": 1, "memory_gb": rng.choice([8, 10, 12, 16, 20])}
    return {
        "type": "inference",
        "framework": {"name": "pytorch", "version": rng.choice(TORCH)},
        "per_worker": {"devices": devices, **_sized(rng, CPUS[:2])},
        "runtime_estimate": f"{rng.randint(1, 24)}h",
    }


def _npu(rng: random.Random) -> dict:
    if rng.random() < 0.6:
        return {
            "type": "batch-inference",
            "framework": {"name": "pytorch", "version": rng.choice([">=2.3", ">=2.1", "==2.4.0"])},
            "per_worker": {"devices": {"class": "npu", "count": rng.choice([1, 2, 4])}, **_sized(rng, CPUS)},
            "runtime_estimate": f"{rng.randint(1, 8)}h",
        }
    workers = rng.choice([1, 2, 4])
    doc = {
        "type": "training",
        "framework": {"name": "mindspore", "version": rng.choice(["2.3", ">=2.3", "2.3.1"])},
        "workers": workers,
        "per_worker": {"devices": {"class": "npu", "count": 8}, **_sized(rng, CPUS[2:])},
        "runtime_estimate": f"{rng.randint(2, 24)}h",
    }
    if workers > 1 and rng.random() < 0.5:
        doc["topology"] = {"same": "network_group"}
    return doc


def honest_workload(n_tasks: int, rng: random.Random, start: int = 0, t0: datetime = T0) -> list[QueuedTask]:
    """The default mix: many shapes, topology, slices, several queues, quotas (see module doc)."""
    docs = honest_documents(n_tasks, rng, start)
    return [QueuedTask(doc["name"], TaskSpec.model_validate(doc), t0 + timedelta(milliseconds=i)) for i, doc in enumerate(docs, start)]


def honest_documents(n_tasks: int, rng: random.Random, start: int = 0) -> list[dict]:
    """The default mix as task documents (what a user submits), named t<start>… ."""
    docs = []
    for i in range(start, start + n_tasks):
        r = rng.random()
        if r < 0.42:
            doc = _training(rng)
        elif r < 0.62:
            doc = _inference(rng)
        elif r < 0.70:
            doc = _fractional(rng)
        elif r < 0.90:
            doc = _npu(rng)
        else:
            doc = {"type": "preprocessing", "per_worker": {**_sized(rng, CPUS)}, "runtime_estimate": "30m"}
        doc.update(name=f"t{i}", tenant=tenant_of(i), priority=rng.choice(PRIORITIES))
        docs.append(doc)
    return docs


def honest_queues() -> list[QueueSpec]:
    """Training, serving (inference models only), batch on NPUs, and a FIFO queue for CPU work."""
    return [
        QueueSpec(name="serving", task_types=["inference"], order=10),
        QueueSpec(name="batch", task_types=["batch-inference"], order=20),
        QueueSpec(name="prep", task_types=["preprocessing"], ordering="fifo", order=30),
        QueueSpec(name="training", order=100),
    ]


def team_quotas(accelerators_by_class: dict[str, int]) -> list[QuotaSpec]:
    """One quota per team: a fair slice of each device class as nominal, borrowing from
    its siblings (the other teams of its org) unlimited, lending all its idle nominal."""
    teams = sorted({tenant_of(i) for i in range(ORGS * TEAMS)})
    quotas = []
    for tenant in teams:
        limits = [{"resource": cls, "nominal": max(1, total // len(teams))} for cls, total in accelerators_by_class.items() if total]
        quotas.append(QuotaSpec.model_validate({"name": tenant.replace("/", "-"), "tenant": tenant, "limits": limits}))
    return quotas
