"""Inventory of a Ray cluster, read from its dashboard over plain HTTP (no `ray` package needed).

Config (`backend_config` of a Cluster with `backend: ray`; all values are strings):
  address          the dashboard URL, e.g. "http://127.0.0.1:8265" (required)
  resource_models  overrides "GPU_A100=nvidia-a100-80g,NPU=ascend-910b3": Ray resource -> catalog
                   model; wins over every rule below (keys are matched case-insensitively)
  timeout_s        per-request timeout in seconds (default "10")
  token            optional; sent as "Authorization: Bearer <token>" (Ray's token authentication)

Endpoints read (verified against Ray 2.60; responses recorded in tests/engines/fixtures/ray):
  GET /api/version                            Ray version and session (observation.extra)
  GET /api/v0/nodes?detail=1&limit=10000      the state API: id, name, ip, state, exact resource
                                              totals and labels of every node, dead ones included
  GET /api/cluster_status                     the autoscaler's load report: per node
                                              [used, total] of every resource
The load report is written by the autoscaler monitor every few seconds (so `used` lags by up
to ~5 s), and the dashboard camel-cases its keys ("GPU_H100" -> "GPUH100",
"accelerator_type:A100" -> "acceleratorType:A100"); names are mapped back through the exact
names from the state API. A placement-group reservation counts as used: the devices are taken.
Where the report is missing (a cluster on autoscaler v2, or a monitor that has not reported
yet) the observation does not claim `used`, and says why in a warning.

Nodes:
- name: Ray's node_name (defaults to the node's IP in Ray). Several live nodes sharing one name
  (e.g. two raylets on one host without --node-name) are each named `<node_name>-<node_id[:8]>`,
  with a warning; a unique name is kept as is, so it survives a raylet restart (node ids do not).
- state: ALIVE -> READY. Ray keeps DEAD nodes listed (up to 1000) and a restarted raylet comes
  back with a new node id, so a DEAD entry is a past incarnation: one that ended with
  "Expected termination" (SIGTERM, `ray stop`, autoscaler scale-down) is treated as removed
  (not reported); one that died unexpectedly (health check failed, crash) is reported DOWN with
  Ray's message as reason, unless a live node now has its name. Ray's draining state is not in
  the state API and is not read.
- cpu_cores / memory_gb: Ray's logical `CPU` and `memory` resources (what Ray schedules with,
  not the host's hardware; memory in GiB). arch is not exposed by Ray: x86_64.
- labels: Ray node labels as is, plus `hetpool.io/ray.node-id`.

Resource -> catalog model convention (first rule that applies wins):
1. `resource_models` overrides.
2. Not accelerators, ignored: CPU, memory, object_store_memory, node:*, accelerator_type:*,
   placement-group resources (`<name>_group_[<i>_]<pg id>`, bundle_group_*).
3. Ray's built-in accelerator resources (GPU, NPU, TPU, HPU, neuron_cores, ...): the model is
   the node's accelerator type (label `ray.io/accelerator-type` or resource
   `accelerator_type:<T>`, e.g. A100-80G, H100, Ascend910B4) looked up in the catalog.
   Without a type that resolves: `unknown-ray-<resource>` (e.g. `NPU` alone) with a warning.
4. A resource named after a catalog model or product: `ascend-910b3`, `nvidia-a100-80g`,
   `MLU370-X8`.
5. `<CLASS>_<PRODUCT>` with CLASS one of GPU NPU MLU DCU XPU DPU TPU HPU (any case):
   GPU_H100, NPU_910B3, GPU_A100, NPU_910B.
   A product resolves by catalog alias ("L40S", "Ascend910B4"), then by model-name suffix
   ("A100-80G" -> nvidia-a100-80g, "910B3" -> ascend-910b3), then by Slurm GRES type within the
   class ("npu:910b"), where a family shared by several models (A100 40/80 GB, 910B1..B4) takes
   the first in catalog order, as Slurm GRES do, with a warning naming the alternatives.
6. A resource that looks like an accelerator (rule 3 or 5's CLASS) but does not resolve:
   `unknown-ray-<resource>` with a warning; never dropped.
7. Anything else (custom resources that are not accelerators) is ignored; listed per node in
   observation.extra["ignored_resources"].
Counts: devices = whole part of the total; used = used rounded up (a GPU half in use is not
free), at most the total.
"""

from __future__ import annotations

import math
from typing import Any

import httpx

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import (
    SEES_DEVICES,
    SEES_LABELS,
    SEES_NODES,
    SEES_STATES,
    SEES_USED,
    ConnectorError,
    InventoryConnector,
    InventoryObservation,
    NodeState,
    ObservedNode,
)
from hetpool.engines.ray.client import NODES_PATH, RayDashboard
from hetpool.engines.ray.config import parse_resource_models
from hetpool.engines.ray.resources import NOT_ACCELERATORS, ResourceMapper, accelerator_types_of, is_ignored_resource

NODE_ID_LABEL = "hetpool.io/ray.node-id"


