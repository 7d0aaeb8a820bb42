"""Gavel traces and throughputs → hetpool traces and inventory.

Gavel (stanford-futuredata/gavel, MIT licence) describes a job by its type, its scale
factor (number of GPUs, one per server in its cluster) and the steps it must run; how
fast it runs on each worker type comes from a throughput table measured per (job type,
scale factor). Here a scale-factor-k job becomes a gang of k one-GPU workers, its
per-model speeds become the task's `relative_performance` hints (the scheduler may know
the throughput table, as Gavel's does) and its true runtimes become `work_s`.

Formats: /work/shared/bench/gavel/README.md.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from hetpool.catalog.devices import load_device_models_yaml
from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceModelSpec
from hetpool.core.specs import parse_spec
from hetpool.sim.trace import TraceTask

WORKER_TYPES = ("v100", "p100", "k80")
DEVICES_YAML = Path(__file__).parent.parent / "data" / "gavel-devices.yaml"
TRACE_COLUMNS = 10

JobKey = tuple[str, int]
Throughputs = dict[JobKey, dict[str, float]]


def model_name(worker_type: str) -> str:
    return f"gavel-{worker_type}"


def parse_job_key(text: str) -> JobKey:
    """A key such as "('ResNet-50 (batch size 64)', 1)" → ("ResNet-50 (batch size 64)", 1)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise SpecError(f"not a Gavel job key (job type, scale factor): {text!r}") from exc
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], int)):
        raise SpecError(f"not a Gavel job key (job type, scale factor): {text!r}")
    return value[0], value[1]


def load_throughputs(path: Path | str) -> Throughputs:
    """(job type, scale factor) → {worker type: steps per second when running alone}.

    Only the "null" entry (no co-located job) is kept; `*_unconsolidated` worker types
    are ignored.
    """
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    table: Throughputs = {}
    for worker_type, jobs in raw.items():
        if worker_type.endswith("_unconsolidated"):
            continue
        for key, entry in jobs.items():
            alone = entry.get("null") if isinstance(entry, dict) else None
            if alone is None:
                continue
            table.setdefault(parse_job_key(key), {})[worker_type] = float(alone)
    return table


def _row_to_task(columns: list[str], index: int, throughputs: Throughputs, tenant: str, reference: str) -> TraceTask:
    job_type = columns[0]
    total_steps = float(columns[5])
    scale_factor = int(columns[6])
    arrival_s = float(columns[9])
    if total_steps <= 0 or scale_factor < 1 or arrival_s < 0:
        raise ValueError("total_steps and scale_factor must be positive, arrival_time_s not negative")
    key = (job_type, scale_factor)
    if key not in throughputs:
        raise SpecError(f"unknown Gavel job {key!r}: not in the throughput table")
    speeds = {w: s for w, s in throughputs[key].items() if w in WORKER_TYPES and s > 0}
    if not speeds:
        raise SpecError(f"Gavel job {key!r} has no worker type with a throughput > 0")
    # If the reference type cannot run this job (throughput 0 or missing), the fastest
    # usable type is this job's reference: its runtime_estimate, reference_s and
    # relative_performance are all expressed relative to that type instead.
    ref = reference if reference in speeds else max(speeds, key=lambda w: speeds[w])
    reference_s = total_steps / speeds[ref]
    usable = [w for w in WORKER_TYPES if w in speeds]
    name = f"job-{index}"
    document = {
        "kind": "Task",
        "name": name,
        "tenant": tenant,
        "description": job_type,
        "type": "training",
        "workers": scale_factor,
        "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 1, "memory_gb": 1},
        "any_of": [model_name(w) for w in usable],
        "relative_performance": {model_name(w): speeds[w] / speeds[ref] for w in usable},
        "runtime_estimate": f"{reference_s:.0f}s",
        "priority": "normal",
    }
    return TraceTask(
        id=name,
        arrival_s=arrival_s,
        spec=parse_spec(document),
        reference_s=reference_s,
        work_s={model_name(w): total_steps / speeds[w] for w in usable},
    )


def read_gavel_trace(path: Path | str, throughputs: Throughputs, *, tenant: str = "gavel/jobs", reference: str = "v100") -> list[TraceTask]:
    """One TraceTask per line of a Gavel .trace file (ten tab-separated columns), in file order."""
    tasks: list[TraceTask] = []
    with open(path, encoding="utf-8") as fh:
        lines = [line.rstrip("\n").rstrip("\r") for line in fh]
    index = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        columns = line.split("\t")
        if len(columns) != TRACE_COLUMNS:
            raise SpecError(f"{where}: expected {TRACE_COLUMNS} tab-separated columns, got {len(columns)}")
        try:
            tasks.append(_row_to_task(columns, index, throughputs, tenant, reference))
        except SpecError as exc:
            raise SpecError(f"{where}: {exc.message}", details=exc.details) from None
        except ValueError as exc:
            raise SpecError(f"{where}: malformed Gavel trace line: {exc}") from None
        index += 1
    return tasks


def gavel_device_models() -> list[DeviceModelSpec]:
    """The gavel-v100 / gavel-p100 / gavel-k80 device models."""
    return load_device_models_yaml(DEVICES_YAML.read_text(encoding="utf-8"), str(DEVICES_YAML))


def gavel_inventory(v100: int, p100: int, k80: int, *, include_models: bool = False) -> list[dict]:
    """Documents for Gavel's cluster: one node per GPU (as in its simulator), one pool per
    worker type, tenants "gavel" and "gavel/jobs". `include_models` prepends the
    DeviceModel documents (they are not in the built-in catalog)."""
    documents: list[dict] = []
    if include_models:
        documents += [m.model_dump(mode="json", by_alias=True, exclude_defaults=True) | {"kind": "DeviceModel"} for m in gavel_device_models()]
    documents += [
        {"kind": "Tenant", "name": "gavel"},
        {"kind": "Tenant", "name": "gavel/jobs"},
        {"kind": "Cluster", "name": "gavel", "backend": "local"},
    ]
    for worker_type, count in (("v100", v100), ("p100", p100), ("k80", k80)):
        if count < 0:
            raise ValueError(f"{worker_type}: a count cannot be negative")
        model = model_name(worker_type)
        nodes = [f"{model}-{i:03d}" for i in range(count)]
        documents += [
            {"kind": "Node", "name": node, "cluster": "gavel", "cpu_cores": 4, "memory_gb": 32, "devices": [{"model": model, "count": 1}]}
            for node in nodes
        ]
        if nodes:
            documents.append({"kind": "Pool", "name": model, "cluster": "gavel", "model": model, "nodes": nodes, "price_per_hour": 0})
    return documents
