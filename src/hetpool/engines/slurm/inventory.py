"""Slurm inventory connector: nodes, typed GRES, GRES in use, states, partitions and features.

It runs two read-only commands on a host that can talk to slurmctld (Slurm 22.05 and later):

    scontrol --all --oneliner --details show node        # one line per node, GresUsed needs --details
    scontrol --all --oneliner show partition

Config (a Cluster's `backend_config`; all values are strings):

- `conf`       path of slurm.conf, passed as `SLURM_CONF` in the commands' environment
               (optional; without it the commands use their built-in default / the
               server's own `SLURM_CONF`).
- `bin_dir`    directory holding `scontrol` (optional; default: the server's PATH).
- `gres_models` overrides of the GRES -> catalog model mapping, comma-separated
               `name:type=model` pairs, e.g. `gpu:a100=nvidia-a100-80g,npu:910b=ascend-910b3`.
               `name=model` (no type) maps untyped GRES such as `gpu:4`. Every model must be
               in the catalog (checked when the connector is built).
- `timeout_s`  seconds each command may take (default 15).

Other keys of `backend_config` (node_prefix, sync, sync_interval_s …) belong to the sync
service and are ignored here.

What one node becomes:
- cpu_cores = CPUTot, memory_gb = RealMemory / 1024, arch = Arch (x86_64 / aarch64).
- state from State (see `map_state`); reason = Reason without its `[user@time]` stamp
  (who and when go to `extra`); a non-ready node without a Reason gets the raw state.
- devices / used from Gres / GresUsed, per catalog model (`model_for_gres`, overrides
  first). A GRES type the catalog does not know, or a GRES without a type (`gpu:4`), is
  kept as `unknown-<name>-<type>` with a warning — never dropped. `mps` and `shard`
  are slices of GPUs already counted, so they go to `extra["gres_shared"]`, not devices.
- features = ActiveFeatures (AvailableFeatures / Features on other versions); each one
  is also a label `hetpool.io/feature.<f>: "true"`.
- partitions = the node's Partitions; labels `hetpool.io/slurm.partition: "<p1>,<p2>"`
  (Slurm's order) and `hetpool.io/slurm.partition.<p>: "true"` per partition, so a
  selector can test membership of one partition.

Not seen: taints (Slurm has none) and the software stack (Slurm does not report driver or
runtime versions). slurmrestd is not supported yet: the `restd_url` key is rejected so a
configuration that expects it fails loudly instead of silently using scontrol.
"""

from __future__ import annotations

import re

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.base import (
    SEES_DEVICES,
    SEES_LABELS,
    SEES_NODES,
    SEES_PARTITIONS,
    SEES_STATES,
    SEES_USED,
    ConnectorError,
    InventoryConnector,
    InventoryObservation,
    NodeState,
    ObservedNode,
    unknown_model,
)
from hetpool.engines.slurm.client import SlurmCommands
from hetpool.engines.slurm.config import SlurmAccess, gres_overrides
from hetpool.engines.slurm.gres import NULL as _NULL
from hetpool.engines.slurm.gres import SHARED_GRES as _SHARED_GRES
from hetpool.engines.slurm.gres import GresEntry, model_for_gres, parse_gres

FEATURE_LABEL = "hetpool.io/feature."
PARTITION_LABEL = "hetpool.io/slurm.partition"

# A key starts a field at the start of the line or after whitespace; Slurm's keys are
# CamelCase, so lower-case words with "=" inside free text (OS=, Reason=) stay in the value.
_KEY_RE = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_]*)=")
# Reason always ends with "[user@2026-11-30T16:16:02]"; anything up to it is the reason, even
# text that looks like "Key=value".
_STAMP_RE = re.compile(r"\s*\[([^\]@\s]*)@(\d{4}-\d\d-\d\dT[\d:]+)\]")
_STAMPED_KEYS = {"Reason"}


# -- pure parsers (unit-tested on captured scontrol output) ------------------------------


def parse_kv_line(line: str) -> dict[str, str]:
    """`Key=value Key2=value with spaces …` (one `scontrol -o` line) -> {key: value}.

    Values may contain spaces (OS=Linux 6.1 #1 SMP …, Reason=Not responding [slurm@…]):
    a value runs until the next CamelCase `Key=`, and Reason until its `[user@time]` stamp.
    """
    line = line.strip()
    fields: dict[str, str] = {}
    pos = 0
    while (match := _KEY_RE.search(line, pos)) is not None:
        key, start = match.group(1), match.end()
        end = None
        if key in _STAMPED_KEYS and (stamp := _STAMP_RE.search(line, start)) is not None:
            end = stamp.end()
        if end is None:
            following = _KEY_RE.search(line, start)
            end = following.start() if following else len(line)
        fields[key] = line[start:end].strip()
        pos = end
    return fields