def camel_key(name: str) -> str:
    """The key the dashboard prints for `name` (ray.dashboard.utils.to_camel_case)."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def map_node_resources(
    mapper: ResourceMapper, totals: dict[str, float], usage: dict[str, float] | None, accelerator_types: list[str]
) -> tuple[dict[str, int], dict[str, int], dict[str, str], list[str]]:
    """(devices, used, resource->model, ignored custom resources) for one node."""
    devices: dict[str, int] = {}
    used: dict[str, int] = {}
    models: dict[str, str] = {}
    ignored: list[str] = []
    for resource, total in sorted(totals.items()):
        model = mapper.model_for(resource, accelerator_types)
        if model is None:
            if not is_ignored_resource(resource):
                ignored.append(resource)
            continue
        count = int(math.floor(float(total) + 1e-9))
        if count != float(total):
            mapper.warnings.append(f"ray: resource {resource!r} has a fractional total {total}; counted {count}")
        models[resource] = model
        devices[model] = devices.get(model, 0) + count
        if usage is not None:
            in_use = min(count, math.ceil(float(usage.get(resource, 0.0)) - 1e-9))
            used[model] = used.get(model, 0) + max(0, in_use)
    return devices, used, models, ignored


def usage_by_node(cluster_status: dict | None) -> dict[str, dict[str, list[float]]] | None:
    """node id -> camel-cased resource -> [used, total], or None where the report is missing."""
    if not cluster_status:
        return None
    report = ((cluster_status.get("data") or {}).get("clusterStatus") or {}).get("loadMetricsReport") or {}
    by_node = report.get("usageByNode")
    return by_node if isinstance(by_node, dict) else None


def node_usage(totals: dict[str, float], camel_usage: dict[str, list[float]], warnings: list[str], node_name: str) -> dict[str, float]:
    """Exact resource name -> used, through the camel-cased keys of the load report."""
    by_key: dict[str, list[str]] = {}
    for name in totals:
        by_key.setdefault(camel_key(name), []).append(name)
    used: dict[str, float] = {}
    for key, names in by_key.items():
        if key not in camel_usage:
            continue
        if len(names) > 1:
            warnings.append(f"ray: node {node_name!r}: resources {', '.join(sorted(names))} print as one key {key!r}; their use is not read")
            continue
        value = camel_usage[key]
        used[names[0]] = float(value[0]) if isinstance(value, list | tuple) and value else 0.0
    return used


def build_observation(
    nodes_reply: dict, cluster_status: dict | None, catalog: DeviceCatalog, overrides: dict[str, str] | None = None, version: dict | None = None
) -> InventoryObservation:
    """The observation for recorded / fetched dashboard replies (pure: unit-tested on fixtures)."""
    try:
        page = nodes_reply["data"]["result"]
        rows: list[dict] = list(page["result"])
    except (KeyError, TypeError) as exc:
        raise ConnectorError(f"ray: the state API's node list has an unexpected shape (missing {exc})") from exc
    mapper = ResourceMapper(catalog, overrides)
    warnings = mapper.warnings
    if page.get("partial_failure_warning"):
        warnings.append(f"ray: state API: {page['partial_failure_warning']}")
    if int(page.get("total", len(rows)) or 0) > len(rows):
        warnings.append(f"ray: the state API listed {len(rows)} of {page['total']} nodes (truncated)")
    usage = usage_by_node(cluster_status)
    sees = set(RayConnector.sees)
    if usage is None:
        sees.discard(SEES_USED)
        warnings.append("ray: the dashboard has no per-node load report (/api/cluster_status); devices in use are not read")

    alive = [r for r in rows if r.get("state") == "ALIVE"]
    names = _unique_names(alive, warnings)
    chosen: list[tuple[str, dict, NodeState]] = [(names[r["node_id"]], r, NodeState.READY) for r in alive]
    taken = set(names.values()) | {str(r.get("node_name") or r.get("node_ip") or "") for r in alive}
    # Unexpectedly dead incarnations -> DOWN (latest per name, unless the name is live again).
    dead = sorted((r for r in rows if r.get("state") == "DEAD"), key=lambda r: int(r.get("end_time_ms") or 0), reverse=True)
    removed = 0
    for row in dead:
        name = str(row.get("node_name") or row.get("node_ip") or row.get("node_id", "")[:8])
        if str(row.get("state_message") or "").startswith("Expected termination") or name in taken:
            removed += 1
            continue
        taken.add(name)
        chosen.append((name, row, NodeState.DOWN))

    observed: list[ObservedNode] = []
    cluster_total: dict[str, float] = {}
    cluster_used: dict[str, float] = {}
    resource_models: dict[str, dict[str, str]] = {}
    ignored_resources: dict[str, list[str]] = {}
    for name, row, state in chosen:
        totals = {str(k): float(v) for k, v in (row.get("resources_total") or {}).items()}
        node_use: dict[str, float] | None = None
        if usage is not None and state == NodeState.READY:
            camel = usage.get(row.get("node_id", ""))
            if camel is None:
                warnings.append(f"ray: node {name!r} is not in the load report yet; its devices in use are not read")
            else:
                node_use = node_usage(totals, camel, warnings, name)
        devices, used, models, ignored = map_node_resources(mapper, totals, node_use, accelerator_types_of(row))
        if state == NodeState.READY:
            for resource, total in totals.items():
                if not is_ignored_resource(resource) or resource in NOT_ACCELERATORS:
                    cluster_total[resource] = cluster_total.get(resource, 0.0) + total
                    if node_use is not None:
                        cluster_used[resource] = cluster_used.get(resource, 0.0) + node_use.get(resource, 0.0)
        labels = {str(k): str(v) for k, v in (row.get("labels") or {}).items()}
        labels[NODE_ID_LABEL] = str(row.get("node_id", ""))
        if models:
            resource_models[name] = models
        if ignored:
            ignored_resources[name] = ignored
        observed.append(
            ObservedNode(
                name=name,
                cpu_cores=int(totals.get("CPU", 0.0)),
                memory_gb=round(totals.get("memory", 0.0) / 2**30, 1),
                state=state,
                reason=str(row.get("state_message") or "") if state != NodeState.READY else "",
                devices=devices,
                used=used,  # empty where unknown (DOWN, or not in the load report: warned above)
                labels=labels,
                # No resource names here: the sync guesses an unknown model's class from extra.
                extra={
                    "ray_node_id": row.get("node_id", ""),
                    "ray_node_ip": row.get("node_ip", ""),
                    "ray_head": bool(row.get("is_head_node")),
                    "ray_start_time_ms": row.get("start_time_ms"),
                },
            )
        )
    extra: dict[str, Any] = {
        "resources_total": dict(sorted(cluster_total.items())),
        "alive_nodes": len(alive),
        "dead_nodes": len(dead),
        "dead_nodes_removed": removed,
        "resource_models": resource_models,
        "ignored_resources": ignored_resources,
    }
    if usage is not None:
        extra["resources_used"] = dict(sorted(cluster_used.items()))
    if version:
        extra["ray_version"] = version.get("ray_version", "")
        extra["session_name"] = version.get("session_name", "")
    return InventoryObservation(connector="ray", sees=frozenset(sees), nodes=observed, warnings=warnings, extra=extra)


def _unique_names(alive: list[dict], warnings: list[str]) -> dict[str, str]:
    """node_id -> name; live nodes sharing a name get `<name>-<node_id[:8]>`."""
    by_name: dict[str, list[dict]] = {}
    for row in alive:
        by_name.setdefault(str(row.get("node_name") or row.get("node_ip") or row.get("node_id", "")[:8]), []).append(row)
    names: dict[str, str] = {}
    for name, group in by_name.items():
        if len(group) == 1:
            names[group[0]["node_id"]] = name
            continue
        warnings.append(f"ray: {len(group)} live nodes are named {name!r}; reported as {name}-<node id[:8]> (start them with distinct --node-name)")
        for row in group:
            names[row["node_id"]] = f"{name}-{str(row['node_id'])[:8]}"
    return names


class RayConnector(InventoryConnector):
    kind = "ray"
    sees = frozenset({SEES_NODES, SEES_DEVICES, SEES_USED, SEES_STATES, SEES_LABELS})

    def __init__(self, config: dict[str, str], catalog: DeviceCatalog, transport: httpx.BaseTransport | None = None) -> None:
        self.dashboard = RayDashboard(config, transport)
        self.address = self.dashboard.address
        self.catalog = catalog
        # Keys lower-cased: the inventory matches resource names case-insensitively.
        self.overrides = {k.lower(): v for k, v in parse_resource_models(config.get("resource_models", "")).items()}

    def _get(self, client: httpx.Client, path: str) -> Any:
        url = self.address + path
        try:
            resp = client.get(url)
        except httpx.HTTPError as exc:
            raise ConnectorError(f"ray: cannot read {url}: {exc.__class__.__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise ConnectorError(f"ray: {url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            body = resp.json()
        except ValueError as exc:
            raise ConnectorError(f"ray: {url} did not answer JSON: {resp.text[:200]!r}") from exc
        if isinstance(body, dict) and body.get("result") is False:
            raise ConnectorError(f"ray: {url} reported an error: {body.get('msg', '')}")
        return body

    def fetch(self) -> InventoryObservation:
        with self.dashboard.open() as client:
            version = self._get(client, "/api/version")
            nodes = self._get(client, NODES_PATH)
            try:
                status = self._get(client, "/api/cluster_status")
                status_error = ""
            except ConnectorError as exc:  # devices and states are still right without it
                status, status_error = None, str(exc)
        obs = build_observation(nodes, status, self.catalog, self.overrides, version if isinstance(version, dict) else None)
        if status_error:
            obs.warnings.append(status_error)
        obs.extra["address"] = self.address
        return obs