# Base states (the part before the first "+") and what they mean for new work.
_READY_BASES = {"IDLE", "MIXED", "ALLOCATED", "ALLOC", "MIX", "COMPLETING", "COMP"}
_BUSY_BASES = {"MIXED", "ALLOCATED", "ALLOC", "MIX", "COMPLETING", "COMP"}
_DOWN_WORDS = {"DOWN", "NOT_RESPONDING", "FAIL", "FAILING", "FUTURE", "INVAL", "INVALID", "INVALID_REG", "ERROR", "REBOOT_ISSUED", "POWERING_DOWN"}


def map_state(state: str) -> NodeState:
    """Slurm node state -> hetpool state.

    `IDLE`, `MIXED`, `ALLOCATED`, `COMPLETING` -> READY (flags such as DYNAMIC_NORM, CLOUD,
    RESERVED, MAINTENANCE, POWERED_DOWN, REBOOT_REQUESTED do not stop new work);
    DRAIN with jobs still on the node (`MIXED+DRAIN`, sinfo's `draining`) -> DRAINING;
    DRAIN on an idle node (`IDLE+DRAIN`, `drained`) -> DRAINED;
    DOWN, NOT_RESPONDING (sinfo's trailing `*`), FAIL, FUTURE, INVAL, REBOOT_ISSUED,
    POWERING_DOWN -> DOWN (down wins over drain); anything else -> UNKNOWN.
    """
    text = state.strip().upper()
    if not text:
        return NodeState.UNKNOWN
    words: list[str] = []
    for word in re.split(r"[+\s]+", text):
        # "IDLE*" / "DOWN*" (sinfo, some scontrol builds): not responding; "$", "~", "#",
        # "!", "%", "@", "^", "-" are reservation / power / reboot markers.
        if word.endswith("*"):
            words.append("NOT_RESPONDING")
        word = word.rstrip("*$~#!%@^-")
        if word:
            words.append(word)
    flags = set(words)
    if flags & _DOWN_WORDS:
        return NodeState.DOWN
    base = words[0] if words else ""
    if "DRAINING" in flags:
        return NodeState.DRAINING
    if "DRAINED" in flags:
        return NodeState.DRAINED
    if "DRAIN" in flags:
        return NodeState.DRAINING if (base in _BUSY_BASES or "COMPLETING" in flags) else NodeState.DRAINED
    if base in _READY_BASES:
        return NodeState.READY
    return NodeState.UNKNOWN


def _features(fields: dict[str, str]) -> list[str]:
    for key in ("ActiveFeatures", "AvailableFeatures", "Features"):
        value = fields.get(key, "").strip()
        if key in fields and value not in _NULL:
            return [f.strip() for f in value.split(",") if f.strip()]
    return []


def _label_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._") or "x"


def _arch(raw: str) -> str:
    raw = raw.strip().lower()
    return {"amd64": "x86_64", "x86-64": "x86_64", "arm64": "aarch64"}.get(raw, raw or "x86_64")


def _number(fields: dict[str, str], *keys: str) -> float | None:
    for key in keys:
        try:
            return float(fields[key])
        except (KeyError, ValueError):
            continue
    return None


def _devices(
    node: str, entries: list[GresEntry], catalog: DeviceCatalog, overrides: dict[str, str], warnings: list[str] | None
) -> tuple[dict[str, int], dict[str, int]]:
    """{model: count} for device GRES and {"mps": n} for shared ones; warns (once) per unknown."""
    devices: dict[str, int] = {}
    shared: dict[str, int] = {}
    for entry in entries:
        if entry.name.lower() in _SHARED_GRES:
            shared[entry.name] = shared.get(entry.name, 0) + entry.count
            continue
        model = model_for_gres(entry.name, entry.type, catalog, overrides)
        if model is None:
            model = unknown_model(entry.name, entry.type)
            if warnings is not None:
                if entry.type:
                    warnings.append(
                        f"node {node!r}: GRES {entry.name}:{entry.type} is not in the device catalog; "
                        f"recorded as {model} (map it with backend_config gres_models)"
                    )
                else:
                    warnings.append(
                        f"node {node!r}: GRES {entry.name!r} has no type, so its model cannot be told; "
                        f"recorded as {model} (type it in slurm.conf or map it with gres_models '{entry.name}=<model>')"
                    )
        devices[model] = devices.get(model, 0) + entry.count
    return devices, shared


def parse_node_line(line: str, catalog: DeviceCatalog, overrides: dict[str, str] | None = None) -> tuple[ObservedNode, list[str]]:
    """One `scontrol -o -d show node` line -> (node, warnings)."""
    fields = parse_kv_line(line)
    name = fields.get("NodeName", "")
    if not name:
        raise ConnectorError(f"slurm: node line without NodeName: {line[:200]!r}")
    overrides = overrides or {}
    warnings: list[str] = []

    raw_state = fields.get("State", "")
    state = map_state(raw_state)
    extra: dict = {"slurm_state": raw_state}
    reason = fields.get("Reason", "")
    if (stamp := _STAMP_RE.search(reason)) is not None:
        extra["reason_by"], extra["reason_at"] = stamp.group(1), stamp.group(2)
        reason = reason[: stamp.start()].strip()
    if reason in _NULL:
        reason = ""
    if not reason and state != NodeState.READY:
        reason = f"slurm state {raw_state or 'missing'}"
    if state == NodeState.UNKNOWN:
        warnings.append(f"node {name!r}: Slurm state {raw_state!r} is not understood; reported as unknown")

    gres_text = fields.get("Gres", "")
    devices, shared = _devices(name, parse_gres(gres_text), catalog, overrides, warnings)
    if gres_text not in _NULL:
        extra["slurm_gres"] = gres_text
    if shared:
        extra["gres_shared"] = shared
    used: dict[str, int] = {}
    if "GresUsed" in fields:
        # Unknown models were already warned about from Gres; zero entries ("npu:0") mean nothing.
        in_use, _ = _devices(name, parse_gres(fields["GresUsed"]), catalog, overrides, None)
        used = {model: n for model, n in in_use.items() if n > 0}
    elif devices:
        warnings.append(f"node {name!r}: no GresUsed in scontrol output (needs --details); devices in use unknown")

    cpus = _number(fields, "CPUTot", "CPUEfctv", "CPUs")
    memory_mb = _number(fields, "RealMemory")
    if cpus is None or memory_mb is None:
        warnings.append(f"node {name!r}: CPUTot or RealMemory missing or unreadable; counted as 0")

    features = _features(fields)
    partitions = [p for p in fields.get("Partitions", "").split(",") if p.strip() and p.strip() not in _NULL]
    labels = {f"{FEATURE_LABEL}{_label_part(f)}": "true" for f in features}
    if partitions:
        labels[PARTITION_LABEL] = ",".join(partitions)
        labels.update({f"{PARTITION_LABEL}.{_label_part(p)}": "true" for p in partitions})
    if fields.get("Version"):
        extra["slurm_version"] = fields["Version"]

    node = ObservedNode(
        name=name,
        cpu_cores=int(cpus or 0),
        memory_gb=round((memory_mb or 0) / 1024, 2),
        state=state,
        reason=reason,
        arch=_arch(fields.get("Arch", "")),
        devices=devices,
        used=used,
        labels=labels,
        partitions=partitions,
        features=features,
        extra=extra,
    )
    return node, warnings


def parse_partition_line(line: str) -> dict:
    """One `scontrol -o show partition` line -> the facts shown to operators."""
    fields = parse_kv_line(line)

    def as_int(key: str) -> int | None:
        try:
            return int(fields[key])
        except (KeyError, ValueError):
            return None

    return {
        "name": fields.get("PartitionName", ""),
        "state": fields.get("State", ""),
        "default": fields.get("Default", "NO").upper() == "YES",
        "hidden": fields.get("Hidden", "NO").upper() == "YES",
        "nodes": "" if fields.get("Nodes", "") in _NULL else fields.get("Nodes", ""),
        "total_nodes": as_int("TotalNodes"),
        "total_cpus": as_int("TotalCPUs"),
        "max_time": fields.get("MaxTime", ""),
    }


def build_observation(node_text: str, partition_text: str, catalog: DeviceCatalog, overrides: dict[str, str] | None = None) -> InventoryObservation:
    """The observation from the two commands' output (pure: no Slurm needed)."""
    obs = InventoryObservation(connector=SlurmConnector.kind, sees=SlurmConnector.sees)
    for line in node_text.splitlines():
        if "NodeName=" not in line:
            continue  # "No nodes in the system", blank lines
        node, warnings = parse_node_line(line, catalog, overrides)
        obs.nodes.append(node)
        obs.warnings.extend(warnings)
    partitions = [parse_partition_line(line) for line in partition_text.splitlines() if "PartitionName=" in line]
    obs.extra["partitions"] = {p["name"]: {k: v for k, v in p.items() if k != "name"} for p in partitions}
    for p in partitions:
        if p["state"] and p["state"].upper() != "UP":
            obs.warnings.append(f"partition {p['name']!r} is {p['state']}: its nodes take no new jobs through it")
    return obs


# -- the connector ---------------------------------------------------------------------


class SlurmConnector(InventoryConnector):
    kind = "slurm"
    sees = frozenset({SEES_NODES, SEES_DEVICES, SEES_USED, SEES_STATES, SEES_PARTITIONS, SEES_LABELS})

    def __init__(self, config: dict[str, str], catalog: DeviceCatalog) -> None:
        self.catalog = catalog
        if config.get("restd_url"):
            raise ConnectorError("slurm: restd_url (slurmrestd) is not supported yet; remove it to read Slurm with scontrol")
        try:
            self.commands = SlurmCommands(SlurmAccess.from_config(config))
            self.overrides = gres_overrides(config, catalog)
        except ValueError as exc:
            raise ConnectorError(str(exc)) from None

    def fetch(self) -> InventoryObservation:
        try:
            # --all: hidden partitions too; --details: GresUsed; --oneliner: one node per line.
            nodes = self.commands.output("scontrol", "--all", "--oneliner", "--details", "show", "node")
            partitions = self.commands.output("scontrol", "--all", "--oneliner", "show", "partition")
        except BackendUnavailableError as exc:
            raise ConnectorError(str(exc)) from exc
        return build_observation(nodes, partitions, self.catalog, self.overrides)
